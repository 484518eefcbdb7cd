import numpy as np
import pytest

from multiexport import InputError
from multiexport.exporting.feed import check_feed
from multiexport.exporting.manifest import LeafBinding


def leaves():
    return [
        LeafBinding("batch.x", "batch_x", ["b", 4], "float32", used=True, param=0),
        LeafBinding("batch.mask", "batch_mask", ["b"], "bool", used=False, param=None),
        LeafBinding("w", "w", [4, 2], "float32", used=True, param=1),
    ]


def feed(b=3):
    return {"batch.x": np.zeros((b, 4), np.float32), "w": np.zeros((4, 2), np.float32)}


def test_valid_feed_binds_symbols_and_fills_dropped_leaves():
    arrays, bound = check_feed(leaves(), feed(3))
    assert bound == {"b": 3}
    assert [a.shape for a in arrays] == [(3, 4), (3,), (4, 2)]
    assert arrays[1].dtype == np.bool_ and not arrays[1].any()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f: f.update({"batch.y": np.zeros(1)}), r"Input 'batch\.y' \| got a name the artifact does not have"),
        (lambda f: f.update({"batch_x": f.pop("batch.x")}), "did you mean 'batch.x'"),
        (lambda f: f.pop("w"), r"Input 'w' \| got nothing, expected an array"),
        (lambda f: f.update({"w": np.zeros((4, 2), np.float64)}), r"Input 'w' \| got float64, expected float32"),
        (lambda f: f.update({"w": np.zeros((4, 3), np.float32)}), r"Input 'w' \| got shape \(4, 3\), expected shape \(4, 2\)"),
        (lambda f: f.update({"w": np.zeros((8,), np.float32)}), r"Input 'w' \| got shape \(8,\)"),
        (lambda f: f.update({"batch.mask": np.zeros(5, bool)}), "b=5 .* expected b=3 as bound by 'batch.x'"),
        (lambda f: f.update({"batch.x": np.zeros((0, 4), np.float32)}), "b >= 1"),
    ],
)
def test_bad_feeds_name_the_leaf(change, message):
    f = feed(3)
    change(f)
    with pytest.raises(InputError, match=message):
        check_feed(leaves(), f)


def test_feed_must_be_a_mapping():
    with pytest.raises(InputError, match="expected a mapping"):
        check_feed(leaves(), [np.zeros(1)])
