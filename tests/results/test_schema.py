"""The results codec (multiexport.results.schema): a wrong value is one line naming its path, what it got
and everything the field's type allows."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pytest

from multiexport.errors import ArtifactError, InputError
from multiexport.exporting.manifest import LeafBinding
from multiexport.results import Binding
from multiexport.results.schema import from_data


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass
class Inner:
    size: int


@dataclass
class Record:
    dims: list[int | str]
    flag: bool | None = None
    count: int | float | None = None
    mode: Mode | None = None
    inner: Inner | None = None
    sizes: list[int] | str | None = None


@pytest.mark.parametrize("data, message", [
    ({"dims": [True]}, "record.dims[0] | got a boolean, expected an integer or a string"),
    ({"dims": [], "flag": "yes"}, "record.flag | got str 'yes', expected true, false or null"),
    ({"dims": [], "count": "3"}, "record.count | got str '3', expected an integer, a number or null"),
    ({"dims": [], "mode": "quick"}, "record.mode | got 'quick', expected one of fast, slow or null"),
    ({"dims": [], "inner": 3}, "record.inner | got int '3', expected an object or null"),
    ({"dims": [], "sizes": {}}, "record.sizes | got dict, expected a list, a string or null"),
])
def test_a_wrong_value_for_a_union_names_every_option(data, message):
    with pytest.raises(InputError) as caught:
        from_data(Record, data, "record")
    assert str(caught.value) == message


@pytest.mark.parametrize("data, message", [
    ({"dims": [], "sizes": [1, "x"]}, "record.sizes[1] | got str 'x', expected an integer"),
    ({"dims": [], "inner": {}}, "record.inner | has no 'size', expected one"),
    ({"dims": [], "inner": {"size": 1.5}}, "record.inner.size | got float '1.5', expected an integer"),
])
def test_a_value_of_one_option_wrong_inside_names_the_part_that_is_wrong(data, message):
    with pytest.raises(InputError) as caught:
        from_data(Record, data, "record")
    assert str(caught.value) == message


def test_a_single_type_keeps_its_wording():
    with pytest.raises(InputError, match=r"^record.inner.size \| got str 'a', expected an integer$"):
        from_data(Record, {"dims": [], "inner": {"size": "a"}}, "record")
    with pytest.raises(InputError, match=r"^binding.used \| got int '1', expected true or false$"):
        from_data(Binding, {"name": "x", "used": 1}, "binding")


def test_the_results_and_manifest_unions_list_every_option():
    with pytest.raises(InputError, match=r"^binding.param \| got list, expected an integer, a string or null$"):
        from_data(Binding, {"name": "x", "used": True, "param": []}, "binding")
    leaf = {"name": "x", "alias": "x", "shape": [2, None], "dtype": "float32"}
    with pytest.raises(ArtifactError, match=r"^leaf.shape\[1\] \| got null, expected an integer or a string$"):
        LeafBinding.from_json(leaf, "leaf")


def test_values_of_any_option_still_load():
    r = from_data(Record, {"dims": [3, "b"], "flag": None, "count": 2.5, "mode": "slow", "inner": {"size": 1},
                           "sizes": "all"}, "record")
    assert r == Record([3, "b"], None, 2.5, Mode.SLOW, Inner(1), "all")
    assert from_data(Record, {"dims": [], "count": 2, "sizes": [1, 2]}, "record").count == 2
