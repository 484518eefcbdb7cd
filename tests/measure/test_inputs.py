import numpy as np
import pytest

from multiexport import UsageError
from multiexport.leaves import Leaf
from multiexport.measure.inputs import DEFAULT_INT_RANGE, make_trials, parse_dim_sizes, parse_val_ranges


def leaves():
    return [
        Leaf("batch.tokens", "batch_tokens", ("b", 6), "int32"),
        Leaf("batch.mask", "batch_mask", ("b", 6), "bool"),
        Leaf("batch.x", "batch_x", ("b", 3), "float32"),
        Leaf("table", "table", (100, 4), "float32"),
        Leaf("pos", "pos", (6,), "int32"),
    ]


def test_random_trials_cover_every_dim_size_and_respect_dtypes():
    trials = make_trials(leaves(), trials=2, dim_sizes={"b": (1, 8, 64)})
    assert [t.dims["b"] for t in trials] == [1, 1, 8, 8, 64, 64]
    for t in trials:
        assert t.feed["batch.tokens"].shape == (t.dims["b"], 6) and t.feed["batch.tokens"].dtype == np.int32
        assert t.feed["batch.mask"].dtype == np.bool_
        assert t.feed["batch.x"].dtype == np.float32
        lo, hi = DEFAULT_INT_RANGE
        assert lo <= t.feed["pos"].min() and t.feed["pos"].max() < hi
    assert not np.array_equal(trials[0].feed["batch.x"], trials[1].feed["batch.x"])


def test_trials_are_reproducible_from_the_seed():
    a = make_trials(leaves(), seed=3)
    b = make_trials(leaves(), seed=3)
    c = make_trials(leaves(), seed=4)
    assert all(np.array_equal(x.feed[k], y.feed[k]) for x, y in zip(a, b) for k in x.feed)
    assert not np.array_equal(a[0].feed["batch.x"], c[0].feed["batch.x"])


def test_value_ranges_are_honoured_per_leaf_with_globs():
    ranges = parse_val_ranges(["batch.tokens=0:100", "batch.x=-0.5:0.5"])
    trials = make_trials(leaves(), trials=3, val_ranges=ranges, dim_sizes={"b": (16,)})
    tokens = np.concatenate([t.feed["batch.tokens"].ravel() for t in trials])
    assert tokens.min() >= 0 and tokens.max() < 100 and tokens.max() >= 50  # the range is used, not the default
    xs = np.concatenate([t.feed["batch.x"].ravel() for t in trials])
    assert xs.min() >= -0.5 and xs.max() < 0.5
    assert max(t.feed["pos"].max() for t in trials) < DEFAULT_INT_RANGE[1]  # other leaves untouched
    glob = make_trials(leaves(), trials=1, val_ranges=parse_val_ranges(["batch.*=10:12"]))
    assert set(np.unique(glob[0].feed["batch.tokens"])) <= {10, 11}


def test_example_values_come_first_when_complete():
    example = {leaf.name: np.zeros(tuple(2 if d == "b" else d for d in leaf.shape), leaf.dtype) for leaf in leaves()}
    trials = make_trials(leaves(), examples=example, trials=1)
    assert trials[0].name == "example" and trials[0].dims == {"b": 2}
    assert [t.name for t in trials[1:]] == ["random0 b=1", "random0 b=5"]


@pytest.mark.parametrize("bad, parser, message", [
    ("batch.tokens=5:1", parse_val_ranges, "LOW < HIGH"),
    ("batch.tokens", parse_val_ranges, "expected LEAF=LOW:HIGH"),
    ("b=0,2", parse_dim_sizes, "sizes >= 1"),
    ("b=x", parse_dim_sizes, "expected NAME=SIZE"),
])
def test_bad_specs_are_usage_errors(bad, parser, message):
    with pytest.raises(UsageError, match=message):
        parser([bad])


def test_unknown_patterns_and_dims_are_rejected():
    with pytest.raises(UsageError, match="Value range 'batch.tokenz'"):
        make_trials(leaves(), val_ranges={"batch.tokenz": (0, 1)})
    with pytest.raises(UsageError, match=r"Dimension 'n' \| not symbolic"):
        make_trials(leaves(), dim_sizes={"n": (1,)})


def test_trials_stay_in_the_examples_domain():
    """A BatchNorm variance stays positive, a mask stays 0/1, a -inf bias stays, token ids stay in range."""
    rng = np.random.default_rng(0)
    var = rng.uniform(0.01, 3.0, size=(16,)).astype(np.float32)
    scale = np.ones(16, np.float32)
    mask = (rng.uniform(size=(3, 8)) > 0.5).astype(np.float32)
    bias = np.where(np.triu(np.ones((8, 8))) > 0, 0.0, -np.inf).astype(np.float32)
    tokens = rng.integers(10, 50, size=(3, 8)).astype(np.int32)
    steps = np.zeros((3,), np.int32)
    shapes = {"var": (16,), "scale": (16,), "mask": ("b", 8), "bias": (8, 8), "tokens": ("b", 8), "steps": ("b",)}
    dtypes = {"var": "float32", "scale": "float32", "mask": "float32", "bias": "float32", "tokens": "int32",
              "steps": "int32"}
    ls = [Leaf(n, n, shapes[n], dtypes[n]) for n in shapes]
    examples = {"var": var, "scale": scale, "mask": mask, "bias": bias, "tokens": tokens, "steps": steps}
    trials = make_trials(ls, examples=examples, trials=4, dim_sizes={"b": (1, 5)})
    assert trials[0].name == "example"
    for t in trials[1:]:
        assert (t.feed["var"] > 0).all()
        assert (t.feed["scale"] > 0).all()
        assert set(np.unique(t.feed["mask"])) <= {0.0, 1.0}
        assert set(np.unique(t.feed["bias"])) <= {0.0, -np.inf}
        assert t.feed["tokens"].min() >= 10 and t.feed["tokens"].max() <= 49
        assert t.feed["tokens"].shape == (t.dims["b"], 8)
    assert any(t.feed["steps"].any() for t in trials[1:]), "an all-zeros int example must not make every trial zeros"
    assert any(not np.array_equal(t.feed["var"], var) for t in trials[1:]), "trials must differ from the example"
    spread = max(float(np.abs(t.feed["var"] - var).max()) for t in trials[1:])
    assert spread < 3 * var.std(), "perturbations stay near the example"
