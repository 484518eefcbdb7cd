import pytest
from jax.tree_util import DictKey, GetAttrKey, SequenceKey

from multiexport.leaves.naming import assign_aliases, base_alias, component, join_name, split_name


def test_join_name_uses_parameter_name_and_key_path():
    assert join_name("params", (DictKey("Dense_0"), DictKey("kernel"))) == "params.Dense_0.kernel"
    assert join_name("foo", (GetAttrKey("bar"),)) == "foo.bar"
    assert join_name("xs", (SequenceKey(0),)) == "xs.0"
    assert join_name("out", ()) == "out"


@pytest.mark.parametrize("key", ["a.b", "", "x y", 'q"uote', "back\\slash", "new\nline", "'", "\"lead", "tab\t"])
def test_keys_that_could_be_misread_are_quoted_and_split_back(key):
    name = join_name("d", (DictKey(key), DictKey("leaf")))
    assert name != f"d.{key}.leaf" or key == ""
    assert split_name(name) == ["d", key, "leaf"]


def test_a_dotted_key_and_a_nested_path_get_different_names():
    dotted = join_name("d", (DictKey("a.b"),))
    nested = join_name("d", (DictKey("a"), DictKey("b")))
    assert dotted == 'd."a.b"' and nested == "d.a.b" and dotted != nested


@pytest.mark.parametrize("key", [3, (1, 2), None, b"bytes", 2.5, True])
def test_non_string_keys_get_a_component_that_cannot_collide_with_a_string(key):
    text = component(key)
    if isinstance(key, int) and not isinstance(key, bool):
        assert text == str(key)
    else:
        assert text.startswith('"') and split_name(f"x.{text}")[1] == repr(key)


def test_unicode_and_markup_keys_stay_as_they_are():
    assert join_name("d", (DictKey("ключ"), DictKey("[/]"))) == "d.ключ.[/]"
    assert split_name("d.ключ.[/]") == ["d", "ключ", "[/]"]


def test_base_alias_is_a_valid_identifier_starting_with_a_letter():
    assert base_alias("params.Dense_0.kernel") == "params_Dense_0_kernel"
    assert base_alias("0.x") == "v0_x"
    assert base_alias("_private") == "v_private"
    assert base_alias("a-b/c d") == "a_b_c_d"
    assert base_alias("ключ") .isidentifier() and base_alias("ключ").isascii()
    long = base_alias("x." * 200)
    assert len(long) <= 120 and long.isidentifier()
    assert base_alias("x." * 200) != base_alias("x." * 201)


def test_collisions_are_resolved_deterministically_and_reported():
    aliases, collisions = assign_aliases(["a.b", "a_b", "c"])
    # the name that already is its alias keeps it; the other gets a suffix
    assert aliases == ["a_b_2", "a_b", "c"]
    assert len(collisions) == 1 and collisions[0].names == ("a.b", "a_b")
    assert "a_b_2" in collisions[0].describe()
    assert assign_aliases(["a.b", "a_b", "c"]) == (aliases, collisions)


def test_collision_suffix_skips_taken_aliases_and_ignores_case():
    aliases, collisions = assign_aliases(["a.b", "a-b", "a_b_2", "A.b"])
    assert len(set(a.lower() for a in aliases)) == 4
    assert aliases[2] == "a_b_2"
    assert len(collisions) == 1 and set(collisions[0].names) == {"a.b", "a-b", "A.b"}


def test_unique_names_keep_their_base_alias():
    aliases, collisions = assign_aliases(["foo.bar", "foo.baz"])
    assert aliases == ["foo_bar", "foo_baz"] and collisions == []
