"""Every native consumer against `multiexport run`, bit for bit, on the shared case registry.

Each backend's artifacts are exported once; `multiexport run`'s outputs come from one fresh process
(tests.run_many, the user's path); the native programs run each artifact from its directory and manifest
alone. Cases: static and symbolic-batch (two sizes, refined static modules), an XLA export for two
platforms (a platform-index argument), lifted weights in weights.safetensors, 64-bit leaves, dotted
names, a 0-d input, and twelve outputs (SavedModel's sorted output tensors). OpenVINO's consumer is its
C API (ov_run) on the very ONNX file the Python runner reads.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from multiexport.backends.xla.runtime import find_pjrt_plugin
from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.measure.parity import compare_leaf
from multiexport.measure.tolerance import default_tolerance
from multiexport.native.build import NativeBuildError
from multiexport.native.run import print_command, run

from ..cases import case, feed_for
from ..conftest import REPO

COMMON = ["seed", "mlp", "symbolic_batch", "lifted_weights", "float64", "dotted_keys", "scalar_0d", "many_outputs",
          "mlp_bf16"]
PLANS = {  # backend -> (artifact name, case, ExportOptions fields)
    "xla": [(c, c, {"static_sizes": {"b": (1, 7)}} if c == "symbolic_batch" else {}) for c in COMMON]
           + [("mlp_two_platforms", "mlp", {"platforms": ("cpu", "cuda")})],
    "savedmodel": [(c, c, {}) for c in COMMON],
    # bfloat16 goes to IREE's tools as raw bytes with the shape in the flag (they read no bfloat16 .npy)
    "iree": [(c, c, {}) for c in COMMON],
    # OpenVINO refuses 64-bit leaves at export (its CPU plugin computes them in 32 bits)
    "openvino": [(c, c, {}) for c in COMMON if c != "float64"],
}
# Plugins built from the XLA of the jaxlib in the locks: XLA outputs must then match jax bit for bit. Another
# plugin (xla-cpu-pjrt 0.0.1, an older XLA) differs in the last bit of fused dots; it is held to the defaults.
SAME_XLA_PLUGINS = ("lammps_jax_pjrt_cpu",)


def _plugin_or_skip(backend: str):
    if backend != "xla":
        return None
    try:
        return find_pjrt_plugin()
    except NativeBuildError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module", params=sorted(PLANS))
def exported(request, tmp_path_factory):
    """Every planned artifact of one backend, its feeds, and `multiexport run`'s outputs from a fresh process."""
    backend = get_backend(request.param)
    if not backend.available().ok:
        pytest.skip(f"{backend.name} unavailable: {backend.available().reason}")
    plugin = _plugin_or_skip(backend.name)
    root = tmp_path_factory.mktemp(f"native-{backend.name}")
    done, jobs = {}, []
    for name, case_name, options in PLANS[backend.name]:
        c = case(case_name)
        with jax.enable_x64(True) if c.x64 else contextlib.nullcontext():
            target = c.make()
            sig = build_signature(target)
            artifact = backend.export(target.fn, sig, root / name, ExportOptions(**{**c.options, **options}))
        feeds = []
        for batch in c.batch_sizes or (None,):
            stem = root / f"{name}-{batch}"
            save_npz(f"{stem}.in.npz", feed_for(sig, batch))
            feeds.append((f"{stem}.in.npz", f"{stem}.out.npz"))
        jobs.append({"artifact": str(artifact.directory), "feeds": [list(f) for f in feeds]})
        done[name] = (artifact.directory, sig, feeds)
    (root / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-m", "tests.run_many", str(root / "jobs.json")], cwd=REPO, check=True, timeout=900)
    return backend.name, plugin, done


def _read(path, entry: dict) -> np.ndarray:
    """An output as a native program wrote it: a .npy (bfloat16 comes back as NumPy's opaque V2), or, where the
    section says raw (IREE's bfloat16), the bytes alone of the entry's static shape."""
    from multiexport.dtypes import parse_dtype

    dtype = parse_dtype(entry["dtype"])
    if entry.get("encoding") == "raw":
        return np.fromfile(path, dtype=dtype).reshape(entry["shape"])
    value = np.load(path)
    return value.view(dtype) if value.dtype.kind == "V" else value


def _assert_same(backend: str, plugin, got: dict, want: dict, sig, where: str) -> None:
    exact = backend != "xla" or any(p in str(plugin) for p in SAME_XLA_PLUGINS)
    assert set(got) == set(want), where
    for leaf in sig.outputs:
        g, w = got[leaf.name], want[leaf.name]
        assert g.dtype == w.dtype and g.shape == w.shape, (where, leaf.name, g.dtype, g.shape, w.dtype, w.shape)
        if exact:
            assert g.tobytes() == w.tobytes(), (where, leaf.name, g, w)
        else:
            verdict = compare_leaf(leaf.name, g, w, leaf.dtype, default_tolerance(leaf.dtype), where)
            assert verdict.passed, (where, verdict.reasons)


@pytest.mark.subprocess
@pytest.mark.parametrize("name", sorted({n for plan in PLANS.values() for n, _, _ in plan}))
def test_native_consumer_matches_multiexport_run(exported, name):
    backend, plugin, done = exported
    if name not in done:
        pytest.skip(f"not planned for {backend}")
    directory, sig, feeds = done[name]
    for feed_path, out_path in feeds:
        assert not Path(out_path).with_suffix(".error.txt").exists(), Path(out_path).with_suffix(".error.txt").read_text()
        native = run(directory, load_npz(feed_path))
        _assert_same(backend, plugin, native.outputs, load_npz(out_path), sig, f"{backend}/{name}/{feed_path}")


@pytest.mark.subprocess
def test_symbolic_xla_runs_the_refined_module_of_each_size_and_refuses_others(exported):
    backend, _, done = exported
    if backend != "xla":
        pytest.skip("refined static modules are XLA's")
    directory, sig, _ = done["symbolic_batch"]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert sorted(manifest["native"]["static_modules"]) == ["b=1", "b=3", "b=7"]  # asked for, plus the example's
    assert manifest["native"]["compilable"] is False
    for key, entry in manifest["native"]["static_modules"].items():
        assert all(isinstance(d, int) for a in entry["args"] for d in a["shape"]), key
    timed = run(directory, feed_for(sig, 7), iters=5)
    assert timed.timing["program"] == "static/b7.mlirbc" and timed.timing["calls"] == 5
    from multiexport.errors import RunError

    with pytest.raises(RunError, match=r"b=5.*b=1, b=3, b=7"):
        run(directory, feed_for(sig, 5))


@pytest.mark.subprocess
def test_two_platform_xla_passes_the_platform_index_first(exported):
    backend, _, done = exported
    if backend != "xla":
        pytest.skip("XLA only")
    manifest = json.loads((done["mlp_two_platforms"][0] / "manifest.json").read_text())
    args = manifest["native"]["args"]
    assert args[0] == {"kind": "platform_index", "dtype": "int32", "shape": []}
    leaf_params = {leaf["name"]: leaf["param"] for leaf in manifest["inputs"]}
    assert [a["leaf"] for a in args[1:]] == sorted(leaf_params, key=leaf_params.get)
    assert min(leaf_params.values()) == 1  # the manifest's positions are the real ones, after the index


@pytest.mark.subprocess
def test_savedmodel_twelve_outputs_follow_the_sorted_keys(exported):
    backend, _, done = exported
    if backend != "savedmodel":
        pytest.skip("SavedModel only")
    manifest = json.loads((done["many_outputs"][0] / "manifest.json").read_text())
    tensors = {r["leaf"]: r["tensor"] for r in manifest["native"]["results"]}
    assert tensors["out.10"] == "StatefulPartitionedCall:2" and tensors["out.2"] == "StatefulPartitionedCall:4"
    assert len(set(tensors.values())) == 12


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["seed", "lifted_weights", "mlp_bf16"])
def test_printed_command_runs_under_env_i_from_the_artifact_directory(exported, name, tmp_path):
    """The printed line, run literally by a shell with nothing inherited, writes what `multiexport run` gives on
    the artifact's own example inputs (bfloat16 too: its inputs/ files are the <V2 bytes NumPy writes)."""
    backend, plugin, done = exported
    if name not in done:
        pytest.skip(f"not planned for {backend}")
    directory, sig, _ = done[name]
    line = print_command(directory)
    assert line.startswith(f"cd {shlex.quote(str(directory))} && mkdir -p outputs && env -i ")
    proc = subprocess.run(["bash", "-c", line], env={}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((directory / "manifest.json").read_text())
    got = {r["leaf"]: _read(directory / "outputs" / r["file"], r)
           for r in manifest["native"]["results"] if r["kind"] == "leaf"}
    save_npz(tmp_path / "ex.npz", sig.example_feed())
    subprocess.run([sys.executable, "-m", "multiexport", "run", str(directory), "--inputs", str(tmp_path / "ex.npz"),
                    "--save-outputs", str(tmp_path / "want.npz")], check=True, capture_output=True, timeout=600)
    _assert_same(backend, plugin, got, load_npz(tmp_path / "want.npz"), sig, f"{backend}/{name} printed command")


@pytest.mark.subprocess
def test_iree_bfloat16_at_a_symbolic_size_has_no_native_section_and_says_why(tmp_path):
    """IREE's tools read no bfloat16 .npy and take raw bytes only at a static shape (the shape is in the flag):
    a bfloat16 leaf of symbolic size gets no native section, the manifest's warnings say why, `native` refuses
    naming the leaf, and no inputs/ files are written that no command could use."""
    import ml_dtypes

    from multiexport.errors import ArtifactError
    from multiexport.leaves.target import Target

    backend = get_backend("iree")
    if not backend.available().ok:
        pytest.skip(f"iree unavailable: {backend.available().reason}")
    x = np.ones((3, 4), ml_dtypes.bfloat16)
    target = Target(lambda batch: {"y": batch["x"] * 2}, args=({"x": x},), name="bf16_symbolic", symbolic_batch="b",
                    batch_leaves=("batch.*",))
    sig = build_signature(target)
    directory = backend.export(target.fn, sig, tmp_path / "iree", ExportOptions()).directory
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["native"] is None
    assert any("Input 'batch.x' | bfloat16 of shape ['b', 4]" in w for w in manifest["warnings"]), manifest["warnings"]
    with pytest.raises(ArtifactError, match=r"Input 'batch\.x' \| bfloat16 of shape \['b', 4\]: IREE's tools"):
        run(directory, sig.example_feed())
    assert not (directory / "inputs").exists()
