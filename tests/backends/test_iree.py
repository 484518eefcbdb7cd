"""IREE backend: the .vmfb matches jax.jit through both IREE runtimes, the Python bindings and the native
`iree-run-module` binary, from the artifact directory alone; failures are typed with IREE's own words.

IREE compiles take about a second each (the transformer about five), so artifacts are built once per
module and shared.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import ArtifactError, ExportError, InputError, RunError, Target, examples
from multiexport.backends.iree import IreeBackend, native as iree_native
from multiexport.backends.iree.compile import compile_flags, compile_vmfb
from multiexport.exporting import ExportOptions
from multiexport.exporting.manifest import Manifest
from multiexport.leaves import build_signature
from multiexport.measure.parity import compare_leaf
from multiexport.measure.tolerance import default_tolerance
from multiexport.native import run as native

from ..cases import case, feed_for
from ..conftest import reference_outputs, tamper

# Every case of tests/cases.py compiles and matches; nothing is declared unsupported.
KNOWN_UNSUPPORTED: dict[str, tuple[str, str]] = {}

TARGETS = {
    "seed": examples.seed,
    "mlp": examples.mlp,
    "transformer": lambda: examples.transformer(symbolic_batch=True),  # batch.x: (b, 16, 64)
    "symbolic_batch": lambda: case("symbolic_batch").make(),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Export each target once: name -> (target, signature, artifact)."""
    root = tmp_path_factory.mktemp("iree")
    cache = {}

    def get(name):
        if name not in cache:
            target = TARGETS[name]()
            sig = build_signature(target)
            cache[name] = (target, sig, IreeBackend().export(target.fn, sig, root / name))
        return cache[name]

    return get


RUN_TOOL = "iree-run-module"


def run_native(directory, feed):
    """The artifact in IREE's own native iree-run-module, as `multiexport native` runs it."""
    return native.run(directory, feed).outputs


def assert_faithful(got, want, sig, label=""):
    assert list(got) == [leaf.name for leaf in sig.outputs]
    for leaf in sig.outputs:
        verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, default_tolerance(leaf.dtype), label)
        assert verdict.passed, verdict.reasons


@pytest.mark.parametrize("name", ["seed", "mlp", "transformer"])
def test_both_runners_match_jax_jit(built, name):
    target, sig, artifact = built(name)
    feed = sig.example_feed()
    want = reference_outputs(target, sig, feed)
    assert_faithful(IreeBackend().load(artifact.directory)(feed), want, sig, "python")
    assert_faithful(run_native(artifact.directory, feed), want, sig, "native")


def test_seed_binding_and_manifest(built, tmp_path):
    _, sig, artifact = built("seed")
    m = artifact.manifest
    by_name = {leaf.name: leaf for leaf in m.inputs}
    assert (by_name["foo.bar"].used, by_name["foo.bar"].param) == (False, None)
    assert (by_name["foo.baz"].used, by_name["foo.baz"].param) == (True, 0)
    assert m.format["module_args"] == ["foo.baz"] and m.format["module_results"] == ["out"]
    assert m.format["target_backends"] == ["llvm-cpu"]
    assert compile_flags(["llvm-cpu"]) == ["--iree-llvmcpu-target-cpu=host"]
    assert m.format["compile_flags"] == ["--iree-llvmcpu-target-cpu=host", "--iree-opt-data-tiling"]  # no conv: no im2col
    assert m.format["module_signature"] == "sync func @main(%input0: tensor<10xi32>) -> (%output0: tensor<i32>)"
    driver = m.format["drivers"]["llvm-cpu"]  # measured at export (tests/backends/test_iree_config.py)
    assert m.native["run_args"] == [
        f"--device={driver}", "--module=model.vmfb", "--function=main",
        "--input=@inputs/input1.npy", "--output=@outputs/output0.npy"]  # file names never come from leaf names
    assert m.versions["iree_base_compiler"] == m.versions["iree_base_runtime"] == "3.13.0"
    assert "inputs/input1.npy" in m.inventory and m.files["example_inputs"] == "example_inputs.npz"
    np.testing.assert_array_equal(np.load(artifact.directory / "inputs/input1.npy"), sig.example_feed()["foo.baz"])

    target = examples.seed()
    kept = IreeBackend().export(target.fn, sig, tmp_path / "keep", ExportOptions(keep_unused=True)).manifest
    assert [(leaf.name, leaf.param) for leaf in kept.inputs] == [("foo.bar", 0), ("foo.baz", 1)]
    assert kept.native["run_args"][3:5] == ["--input=@inputs/input0.npy", "--input=@inputs/input1.npy"]


def assert_manifest_command_reproduces(copy, m, python):
    """The manifest's command, verbatim, in the copied directory, in a process that inherits nothing:
    no Python, no environment, only the tool binary and the artifact's files; outputs equal `python`'s."""
    command = [str(iree_native.iree_tool(RUN_TOOL)), *m.native["run_args"]]
    (copy / "outputs").mkdir()
    proc = subprocess.run(command, cwd=copy, env={}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for k, leaf in enumerate(m.outputs):
        np.testing.assert_array_equal(np.load(copy / "outputs" / f"output{k}.npy"), python[leaf.name])


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_native_command_reproduces_python_runner_from_a_copied_artifact(built, name, tmp_path):
    _, sig, artifact = built(name)
    copy = tmp_path / "shipped"
    shutil.copytree(artifact.directory, copy)
    m = Manifest.read(copy)
    python = IreeBackend().load(copy)(sig.example_feed())

    assert_manifest_command_reproduces(copy, m, python)
    native = run_native(copy, sig.example_feed())
    for leaf in m.outputs:
        np.testing.assert_array_equal(native[leaf.name], python[leaf.name])


def test_symbolic_batch_runs_at_two_sizes_in_both_runners(built):
    target, sig, artifact = built("transformer")
    m = artifact.manifest
    assert m.symbolic_dims == ["b"] and m.format["dynamic"] and "static_fallback" not in m.format
    assert m.inputs[-1].shape == ["b", 16, 64] and m.outputs[0].shape == ["b", 16, 64]
    assert m.format["stablehlo"]["dot_generals_batched"] > 0  # the rewrite that makes Dense on [b, s, d] compile
    assert "tensor<?x16x64xf32>" in m.format["module_signature"]
    runner = IreeBackend().load(artifact.directory)
    for batch in (1, 5):
        # The initialised parameters with fresh inputs: N(0, 1) parameters (feed_for) saturate the
        # attention softmax, where jax.jit's own float32 result is 3e-3 off float64, IREE's as much.
        x = np.random.default_rng(batch).normal(size=(batch, 16, 64)).astype(np.float32)
        feed = {**sig.example_feed(), "batch.x": x}
        want = reference_outputs(target, sig, feed)
        assert_faithful(runner(feed), want, sig, f"python b={batch}")
        assert_faithful(run_native(artifact.directory, feed), want, sig, f"native b={batch}")


def test_a_symbolic_embedding_lookup_compiles_as_one_symbolic_module(tmp_path):
    """jnp.take of a table by ids [b, s] (an embedding: keras-hub's GPT-2 and every decoder's first op) lowers to a
    gather whose indices get a trailing index vector of one element; IREE 3.13 turns that form into a reshape to a
    dynamic shape its verifier refuses. Read with the implicit index vector it compiles once for every b, and
    computes what jax.jit does at sizes the example does not have, in both runners."""

    def embed(params, batch):
        return {"h": jnp.take(params["table"], batch["ids"], axis=0) * 2.0}

    table = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    target = Target(embed, args=({"table": table}, {"ids": np.array([[1, 2, 3], [4, 5, 9]], np.int32)}),
                    name="embed", symbolic_batch="b", batch_leaves=("batch.*",))
    sig = build_signature(target)
    m = IreeBackend().export(target.fn, sig, tmp_path / "a").manifest
    assert "static_fallback" not in m.format and m.supports["dims"] == {"b": "any"}, m.warnings
    assert m.format["stablehlo"]["gather_index_vectors_implicit"] == 1
    runner = IreeBackend().load(tmp_path / "a")
    for b in (1, 5):
        ids = np.random.default_rng(b).integers(0, 10, size=(b, 3)).astype(np.int32)
        feed = {**sig.example_feed(), "batch.ids": ids}
        want = reference_outputs(target, sig, feed)
        assert np.array_equal(want[sig.outputs[0].name], table[ids] * 2.0)  # the rows asked for, not a constant
        assert_faithful(runner(feed), want, sig, f"python b={b}")
        assert_faithful(run_native(tmp_path / "a", feed), want, sig, f"native b={b}")


def test_removed_shape_assertions_are_checked_before_every_call(built):
    _, sig, artifact = built("symbolic_batch")
    stablehlo = artifact.manifest.format["stablehlo"]
    assert stablehlo["shape_assertions_removed"] == 2 and "removes them explicitly" in stablehlo["shape_assertions_why"]
    feed = feed_for(sig, 4)
    feed["batch.offset"] = np.zeros(3, np.float32)  # b=3 here, b=4 in batch.x: IREE itself would run it
    for run in (IreeBackend().load(artifact.directory), lambda f: run_native(artifact.directory, f)):
        with pytest.raises(InputError, match="Input 'batch.x' \\| got b=4 .* expected b=3"):
            run(feed)


def test_symbolic_module_iree_cannot_compile_gets_one_module_per_size_in_iree_s_words(tmp_path):
    """IREE 3.13 cannot lower stablehlo.dynamic_reshape: the export driver's static-size fallback compiles a module
    per size (the example's alone for a plain export; `fallback_sizes` adds others), each a complete IREE artifact
    with its own native section, and the reason is IREE's own message."""

    def flatten(batch):  # reshape over a symbolic dim: stablehlo.dynamic_reshape, which IREE 3.13 cannot lower
        return {"flat": batch["x"].reshape(-1) * 2.0}

    target = Target(flatten, args=({"x": np.arange(12, dtype=np.float32).reshape(3, 4)},), name="flatten",
                    symbolic_batch="b", batch_leaves=("batch.*",))
    sig = build_signature(target)
    m = IreeBackend().export(target.fn, sig, tmp_path / "a", ExportOptions(fallback_sizes={"b": (1, 5)})).manifest
    fallback = m.format["static_fallback"]
    assert list(fallback["models"]) == ["b=3", "b=1", "b=5"]  # the example's first
    assert fallback["why"].startswith("Backend 'iree' | iree-compile rejected the module") and \
        "dynamic_reshape" in fallback["why"], fallback["why"]
    assert m.supports["dims"] == {"b": [1, 3, 5]} and m.symbolic_dims == ["b"]
    runner = IreeBackend().load(tmp_path / "a")
    for b in (1, 3, 5):
        feed = {"batch.x": np.arange(4 * b, dtype=np.float32).reshape(b, 4)}
        want = reference_outputs(target, sig, feed)
        assert_faithful(runner(feed), want, sig)
        assert_faithful(run_native(tmp_path / "a", feed), want, sig, f"native b={b}")  # the model of its size
        model = Manifest.read(tmp_path / "a" / fallback["models"][f"b={b}"])
        assert model.native is not None and not model.format["dynamic"] and model.inputs[0].shape == [b, 4]
    for run in (runner, lambda f: run_native(tmp_path / "a", f)):
        with pytest.raises(RunError, match="got b=4, expected one of the sizes it was built for: b=3; b=1; b=5"):
            run({"batch.x": np.zeros((4, 4), np.float32)})
    assert "/static/b3 && " in native.print_command(tmp_path / "a")  # the example's model, where it lies


def test_function_iree_rejects_is_a_typed_compile_failure_with_iree_message(tmp_path):
    target = Target(lambda a: jnp.linalg.cholesky(a), args=(np.eye(3, dtype=np.float32) * 2,), name="cholesky")
    with pytest.raises(ExportError) as info:
        IreeBackend().export(target.fn, build_signature(target), tmp_path / "a")
    assert info.value.category == "compile-failed" and info.value.backend == "iree"
    message = str(info.value)
    assert "custom call targets lapack_spotrf_ffi" in message
    assert "error: failed to legalize operation 'stablehlo.custom_call'" in message  # IREE's own words
    assert not (tmp_path / "a").exists()


def test_corrupted_stablehlo_bytecode_is_a_typed_compile_failure(built):
    _, _, artifact = built("seed")
    bytecode = bytearray((artifact.directory / "model.mlirbc").read_bytes())
    assert bytes(bytecode[:4]) == b"ML\xefR"
    compile_vmfb(bytes(bytecode), ["llvm-cpu"], compile_flags(["llvm-cpu"]))  # the real file compiles
    bytecode[len(bytecode) // 2:] = b"\xff" * (len(bytecode) - len(bytecode) // 2)
    with pytest.raises(ExportError) as info:
        compile_vmfb(bytes(bytecode), ["llvm-cpu"], compile_flags(["llvm-cpu"]))
    assert info.value.category == "compile-failed"
    assert "iree-compile rejected the module for llvm-cpu: " in str(info.value)
    assert "error" in str(info.value).split("llvm-cpu: ", 1)[1]


def test_missing_native_tools_are_typed_unavailable(built, monkeypatch, tmp_path):
    from multiexport import BackendUnavailable

    _, sig, artifact = built("seed")
    monkeypatch.setattr(iree_native, "package_dir", lambda module: tmp_path)  # a wheel without its binaries
    with pytest.raises(BackendUnavailable, match=f"Native tool '{RUN_TOOL}' \\| not found, expected it in the "
                                                 "iree-base-runtime wheel"):
        run_native(artifact.directory, sig.example_feed())


def test_native_benchmark_reports_iree_benchmark_module_figures(built):
    _, sig, artifact = built("seed")
    timed = native.run(artifact.directory, sig.example_feed(), iters=3)
    assert timed.timing["consumer"] == "iree-benchmark-module" and timed.timing["calls"] == 3
    assert 0 < timed.timing["min_ms"] <= timed.timing["median_ms"] <= timed.timing["max_ms"]
    assert timed.command[0].endswith("iree-benchmark-module") and "--input=@" in " ".join(timed.command)
    assert timed.outputs["out"] == 45


def test_prepared_inputs_run_synchronously_and_repeatably(built):
    target, sig, artifact = built("mlp")
    runner = IreeBackend().load(artifact.directory)
    prepared = runner.prepare(sig.example_feed())
    assert runner.run_prepared(prepared) is None and runner.run_prepared(prepared) is None
    first = runner._name_outputs(runner._fetch_impl(prepared))
    again = runner._name_outputs(runner._fetch_impl(prepared))
    np.testing.assert_array_equal(first["out.logits"], again["out.logits"])
    assert runner.declaration.startswith("sync func @main")  # IREE's synchronous ABI: returns when done
    assert runner.compile_count() == 0 and runner.describe()["driver"] == artifact.manifest.format["drivers"]["llvm-cpu"]


def test_broken_artifact_and_wrong_device_are_typed(built, tmp_path):
    _, sig, artifact = built("seed")
    with pytest.raises(RunError, match="exported for cpu, expected cuda: re-export with --platforms cpu,cuda"):
        IreeBackend().load(artifact.directory, "gpu")
    copy = tmp_path / "broken"
    shutil.copytree(artifact.directory, copy)
    tamper(copy, lambda d: (d / "model.vmfb").write_bytes((d / "model.vmfb").read_bytes()[:200]))
    with pytest.raises(ArtifactError, match="IREE cannot load model.vmfb: .+"):
        IreeBackend().load(copy)
    with pytest.raises(RunError, match=f"Native program '{RUN_TOOL}' \\| exited [1-9]\\d*: .+"):
        run_native(copy, sig.example_feed())
    (copy / "manifest.json").write_text((copy / "manifest.json").read_text().replace('"iree"', '"xla"', 1))
    with pytest.raises(ArtifactError, match="consumer 'iree_tools', expected 'multiexport.native/1' 'pjrt_c_api'"):
        run_native(copy, sig.example_feed())


def test_a_hostile_manifest_cannot_make_the_native_runner_write_outside(built, tmp_path):
    """Aliases were file names: `../../x` wrote outside the artifact. Now files are input{i}/output{j}, and a manifest
    whose alias or files entry leaves the directory is refused before anything runs."""
    import json

    _, sig, artifact = built("seed")
    copy = tmp_path / "art" / "hostile"
    shutil.copytree(artifact.directory, copy)
    data = json.loads((copy / "manifest.json").read_text())
    data["inputs"][1]["alias"] = "../../x"
    data["outputs"][0]["alias"] = "../../../escaped"
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="expected an identifier"):
        run_native(copy, sig.example_feed())
    data["inputs"][1]["alias"] = "foo_baz"
    data["outputs"][0]["alias"] = "out"
    data["files"]["example_inputs"] = "../../../etc/passwd"
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="leaves the directory"):
        run_native(copy, sig.example_feed())
    assert not (tmp_path / "x").exists() and not list(tmp_path.rglob("escaped*"))


def test_bfloat16_runs_in_python_and_natively_as_raw_bytes_of_a_static_shape(tmp_path):
    """IREE's tools read no bfloat16 .npy: the native section passes it as raw bytes with the shape in the flag,
    and the native run gives the Python runner's outputs bit for bit (the same module, the same runtime)."""
    target = examples.mlp_bf16()
    sig = build_signature(target)
    artifact = IreeBackend().export(target.fn, sig, tmp_path / "a")
    native = artifact.manifest.native
    assert "--input=32xbf16=@inputs/input0.bin" in native["run_args"], native["run_args"]
    assert native["results"][0]["file"] == "output0.bin" and native["results"][0]["encoding"] == "raw"
    assert native["inputs_written"] and (artifact.directory / "inputs" / "input0.bin").stat().st_size == 32 * 2
    feed = sig.example_feed()
    python = IreeBackend().load(artifact.directory)(feed)
    assert_faithful(python, reference_outputs(target, sig, feed), sig)
    got = run_native(artifact.directory, feed)
    for leaf in sig.outputs:
        assert got[leaf.name].dtype == python[leaf.name].dtype
        np.testing.assert_array_equal(got[leaf.name].view(np.uint16), np.asarray(python[leaf.name]).view(np.uint16))


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU is visible: this checks the refusal without one")
def test_cuda_without_a_gpu_is_refused_before_compiling(tmp_path):
    target = examples.seed()
    with pytest.raises(ExportError, match="Platform 'cuda' \\| got no visible NVIDIA GPU") as info:
        IreeBackend().export(target.fn, build_signature(target), tmp_path / "a", ExportOptions(platforms=("cpu", "cuda")))
    assert info.value.category == "unsupported-platform"


def test_lifted_weights_are_iree_parameters_read_from_the_file_by_both_runners(tmp_path):
    from multiexport.files.safetensors import read_safetensors, write_safetensors

    target = examples.lm("small", "baked")
    sig = build_signature(target)
    artifact = IreeBackend().export(target.fn, sig, tmp_path / "a", ExportOptions(external_weights="always"))
    m = artifact.manifest
    assert m.weights["storage"] == "external" and m.files["weights"] == "weights.safetensors"
    assert "--parameters=model=weights.safetensors" in m.native["run_args"]
    assert (artifact.directory / "model.vmfb").stat().st_size < 0.25 * m.weights["external_bytes"]
    assert ('util.global private @main_weight_0 = #stream.parameter.named<"model"::"params.embed.embedding">'
            in (artifact.directory / "model.mlir").read_text())

    copy = tmp_path / "shipped"
    shutil.copytree(artifact.directory, copy)
    feed = sig.example_feed()
    runner = IreeBackend().load(copy)
    python = runner(feed)
    assert_faithful(python, reference_outputs(target, sig, feed), sig, "python")
    # Read into the device's buffers, not mapped: a mapping's resident pages would count in the process's RSS
    # beside the runtime's copy (2.4-2.95x the weights at 1 B).
    maps = Path("/proc/self/maps").read_text().splitlines()
    mapped = [line for line in maps if line.endswith(str(copy / "weights.safetensors"))]
    assert not mapped, mapped
    del runner
    assert_manifest_command_reproduces(copy, m, python)

    # The values come from the file at load: other weights in it give other outputs, in both runners.
    path = copy / "weights.safetensors"
    halved = {k: np.array(v) * np.float32(0.5) for k, v in read_safetensors(path).items()}
    write_safetensors(path, halved)
    for got in (IreeBackend().load(copy)(feed), run_native(copy, feed)):
        assert not np.allclose(got["out.logits"], python["out.logits"])
    path.write_bytes(path.read_bytes()[:4096])
    with pytest.raises(ArtifactError, match="weights file weights.safetensors"):
        IreeBackend().load(copy)


def test_a_float64_target_is_compiled_in_64_bits_not_demoted(tmp_path):
    """IREE demotes f64 to f32 by default while the manifest said float64: the artifact now keeps 64 bits."""
    import jax

    from ..cases import float64

    with jax.enable_x64(True):
        target = float64()
        sig = build_signature(target)
        artifact = IreeBackend().export(target.fn, sig, tmp_path / "a")
        want = reference_outputs(target, sig, sig.example_feed())
    assert "--iree-input-demote-f64-to-f32=false" in artifact.manifest.format["compile_flags"]
    assert "f64" in artifact.manifest.format["module_signature"] and "i64" in artifact.manifest.format["module_signature"]
    got = IreeBackend().load(artifact.directory)(sig.example_feed())
    assert got["out.y"].dtype == np.float64 and got["out.m"].dtype == np.int64
    np.testing.assert_array_equal(got["out.y"], want["out.y"])


def test_a_float64_math_function_iree_cannot_link_is_unsupported_dtype_not_a_broken_module(tmp_path):
    """float64 tanh: IREE's llvm-cpu device library has none (iree-lld: undefined symbol: tanh), float32 compiles."""
    import jax

    with jax.enable_x64(True):
        wide = Target(jnp.tanh, args=(np.linspace(-2, 2, 5),), name="tanh64")
        with pytest.raises(ExportError) as info:
            IreeBackend().export(wide.fn, build_signature(wide), tmp_path / "wide")
    assert info.value.category == "unsupported-dtype" and "float64 tanh" in str(info.value)
    assert "undefined symbol: tanh" in str(info.value) and not (tmp_path / "wide").exists()
    narrow = Target(jnp.tanh, args=(np.linspace(-2, 2, 5).astype(np.float32),), name="tanh32")
    IreeBackend().export(narrow.fn, build_signature(narrow), tmp_path / "narrow")  # the claim in the message


def test_a_diagnostic_whose_location_comes_first_keeps_its_message():
    """MLIR may print `error: loc(...): message`: the message was cut at the location, leaving `<unknown>:0: error:`."""
    from multiexport.backends.iree.compile import _diagnostics

    text = ("Diagnostics:\n<unknown>:0: error: loc(callsite(\"jit(f)/reshape\"(\"model.py\":3:4) at \"main\")): failed "
            "to legalize operation 'stablehlo.dynamic_reshape'\n<unknown>:0: note: see current operation\n\n"
            "Invoked with:\n iree-compile ...")
    assert _diagnostics(text) == "error: failed to legalize operation 'stablehlo.dynamic_reshape'"


def _counting_compiles(monkeypatch) -> list[list[str]]:
    """Every iree-compile run's extra flags, the real compiler still doing the work."""
    from multiexport.backends.iree import compile as iree_compile

    seen: list[list[str]] = []
    real = iree_compile.compile_vmfb

    def counted(stablehlo, targets, flags, *args, **kwargs):
        seen.append(list(flags))
        return real(stablehlo, targets, flags, *args, **kwargs)

    monkeypatch.setattr(iree_compile, "compile_vmfb", counted)
    return seen


def test_a_module_rejected_with_a_performance_flag_compiles_without_it_and_says_so(tmp_path, monkeypatch):
    """A flag iree-compile rejects must not cost the artifact (the real compiler refusing a real flag)."""
    from multiexport.backends.iree import export as iree_export
    from multiexport.backends.iree.config import CpuConfig

    bad = "--iree-no-such-performance-flag"
    monkeypatch.setattr(iree_export, "cpu_config", lambda *a: CpuConfig(flags=(bad,), why={"data_tiling": "test"}))
    seen = _counting_compiles(monkeypatch)
    target = examples.mlp()
    m = IreeBackend().export(target.fn, build_signature(target), tmp_path / "a").manifest
    assert [bad in flags for flags in seen] == [True, False]
    assert m.format["cpu_config"]["rejected"].startswith(f"iree-compile rejected the module with {bad}")


def test_a_symbolic_module_refused_for_its_dynamic_shapes_is_not_compiled_again_without_the_flags(tmp_path,
                                                                                             monkeypatch):
    """dynamic_reshape is refused whatever the flags: one symbolic attempt, then one compile per size."""
    seen = _counting_compiles(monkeypatch)
    target = Target(lambda batch: {"flat": batch["x"].reshape(-1) * 2.0},
                    args=({"x": np.arange(12, dtype=np.float32).reshape(3, 4)},), name="flatten",
                    symbolic_batch="b", batch_leaves=("batch.*",))
    m = IreeBackend().export(target.fn, build_signature(target), tmp_path / "a",
                             ExportOptions(fallback_sizes={"b": (1,)})).manifest
    assert sorted(m.format["static_fallback"]["models"]) == ["b=1", "b=3"]
    assert len(seen) == 3, seen  # symbolic (refused), b=3, b=1
