"""TF SavedModel backend: TF's own tools see the leaves' aliases, and the artifact runs from disk in a fresh process.

TensorFlow takes seconds to import, so the artifacts are exported once per module and every fresh-process
check runs in one `python` process (plus `saved_model_cli` for the seed and the MLP, run side by side).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from multiexport import ArtifactError, ExportError, RunError, Target
from multiexport.backends.savedmodel import SavedModelBackend, max_supported_call_module_version, read_saved_model
from multiexport.examples import lm, mlp
from multiexport.exporting import ExportOptions
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.measure.parity import compare_leaf
from multiexport.measure.tolerance import default_tolerance

from ..cases import case, feed_for
from ..conftest import REPO, reference_outputs, tamper

KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {}  # every shared case exports


def tricky_names() -> Target:
    """`a.b` vs `a_b` collide as aliases, so do outputs `out.d.x` vs `out.d_x`; `t.B` sorts before `t.a`
    case-sensitively but after it lowercased. Every output is asymmetric in its inputs, so a swapped
    key would change the numbers."""

    def f(a, a_b, t):
        return {"d": {"x": a["b"] * 10 - a_b}, "d_x": t["B"] * 100 - t["a"]}

    r = np.random.default_rng(7)
    vec = lambda: r.normal(size=3).astype(np.float32)  # noqa: E731
    return Target(f, args=({"b": vec()}, vec(), {"B": vec(), "a": vec()}), name="tricky_names")


def weak_scalar() -> Target:
    """float16 times a Python float: JAX keeps float16 because the scalar is weakly typed."""
    return Target(lambda x, s: x * s, args=(np.arange(4, dtype=np.float16), 1.5), name="weak_scalar")


def host_callback() -> Target:
    def f(x):
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1

    return Target(f, args=(np.ones(3, np.float32),), name="host_callback")


TARGETS = {
    "seed": case("seed").make,
    "mlp": case("mlp").make,
    "mlp_dynamic": lambda: mlp(symbolic_batch=True),
    "tricky_names": tricky_names,
    "weak_scalar": weak_scalar,
    # The small GPT-style LM closing over its 0.5 MB of weights, lifted to tf.Variables or embedded.
    "lm_lifted": lambda: lm("small", "baked"),
    "lm_embedded": lambda: lm("small", "baked"),
}
OPTIONS = {"lm_lifted": ExportOptions(external_weights="always"), "lm_embedded": ExportOptions(external_weights="never")}
# Feeds run in the fresh process: (artifact, batch size or None for the example values).
RUNS = [("seed", None), ("mlp", None), ("mlp", 8), ("mlp_dynamic", 1), ("mlp_dynamic", 13),
        ("tricky_names", None), ("weak_scalar", None), ("lm_lifted", None), ("lm_embedded", None)]

FRESH_PROCESS = """
import json, sys
from multiexport import load
from multiexport.files.npz import load_npz, save_npz
paths = []
for directory, inputs, out in json.loads(sys.argv[1]):
    runner = load(directory)
    save_npz(out, runner(load_npz(inputs)))
    paths.append(runner.calling_path)
print(json.dumps({"modules": sorted(m for m in sys.modules if m.split(".")[0] == "tests"),
                  "calling_paths": sorted(set(paths))}))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (target, signature, artifact), all exported once for this module."""
    root = tmp_path_factory.mktemp("savedmodel")
    backend = SavedModelBackend()
    out = {}
    for name, make in TARGETS.items():
        target = make()
        sig = build_signature(target)
        out[name] = (target, sig, backend.export(target.fn, sig, root / name, OPTIONS.get(name, ExportOptions())))
    return out


@pytest.fixture(scope="module")
def fresh_run(exported, tmp_path_factory):
    """Every RUNS feed through `multiexport.load` in one fresh interpreter; outputs and references by run."""
    io = tmp_path_factory.mktemp("io")
    jobs, expected = [], {}
    for i, (name, batch) in enumerate(RUNS):
        target, sig, artifact = exported[name]
        feed = feed_for(sig, batch, seed=i)
        save_npz(io / f"in{i}.npz", feed)
        jobs.append((str(artifact.directory), str(io / f"in{i}.npz"), str(io / f"out{i}.npz")))
        expected[(name, batch)] = reference_outputs(target, sig, feed)
    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS, json.dumps(jobs)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    got = {run: load_npz(io / f"out{i}.npz") for i, run in enumerate(RUNS)}
    return got, expected, report


@pytest.fixture(scope="module")
def cli_show(exported):
    """`saved_model_cli show --dir DIR --all` (TensorFlow's own tool) for the seed and the MLP, run side by side."""
    tool = Path(sys.executable).parent / "saved_model_cli"
    procs = {name: subprocess.Popen([str(tool), "show", "--dir", str(exported[name][2].directory), "--all"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("seed", "mlp")}
    shown = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        shown[name] = stdout
    return shown


def signature_keys(cli_text: str, kind: str) -> list[str]:
    """Input or output keys of the serving_default signature in `saved_model_cli show --all` text."""
    section = cli_text[cli_text.index("signature_def['serving_default']"):]
    section = section[: section.index("Method name is")]
    return sorted(re.findall(rf"{kind}\['([^']+)'\] tensor_info", section))


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["seed", "mlp"])
def test_saved_model_cli_lists_exactly_the_manifest_aliases(name, exported, cli_show):
    manifest = exported[name][2].manifest
    assert signature_keys(cli_show[name], "inputs") == sorted(leaf.alias for leaf in manifest.inputs if leaf.param is not None)
    assert signature_keys(cli_show[name], "outputs") == sorted(leaf.alias for leaf in manifest.outputs)
    if name == "seed":  # the pruned leaf is dropped here too: a caller feeds exactly what the manifest lists
        assert "inputs['foo_bar']" not in cli_show[name] and "inputs['foo_baz']" in cli_show[name]
        assert "XlaCallModule" in cli_show[name]


def test_seed_binding_keep_unused_and_versions(exported, tmp_path):
    target, sig, artifact = exported["seed"]
    m = artifact.manifest
    assert [(leaf.name, leaf.used, leaf.param) for leaf in m.inputs] == [("foo.bar", False, None), ("foo.baz", True, "foo_baz")]
    assert m.format["tensor_names"]["inputs"] == {"foo.baz": "serving_default_foo_baz:0"}
    assert m.format["tensor_names"]["outputs"] == {"out": "StatefulPartitionedCall:0"}
    assert m.requires["stablehlo_version"] == m.versions["stablehlo_version"] == "1.13.7"
    assert m.files["saved_model"] == "saved_model.pb" and (artifact.directory / "saved_model.pb").is_file()
    import tensorflow as tf

    assert m.versions["tensorflow"] == tf.__version__
    assert int(m.versions["xla_call_module_version"]) == max(read_saved_model(artifact.directory)["versions"])
    assert int(m.versions["xla_call_module_max_supported"]) == max_supported_call_module_version()
    assert not any("XlaCallModule" in w for w in m.warnings)

    kept = SavedModelBackend().export(target.fn, sig, tmp_path / "kept", ExportOptions(keep_unused=True)).manifest
    assert [(leaf.used, leaf.param) for leaf in kept.inputs] == [(True, "foo_bar"), (True, "foo_baz")]
    swapped_target = case("seed_bar").make()
    swapped = SavedModelBackend().export(swapped_target.fn, build_signature(swapped_target), tmp_path / "bar").manifest
    assert [(leaf.used, leaf.param) for leaf in swapped.inputs] == [(True, "foo_bar"), (False, None)]


@pytest.mark.subprocess
def test_outputs_match_jax_jit_in_a_fresh_process(fresh_run):
    got, expected, report = fresh_run
    assert report["modules"] == []  # the fresh process never imported the targets' module, only read artifacts
    assert len(report["calling_paths"]) == 1 and "_call_flat" in report["calling_paths"][0]
    assert got[("seed", None)]["out"].dtype == np.int32
    np.testing.assert_array_equal(got[("seed", None)]["out"], expected[("seed", None)]["out"])  # ints exact
    for run in [("mlp", None), ("mlp", 8), ("tricky_names", None)]:
        assert list(got[run]) == list(expected[run])
        for leaf in expected[run]:
            # 1e-5: TF's oneDNN kernels (on by default on AVX-512 CPUs) sum in another order than XLA (5e-6 seen)
            np.testing.assert_allclose(got[run][leaf], expected[run][leaf], rtol=1e-5, atol=0, err_msg=f"{run} {leaf}")


@pytest.mark.subprocess
def test_symbolic_batch_runs_at_two_sizes_from_one_artifact(exported, fresh_run):
    m = exported["mlp_dynamic"][2].manifest
    assert m.symbolic_dims == ["b"]
    assert m.format["polymorphic_shapes"][-1] == "(b, 16)"
    got, expected, _ = fresh_run
    for batch in (1, 13):
        out, want = got[("mlp_dynamic", batch)]["out.logits"], expected[("mlp_dynamic", batch)]["out.logits"]
        assert out.shape == (batch, 4)
        # Relative to the output's scale: at batch 1 TF's XLA and jaxlib's XLA round the matrix-vector
        # products differently (a static batch-1 MLP does the same), ~2 ULP of |out| ~ 80, which a
        # cancelling element near 1.3 turns into 1.3e-5 elementwise.
        assert np.max(np.abs(out - want)) <= 1e-6 * np.max(np.abs(want))


def test_colliding_names_get_distinct_keys(exported):
    m = exported["tricky_names"][2].manifest
    aliases = {leaf.name: leaf.alias for leaf in m.inputs}
    assert aliases["a.b"] != aliases["a_b"] and len(set(aliases.values())) == len(aliases)
    outputs = {leaf.name: leaf.alias for leaf in m.outputs}
    assert outputs["out.d.x"] != outputs["out.d_x"]
    saved = read_saved_model(exported["tricky_names"][2].directory)
    assert saved["inputs"] == sorted(aliases.values()) and saved["outputs"] == sorted(outputs.values())


@pytest.mark.subprocess
def test_weak_python_scalar_keeps_the_jax_output_dtype(exported, fresh_run):
    assert exported["weak_scalar"][2].manifest.outputs[0].dtype == "float16"
    got, expected, _ = fresh_run
    out = got[("weak_scalar", None)]["out"]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, expected[("weak_scalar", None)]["out"])


def test_unconvertible_function_is_a_typed_export_error(tmp_path):
    target = host_callback()
    with pytest.raises(ExportError, match="cannot be exported for TensorFlow: NotImplementedError: .*host_callbacks") as err:
        SavedModelBackend().export(target.fn, build_signature(target), tmp_path / "cb")
    assert err.value.category == "unsupported-op" and err.value.backend == "savedmodel"
    assert not (tmp_path / "cb").exists()


def test_exporter_tf_too_old_for_the_module_is_a_version_error(exported, tmp_path, monkeypatch):
    from tensorflow.compiler.tf2xla.python import xla as tfxla

    needed = int(exported["seed"][2].manifest.versions["xla_call_module_version"])
    monkeypatch.setattr(tfxla, "call_module_maximum_supported_version", lambda: needed - 1)
    target = case("seed").make()
    with pytest.raises(ExportError, match=f"needs XlaCallModule serialization version {needed}, but TensorFlow .* "
                                          f"supports at most {needed - 1}") as err:
        SavedModelBackend().export(target.fn, build_signature(target), tmp_path / "old")
    assert err.value.category == "version-skew"


def test_consumer_tf_too_old_for_the_artifact_is_refused_clearly(exported, tmp_path):
    import shutil

    from tensorflow.core.protobuf import saved_model_pb2

    directory = shutil.copytree(exported["seed"][2].directory, tmp_path / "newer")
    newer = max_supported_call_module_version() + 1

    def bump(d):
        proto = saved_model_pb2.SavedModel()
        proto.ParseFromString((d / "saved_model.pb").read_bytes())
        for function in proto.meta_graphs[0].graph_def.library.function:
            for node in function.node_def:
                if node.op == "XlaCallModule":
                    node.attr["version"].i = newer
        (d / "saved_model.pb").write_bytes(proto.SerializeToString())

    tamper(directory, bump)
    with pytest.raises(RunError, match=f"needs XlaCallModule serialization version {newer}, but TensorFlow .* "
                                       f"supports at most {newer - 1}: upgrade TensorFlow"):
        SavedModelBackend().load(directory)


def test_runner_path_agrees_with_the_public_signature_call(exported):
    target, sig, artifact = exported["tricky_names"]
    runner = SavedModelBackend().load(artifact.directory)
    feed = feed_for(sig, None)
    prepared = runner.prepare(feed)
    assert runner.run_prepared(prepared) is None
    serving = runner._loaded.signatures["serving_default"]
    public = serving(**{leaf.alias: feed[leaf.name] for leaf in runner.manifest.inputs})
    fast = runner._call(prepared)
    assert sorted(fast) == sorted(public)
    for key in public:
        np.testing.assert_array_equal(fast[key].numpy(), public[key].numpy())


def test_gpu_needs_a_cuda_export_and_a_tf_that_sees_a_gpu(exported, tmp_path):
    with pytest.raises(RunError, match="exported for cpu, expected cuda: re-export with --platforms cpu,cuda"):
        SavedModelBackend().load(exported["seed"][2].directory, "gpu")
    target, sig, _ = exported["seed"]
    both = SavedModelBackend().export(target.fn, sig, tmp_path / "both", ExportOptions(platforms=("cpu", "cuda")))
    assert both.manifest.format["platforms"] == ["cpu", "cuda"]
    assert SavedModelBackend().load(both.directory)(sig.example_feed())["out"] == 45  # cpu branch of a 2-platform module
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow sees a GPU; the no-GPU refusal cannot be shown here")
    with pytest.raises(RunError, match="Device 'gpu' \\| TensorFlow .* sees none"):
        SavedModelBackend().load(both.directory, "gpu")


def test_broken_artifacts_are_artifact_errors(exported, tmp_path):
    import shutil

    directory = shutil.copytree(exported["seed"][2].directory, tmp_path / "broken")
    pb = directory / "saved_model.pb"
    pb.write_bytes(pb.read_bytes()[:200])
    with pytest.raises(ArtifactError, match=r"file 'saved_model.pb' has 200 bytes, expected \d+ \(truncated"):
        SavedModelBackend().load(directory)
    tamper(directory, lambda d: None)  # the same truncated file, its size now recorded
    with pytest.raises(ArtifactError, match="unreadable saved_model.pb"):
        SavedModelBackend().load(directory)
    pb.unlink()
    with pytest.raises(ArtifactError, match="saved_model file 'saved_model.pb' .* missing"):
        SavedModelBackend().load(directory)


def xla_call_modules(directory: Path) -> list[bytes]:
    """The serialized module of every XlaCallModule op in the artifact's saved_model.pb."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((directory / "saved_model.pb").read_bytes())
    graph = proto.meta_graphs[0].graph_def
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return [n.attr["module"].s for n in nodes if n.op == "XlaCallModule"]


def test_lifted_weights_are_tf_variables_in_the_checkpoint_not_module_constants(exported):
    import tensorflow as tf

    artifact = exported["lm_lifted"][2]
    m, directory = artifact.manifest, artifact.directory
    w = m.weights
    assert w["storage"] == "external" and w["file"] == "variables/" and "TF checkpoint" in w["file_format"]
    assert w["external_bytes"] + w["embedded_bytes"] == w["baked_bytes"]  # every baked byte accounted for
    assert w["embedded_bytes"] < 0.02 * w["external_bytes"]  # only the small constants (norm scales...) stay
    assert "tf.Variable" in m.format["weights"]
    # The signature is the user's: one key per leaf, the weights are no inputs.
    assert [(leaf.name, leaf.used, leaf.param) for leaf in m.inputs] == [("batch.tokens", True, "batch_tokens")]
    assert read_saved_model(directory)["inputs"] == ["batch_tokens"]

    # The weights left the graph: the module differs from the embedded one by (at least) their bytes, and
    # the checkpoint holds them, one variable per lifted tensor with the manifest's shapes.
    lifted_module, = xla_call_modules(directory)
    embedded_module, = xla_call_modules(exported["lm_embedded"][2].directory)
    assert len(embedded_module) - len(lifted_module) >= 0.95 * w["external_bytes"]
    assert (directory / "saved_model.pb").stat().st_size < 0.25 * w["external_bytes"]
    assert m.files["variables_index"] == "variables/variables.index"
    assert (directory / m.files["variables_data"]).stat().st_size >= 0.9 * w["external_bytes"]
    stored = dict(tf.train.list_variables(str(directory / "variables" / "variables")))
    shapes = [stored[f"weights/{i}/.ATTRIBUTES/VARIABLE_VALUE"] for i in range(len(w["tensors"]))]
    assert shapes == [t["shape"] for t in w["tensors"]]


def test_never_keeps_the_weights_embedded_once(exported):
    _, sig, artifact = exported["lm_embedded"]
    m, directory = artifact.manifest, artifact.directory
    assert m.weights["storage"] == "embedded" and m.weights["embedded_bytes"] == sig.weights["baked_bytes"]
    assert m.weights["external_bytes"] == 0 and not any(role.startswith("variables") for role in m.files)
    assert "constants" in m.format["weights"]
    # One XlaCallModule (the signature and the serve_leaves attribute share save's trace): the weights are in
    # saved_model.pb once, so the 2 GB protobuf limit is reached at 2 GB of weights, not 1.
    modules = xla_call_modules(directory)
    assert len(modules) == 1 and len(modules[0]) >= sig.weights["baked_bytes"]
    assert (directory / "saved_model.pb").stat().st_size < 1.5 * sig.weights["baked_bytes"]


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["lm_lifted", "lm_embedded"])
def test_lm_weights_lifted_or_embedded_match_jax_jit_in_a_fresh_process(name, exported, fresh_run):
    got, expected, _ = fresh_run
    _, sig, _ = exported[name]
    out, want = got[(name, None)], expected[(name, None)]
    assert list(out) == [leaf.name for leaf in sig.outputs]
    for leaf in sig.outputs:
        verdict = compare_leaf(leaf.name, out[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype))
        assert verdict.passed, verdict.reasons


def test_restored_variables_hold_the_target_weights_and_feed_the_module(exported):
    from multiexport.leaves.weights import lift_weights

    target, sig, artifact = exported["lm_lifted"]
    runner = SavedModelBackend().load(artifact.directory)
    restored = runner._loaded.weights
    expected = lift_weights(target.fn, sig)
    assert [v.name.split(":")[0] for v in restored] == list(expected.names)
    for variable, array in zip(restored, expected.arrays):
        np.testing.assert_array_equal(variable.numpy(), array)  # the checkpoint holds the exact values
    feed = sig.example_feed()
    before = runner(feed)["out.logits"]
    restored[0].assign(restored[0] * 0.5)  # the token embedding: the module reads the variable, not a copy
    assert not np.allclose(runner(feed)["out.logits"], before)


def test_the_module_is_written_for_the_stablehlo_tensorflow_reads(exported):
    """jax.export writes for its own window (1.15.0 from jax 0.10.2); TF 2.21 reads 1.13.7: the module in the
    graph is the one re-serialized for TF, and every leaf the module reads is what jax.export kept."""
    from multiexport.exporting.stablehlo import producer_version

    target, sig, artifact = exported["mlp"]
    module, = xla_call_modules(artifact.directory)
    assert producer_version(module) == artifact.manifest.requires["stablehlo_version"] == "1.13.7"
    assert artifact.manifest.versions["stablehlo_written_by_jax"] in ("1.15.0", "1.18.0")
    assert all(leaf.used for leaf in artifact.manifest.inputs)


def test_top_k_now_runs_in_tensorflow_because_its_composite_has_an_older_form(tmp_path):
    """lax.top_k's composite_v2 is unreadable for TF 2.21 as jax writes it; written for 1.13.7 it runs."""
    from ..cases import top_k

    target = top_k()
    sig = build_signature(target)
    artifact = SavedModelBackend().export(target.fn, sig, tmp_path / "topk")
    got = SavedModelBackend().load(artifact.directory)(sig.example_feed())
    want = reference_outputs(target, sig, sig.example_feed())
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_prepared_inputs_are_owned_copies_held_once():
    """tf.constant(array) holds an array's bytes twice (TF 2.21); the runner's tensors hold them once and
    never alias the caller's array, even a 64-byte aligned one that TF could adopt as is."""
    import ml_dtypes
    import tensorflow as tf

    from multiexport.backends.savedmodel.runner import _to_tensor

    def rss_mb():
        status = Path("/proc/self/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    raw = np.ones((16 << 20) + 16, np.float32)  # 64 MB
    start = (-raw.ctypes.data % 64) // 4
    array = raw[start:start + (16 << 20)]
    assert array.ctypes.data % 64 == 0
    before = rss_mb()
    tensor = _to_tensor(tf, array, "/CPU:0")
    held = rss_mb() - before
    assert 0.9 * 64 <= held < 1.5 * 64, held
    array[0] = 5
    assert float(tensor[0]) == 1.0 and tensor.device.endswith("CPU:0")
    small = np.arange(4).astype(ml_dtypes.float8_e4m3fn)  # no DeepCopy kernel: tf.constant
    np.testing.assert_array_equal(_to_tensor(tf, small, "/CPU:0").numpy(), small)
