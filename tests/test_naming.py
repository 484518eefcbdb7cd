from jax.tree_util import DictKey, GetAttrKey, SequenceKey

from multiexport.naming import assign_aliases, base_alias, join_name


def test_join_name_uses_parameter_name_and_key_path():
    assert join_name("params", (DictKey("Dense_0"), DictKey("kernel"))) == "params.Dense_0.kernel"
    assert join_name("foo", (GetAttrKey("bar"),)) == "foo.bar"
    assert join_name("xs", (SequenceKey(0),)) == "xs.0"
    assert join_name("out", ()) == "out"


def test_base_alias_is_a_valid_identifier_starting_with_a_letter():
    assert base_alias("params.Dense_0.kernel") == "params_Dense_0_kernel"
    assert base_alias("0.x") == "v0_x"
    assert base_alias("_private") == "v_private"
    assert base_alias("a-b/c d") == "a_b_c_d"
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
