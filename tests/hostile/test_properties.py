"""Property-based hostile input (issue 16): generated pytrees, manifests, .npz files and results.json files.

The contract, for every generated input: either a refusal with a typed multiexport error (a MultiexportError
subclass; from the command line exit 2 or 3 with one stderr line) or a success whose names are unique and
whose aliases are identifiers; never another exception, never a traceback, never a file outside the output
directory. Profiles (tests/hostile/conftest.py): "default" bounded and derandomized, "nightly" 1000
examples ($HYPOTHESIS_PROFILE=nightly).
"""

from __future__ import annotations

import copy
import io
import json
import re
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import event, example, given, settings, strategies as st

from multiexport import MultiexportError, Target

from .conftest import run_main, stderr_lines

IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
FEW = max(4, settings().max_examples // 5)  # for the properties that export or run an artifact per example

# -- hostile pytrees ---------------------------------------------------------------------------------------------

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
          ml_dtypes.float8_e5m2,
          ml_dtypes.float4_e2m1fn, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, np.int8, np.int32, np.uint8,
          np.uint32, np.bool_, np.complex64]
NASTY_KEYS = [".", "..", "/", "a/b", "../../x", "a.b", "\n", "a\nb", "[/]", "[bold]x[/]", "<b>", "<script>", "",
              '"', "\\", "\x00", "日本", "ñ", "x" * 200, "con", "nul.txt", " ", "\t", "a b", "__dtypes__",
              "out", "0", "-1", "x.npy"]

str_keys = st.one_of(st.sampled_from(NASTY_KEYS), st.text(max_size=6))
int_keys = st.integers(-3, 10**12)
tuple_keys = st.tuples(st.integers(0, 3), st.integers(0, 3))


@st.composite
def arrays(draw, allow_abstract: bool = True):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    if allow_abstract and draw(st.integers(0, 5)) == 0:  # large but never allocated
        import jax

        shape = tuple(draw(st.lists(st.sampled_from([0, 1, 7, 10**6, 2**31]), min_size=1, max_size=3)))
        return jax.ShapeDtypeStruct(shape, dtype)
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))  # 0-d, empty and small
    size = int(np.prod(shape, dtype=np.int64))
    if dtype.kind == "b":
        return np.asarray(draw(st.lists(st.booleans(), min_size=size, max_size=size)), dtype).reshape(shape)
    raw = np.arange(size) % 5 - 2
    if dtype.kind == "u" or dtype == np.dtype(ml_dtypes.uint4):
        raw = np.abs(raw)
    return raw.astype(dtype).reshape(shape)


def trees(allow_abstract: bool = True):
    """Nested dicts (string, int, tuple and mixed keys), lists and tuples of arrays; a bare leaf too."""
    def extend(children):
        return st.one_of(
            st.dictionaries(str_keys, children, min_size=1, max_size=3),
            st.dictionaries(int_keys, children, min_size=1, max_size=2),
            st.dictionaries(tuple_keys, children, min_size=1, max_size=2),
            st.builds(lambda a, b: {**a, **b}, st.dictionaries(str_keys, children, min_size=1, max_size=2),
                      st.dictionaries(int_keys, children, min_size=1, max_size=2)),  # mixed: a typed refusal
            st.lists(children, min_size=1, max_size=3),
            st.tuples(children),
        )

    return st.recursive(arrays(allow_abstract), extend, max_leaves=6)


def _check_names(leaves) -> None:
    from multiexport.leaves.naming import split_name

    names = [leaf.name for leaf in leaves]
    assert len(set(names)) == len(names), f"duplicate names: {names}"
    aliases = [leaf.alias for leaf in leaves]
    assert all(IDENTIFIER.match(a) for a in aliases), aliases
    assert len({a.lower() for a in aliases}) == len(aliases), f"aliases collide (case-insensitively): {aliases}"
    for name in names:
        assert split_name(name), name


@given(tree=trees())
def test_any_pytree_gets_unique_names_and_identifier_aliases_or_a_typed_refusal(tree):
    from multiexport.leaves import build_signature

    try:
        sig = build_signature(Target(lambda t: t, args=(tree,), name="hostile"))
    except MultiexportError as exc:
        event(f"refused: {type(exc).__name__}")
        return
    event("signature built")
    _check_names(sig.inputs)
    _check_names(sig.outputs)
    # the identity: output leaves are the input leaves, named "out..." instead of "t..."
    assert [leaf.name[len("out"):] for leaf in sig.outputs] == [leaf.name[len("t"):] for leaf in sig.inputs]


@settings(max_examples=FEW)
@given(tree=trees(allow_abstract=False))
def test_exporting_and_running_any_pytree_writes_only_inside_the_artifact(tree, tmp_path):
    from multiexport import export, load
    from multiexport.exporting.manifest import Manifest

    box = Path(tempfile.mkdtemp(dir=tmp_path))
    out = box / "art"
    try:
        export(Target(lambda t: t, args=(tree,), name="hostile"), out, "xla", check_load=False)
    except MultiexportError:
        assert sorted(p.name for p in box.iterdir()) in ([], ["art"])
        return
    assert sorted(p.name for p in box.iterdir()) == ["art"], list(box.iterdir())  # no staging/lock/stray file
    manifest = Manifest.read(out)
    for name in manifest.inventory:  # file names are the export's own, never a leaf's
        assert (out / name).resolve().is_relative_to(out.resolve()), name
        assert re.fullmatch(r"[A-Za-z0-9_.\-/]+", name) and ".." not in name.split("/"), name
    from multiexport.files.npz import load_npz

    feed = load_npz(out / "example_inputs.npz")
    outputs = load(out)(feed)
    by_suffix = {n[len("t"):]: a for n, a in feed.items()}
    for name, value in outputs.items():  # the identity: each output leaf is its input leaf, bit for bit
        expected = by_suffix.get(name[len("out"):])
        if expected is not None:
            assert value.shape == expected.shape and value.dtype == expected.dtype, name
            assert value.tobytes() == expected.tobytes(), name


def _leaf_name(keys) -> str:
    from multiexport.leaves.naming import component

    return ".".join(["t", *(component(k) for k in keys)])


# Leaf names as multiexport makes them (hostile keys quoted), and `file`, which once collided with np.savez's
# own parameter.
leaf_names = st.one_of(st.just("file"), st.lists(st.one_of(str_keys, int_keys), min_size=0, max_size=3).map(_leaf_name))


@given(arrays=st.dictionaries(leaf_names, arrays(allow_abstract=False), max_size=4))
def test_npz_round_trip_of_any_leaf_names_and_dtypes(arrays, tmp_path):
    from multiexport.files.npz import load_npz, save_npz

    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "a.npz"
    save_npz(path, arrays)
    back = load_npz(path)
    assert list(back) == list(arrays)
    for name, a in arrays.items():
        assert back[name].dtype == a.dtype and back[name].shape == a.shape and back[name].tobytes() == a.tobytes()
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.npz"]


# -- hostile .npz files ----------------------------------------------------------------------------------------

DESCRS = ["<f4", "<i8", "|b1", "|O", "|V2", "|S3", "<U2", ">f8", "<c8", "<f2", "|u1", "[('a', '<i4')]", "'<f4'", "{}",
          "<x9", "None"]
SHAPES = ["()", "(3,)", "(0,)", "(1000000000000,)", "(-1,)", "(2, 2)", "(1.5,)", "'x'", "(2**70,)", "[3]",
          "(3, 0, 10**12)", "None"]


@st.composite
def npy_members(draw):
    header = "{{'descr': {}, 'fortran_order': {}, 'shape': {}, }}".format(
        draw(st.sampled_from(DESCRS)) if draw(st.booleans()) else repr(draw(st.sampled_from(DESCRS))),
        draw(st.sampled_from(["False", "True", "1", "'no'"])), draw(st.sampled_from(SHAPES)))
    if draw(st.booleans()):
        header = draw(st.text(max_size=40))
    body = header.encode("latin1", "replace")
    pad = 64 - (10 + len(body) + 1) % 64
    version = draw(st.sampled_from([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x09\x09"]))
    length = len(body) + pad + 1
    size = length.to_bytes(2 if version == b"\x01\x00" else 4, "little")
    data = b"\x93NUMPY" + version + size + body + b" " * pad + b"\n"
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data + draw(st.binary(max_size=48))


@st.composite
def npz_bytes(draw):
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for _ in range(draw(st.integers(0, 3))):
            name = draw(st.one_of(st.sampled_from(["x.npy", "foo.baz.npy", "foo.bar.npy", "__dtypes__.npy",
                                                    "../../x.npy", "/abs.npy", "dir/", "a.npy", "noext"]),
                                  st.text(min_size=1, max_size=8)))
            if name == "__dtypes__.npy":
                entry = draw(st.one_of(st.just(b"\xff"), st.binary(max_size=20),
                                       st.builds(lambda d: json.dumps(d).encode(),
                                                 st.dictionaries(st.sampled_from(["x", "foo.baz", "ghost"]),
                                                                 st.sampled_from(["bfloat16", "float8_e4m3fn", "int4",
                                                                                  "object", "float32", 3, None])))))
                content = _npy(np.frombuffer(entry, np.uint8))
            else:
                content = draw(st.one_of(npy_members(), st.builds(_npy, arrays(allow_abstract=False))))
            with warnings.catch_warnings():  # a duplicate member name is one of the hostile cases
                warnings.simplefilter("ignore", UserWarning)
                z.writestr(name, content)
    data = buf.getvalue()
    if kind == 3 and data:
        data = data[: draw(st.integers(0, len(data)))]
    return data


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a))
    return buf.getvalue()


@given(data=npz_bytes())
@example(data=b"")
def test_any_npz_loads_as_named_arrays_or_is_one_input_error(data, tmp_path):
    from multiexport import InputError
    from multiexport.files.npz import load_npz

    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "in.npz"
    path.write_bytes(data)
    try:
        arrays = load_npz(path)
    except InputError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc).strip()
        return
    for name, a in arrays.items():
        assert isinstance(name, str) and isinstance(a, np.ndarray) and not a.dtype.hasobject


@settings(max_examples=FEW)
@given(data=npz_bytes())
def test_cli_run_with_any_inputs_file_is_exit_0_or_one_line(data, seed_xla, tmp_path):
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "in.npz"
    path.write_bytes(data)
    proc = run_main("run", seed_xla, "--inputs", path, tmp=tmp_path)
    _contract(proc)


def _contract(proc, codes=(0, 2, 3)) -> None:
    assert proc.returncode in codes, f"exit {proc.returncode}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode != 0:
        lines = stderr_lines(proc)
        assert len(lines) == 1 and lines[0].startswith("multiexport: error: "), proc.stderr


# -- hostile manifests -------------------------------------------------------------------------------------------

def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, prefix + (i,))


HOSTILE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.sampled_from(["../x", "/etc/passwd", "..", ".", "a/../../b", "model.jax_exported",
                                          "example_inputs.npz", "\x00", "~", "inputs/../../../x", "10", "float32",
                                          "xla", "savedmodel", "tensorrt", "b", "multiexport.manifest/2"]),
    st.lists(st.integers(-1, 3), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def mutations(draw, document):
    paths = [p for p in _paths(document) if p]
    out = []
    for _ in range(draw(st.integers(1, 3))):
        out.append((draw(st.sampled_from(paths)), draw(st.one_of(st.just("<delete>"), HOSTILE_VALUES))))
    return out


def _apply(document, edits):
    data = copy.deepcopy(document)
    for path, value in edits:
        cur = data
        try:
            for key in path[:-1]:
                cur = cur[key]
            if value == "<delete>":
                del cur[path[-1]]
            else:
                cur[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass
    return data


def _seed_manifest():
    from multiexport.exporting.manifest import LeafBinding, Manifest

    return Manifest(backend="xla", target="seed",
                    inputs=[LeafBinding("foo.bar", "foo_bar", [10], "int32", used=False, param=None),
                            LeafBinding("foo.baz", "foo_baz", [10], "int32", used=True, param=0)],
                    outputs=[LeafBinding("out", "out", [], "int32", used=True, param=0)],
                    keep_unused=False, symbolic_dims=[], files={"exported": "model.jax_exported"},
                    versions={"jax": "x"}, created="2026-01-01T00:00:00+00:00").to_json()


@settings(max_examples=FEW * 2)
@given(edits=mutations(_seed_manifest()))
def test_any_manifest_is_refused_with_one_line_or_runs_and_nothing_leaves_the_artifact(edits, seed_xla, tmp_path):
    from multiexport.exporting.manifest import Manifest

    box = Path(tempfile.mkdtemp(dir=tmp_path))
    art = box / "art"
    shutil.copytree(seed_xla, art)
    document = json.loads((art / "manifest.json").read_text())
    (art / "manifest.json").write_text(json.dumps(_apply(document, edits)))
    before = sorted(str(p.relative_to(box)) for p in box.rglob("*"))
    try:
        manifest = Manifest.read(art)
    except MultiexportError as exc:
        assert type(exc).__name__ == "ArtifactError", exc
        event("manifest refused")
    else:
        event("manifest accepted")
        for role in manifest.files:
            assert manifest.path(art, role).resolve().is_relative_to(art.resolve())
    proc = run_main("run", art, tmp=tmp_path)
    _contract(proc)
    assert sorted(str(p.relative_to(box)) for p in box.rglob("*")) == before


# -- hostile results.json ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def results_document(seed_results):
    return json.loads(seed_results.read_text())


def _results_mutations():
    return st.lists(st.tuples(st.integers(0, 10**6), st.one_of(st.just("<delete>"), HOSTILE_VALUES,
                                                                st.sampled_from(["ok", "parity-failed", "inf", "nan",
                                                                                 "-inf", "<b>x</b>", "a\n# h"]))),
                    min_size=1, max_size=3)


def _mutate_results(document, picks):
    paths = [p for p in _paths(document) if p]
    return _apply(document, [(paths[i % len(paths)], v) for i, v in picks])


@given(picks=_results_mutations())
def test_any_results_json_loads_and_diffs_or_is_one_input_error(picks, results_document, tmp_path):
    from multiexport import InputError
    from multiexport.report.regression import diff_results, publish
    from multiexport.results import Results, load_results

    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "r.json"
    path.write_text(json.dumps(_mutate_results(results_document, picks)))
    try:
        current = load_results(path)
    except InputError as exc:
        assert str(path) in str(exc)
        return
    base = Results.from_json(results_document)
    for a, b in ((base, current), (current, base), (current, current)):
        publish(diff_results(a, b), None)


@given(picks=_results_mutations())
@example(picks=[(-1, "any")])  # placeholder replaced below: backends.xla.supports.dims = "any"
def test_any_loadable_results_json_renders_both_reports(picks, results_document, tmp_path):
    from multiexport.report.render import write_reports
    from multiexport.results import load_results

    document = copy.deepcopy(results_document)
    if picks == [(-1, "any")]:
        document["backends"]["xla"]["supports"]["dims"] = "any"
    else:
        document = _mutate_results(document, picks)
    box = Path(tempfile.mkdtemp(dir=tmp_path))
    (box / "r.json").write_text(json.dumps(document))
    try:
        results = load_results(box / "r.json")
    except MultiexportError:
        return
    try:
        write_reports(results, box / "rep", source=box / "r.json")
    except MultiexportError:
        return
    md = (box / "rep" / "report.md").read_text()
    assert "<b>x</b>" not in md and "\n# h" not in md
    assert "<b>x</b>" not in (box / "rep" / "report.html").read_text().split("<body", 1)[-1]


def test_the_profiles_are_registered():
    assert settings.get_profile("default").max_examples <= 40 and settings.get_profile("default").database is None
    assert settings.get_profile("nightly").max_examples == 1000
    assert not (Path(__file__).resolve().parents[2] / ".hypothesis").exists()
