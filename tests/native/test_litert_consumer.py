"""LiteRT's native consumer (lite_run, the LiteRT C API of the ai-edge-litert wheel) against `multiexport run`.

Every LiteRT artifact is exported once; `multiexport run`'s outputs come from one fresh process (tests.run_many,
the user's path: ai_edge_litert's Interpreter with XNNPACK); lite_run runs each artifact from its directory and
manifest alone through LiteRT's CompiledModel on its CPU accelerator (XNNPACK too). The same XNNPACK kernels
run in both, so outputs must be equal bit for bit. Cases: the shared registry's COMMON cases LiteRT exports
(its converter has no float64 or bfloat16 kernels for these ops) and three more (a dropped leaf, int32 leaves
and outputs), a symbolic batch at two sizes, a flax.linen CNN from the examples, and a static-size fallback
artifact (its per-size models run natively; the artifact itself is refused naming them).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multiexport import ArtifactError, RunError, examples, export
from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.native.build import NativeBuildError, build
from multiexport.native.run import print_command, run

from ..cases import case, feed_for
from ..conftest import REPO
from ..exporting.test_static_fallback import first_row
from .test_consumers import COMMON, _assert_same, _read

UNSUPPORTED = {"float64": "no float64 kernels", "mlp_bf16": "no bfloat16 batch_matmul kernel"}  # the converter's
# beyond COMMON: a leaf the SavedModel stage drops (no signature input), int32 leaves, an int32 and a float output
EXTRA = ["unused_leaf", "int_leaves", "top_k"]
CASES = [c for c in COMMON if c not in UNSUPPORTED] + EXTRA + ["cnn"]


def _target(name: str):
    return examples.cnn() if name == "cnn" else case(name).make()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every LiteRT artifact, its feeds, and `multiexport run`'s outputs from one fresh process."""
    backend = get_backend("litert")
    if not backend.available().ok:
        pytest.skip(f"litert unavailable: {backend.available().reason}")
    try:
        build("lite_run")
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("native-litert")
    done, jobs = {}, []
    for name in CASES:
        target = _target(name)
        sig = build_signature(target)
        options = case(name).options if name != "cnn" else {}
        artifact = backend.export(target.fn, sig, root / name, ExportOptions(**options))
        feeds = []
        for batch in (case(name).batch_sizes if name != "cnn" else ()) or (None,):
            stem = root / f"{name}-{batch}"
            save_npz(f"{stem}.in.npz", feed_for(sig, batch))
            feeds.append((f"{stem}.in.npz", f"{stem}.out.npz"))
        jobs.append({"artifact": str(artifact.directory), "feeds": [list(f) for f in feeds]})
        done[name] = (artifact.directory, sig, feeds)
    fallback = export(first_row(), root / "fallback", backend="litert", static_sizes={"b": (1, 3)})
    sig = build_signature(first_row())
    save_npz(root / "fallback-3.in.npz", feed_for(sig, 3))
    jobs.append({"artifact": str(fallback.directory),
                 "feeds": [[str(root / "fallback-3.in.npz"), str(root / "fallback-3.out.npz")]]})
    done["fallback"] = (fallback.directory, sig, [(str(root / "fallback-3.in.npz"), str(root / "fallback-3.out.npz"))])
    (root / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-m", "tests.run_many", str(root / "jobs.json")], cwd=REPO, check=True, timeout=900)
    return done


def _want(out_path: str) -> dict:
    error = Path(out_path).with_suffix(".error.txt")
    assert not error.exists(), error.read_text()
    return load_npz(out_path)


@pytest.mark.subprocess
@pytest.mark.parametrize("name", CASES)
def test_lite_run_matches_multiexport_run_bit_for_bit(exported, name):
    directory, sig, feeds = exported[name]
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["native"]["consumer"] == "litert_c_api" and manifest["native"]["signature"] == "serving_default"
    for feed_path, out_path in feeds:
        native = run(directory, load_npz(feed_path))
        _assert_same("litert", None, native.outputs, _want(out_path), sig, f"litert/{name}/{feed_path}")


@pytest.mark.subprocess
def test_an_output_that_is_the_input_tensor_keeps_the_input(exported):
    """The converter folds x * 1 to x: out.1 of many_outputs is the input's own tensor. LiteRT keeps one host
    allocation per tensor, so a separate output buffer would replace the input (all twelve outputs were 0)."""
    directory, sig, _ = exported["many_outputs"]
    x = np.array([1.5, -2.0, 3.25], np.float32)
    got = run(directory, {"x": x}).outputs
    for k in range(12):
        assert got[f"out.{k}"].tobytes() == (x * np.float32(k)).tobytes(), k


@pytest.mark.subprocess
def test_symbolic_batch_runs_at_any_size_the_feed_binds(exported):
    directory, sig, _ = exported["symbolic_batch"]
    feed = feed_for(sig, 5, seed=3)
    got = run(directory, feed).outputs["out.y"]
    want = feed["batch.x"] @ feed["w"] + feed["batch.offset"][:, None]
    assert got.shape == (5, 2) and np.allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["seed", "mlp", "cnn"])
def test_timed_run_returns_the_programs_figures(exported, name):
    directory, sig, feeds = exported[name]
    timed = run(directory, load_npz(feeds[0][0]), iters=20, warmup=2, threads=1)
    t = timed.timing
    assert t["consumer"] == "litert_c_api" and t["calls"] == 20 and t["warmup"] == 2 and t["threads"] == 1
    assert 0 < t["min_ms"] <= t["median_ms"] <= t["p90_ms"] <= t["max_ms"]
    assert "--threads" in timed.command and timed.command[timed.command.index("--threads") + 1] == "1"
    _assert_same("litert", None, timed.outputs, _want(feeds[0][1]), sig, f"litert/{name} timed")


@pytest.mark.subprocess
def test_printed_command_runs_under_env_i_from_the_artifact_directory(exported, tmp_path):
    directory, sig, _ = exported["mlp"]
    line = print_command(directory)
    assert line.startswith(f"cd {shlex.quote(str(directory))} && mkdir -p outputs && env -i ")
    proc = subprocess.run(["bash", "-c", line], env={}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((directory / "manifest.json").read_text())
    got = {r["leaf"]: _read(directory / "outputs" / r["file"], r)
           for r in manifest["native"]["results"]}
    save_npz(tmp_path / "ex.npz", sig.example_feed())
    subprocess.run([sys.executable, "-m", "multiexport", "run", str(directory), "--inputs", str(tmp_path / "ex.npz"),
                    "--save-outputs", str(tmp_path / "want.npz")], check=True, capture_output=True, timeout=600)
    _assert_same("litert", None, got, load_npz(tmp_path / "want.npz"), sig, "litert/mlp printed command")


def _tampered(exported, tmp_path, edit):
    directory, sig, feeds = exported["symbolic_batch"]
    copy = tmp_path / "tampered"
    shutil.copytree(directory, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest["native"])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy, feeds


@pytest.mark.subprocess
@pytest.mark.parametrize("edit", [
    pytest.param(lambda n: n["args"].reverse(), id="args-reordered"),
    pytest.param(lambda n: n["args"][1].update(key="batch_x"), id="key-swapped"),
    pytest.param(lambda n: n.update(model="../model.tflite"), id="model-outside"),
    pytest.param(lambda n: n.update(accelerator="gpu"), id="accelerator"),
])
def test_a_section_the_export_did_not_write_is_refused(exported, tmp_path, edit):
    copy, feeds = _tampered(exported, tmp_path, edit)
    with pytest.raises(ArtifactError, match=r"native|outside|leaves"):
        run(copy, load_npz(feeds[0][0]), trust_artifact=True)


@pytest.mark.subprocess
@pytest.mark.parametrize(("edit", "said"), [
    pytest.param(lambda n: n["results"][0].update(key="out_z"),
                 "lite_run: Output 'out.y' | the model's signature has no output named 'out_z'", id="no-such-output"),
    pytest.param(lambda n: n["results"][0].update(shape=[1, 2]),
                 "lite_run: LiteRtRunCompiledModel: LiteRT status 3 (ErrorRuntimeFailure) (LiteRT: Custom allocation is "
                 "too small for tensor idx: ", id="buffer-too-small"),
])
def test_lite_run_itself_refuses_what_the_model_does_not_match_in_one_line(exported, tmp_path, edit, said):
    """Run directly (no Python checks first): one stderr line, LiteRT's own ERROR lines appended to it, none of its
    INFO and WARNING chatter."""
    copy, _ = _tampered(exported, tmp_path, edit)
    proc = subprocess.run([str(build("lite_run")), "--artifact", str(copy), "--inputs", str(copy / "inputs"),
                           "--outputs", str(tmp_path / "out")], env={}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith(said), proc.stderr


@pytest.mark.subprocess
def test_a_static_fallback_artifact_runs_each_feed_natively_in_the_model_of_its_size(exported):
    directory, sig, feeds = exported["fallback"]
    feed = load_npz(feeds[0][0])
    native = run(directory, feed)  # the model of the feed's size, as run from its own directory
    _assert_same("litert", None, native.outputs, _want(feeds[0][1]), sig, "litert/fallback")
    size = next(iter(feed.values())).shape[0]
    direct = run(directory / "static" / f"b{size}", feed)
    assert all(np.array_equal(native.outputs[k], direct.outputs[k]) for k in direct.outputs)
    with pytest.raises(RunError, match=r"got b=7, expected one of the sizes it was built for: b=2; b=1; b=3"):
        run(directory, {name: np.repeat(value[:1], 7, axis=0) for name, value in feed.items()})


def test_a_litert_release_the_declarations_were_not_checked_against_is_unavailable(monkeypatch):
    """litert_api.h declares a C API whose signatures changed between releases: an installed ai-edge-litert outside
    the checked ones makes lite_run unavailable (a native row says why), never a program built on a guess."""
    from multiexport.backends.litert import native as litert_native

    pytest.importorskip("ai_edge_litert")
    litert_native.find_litert()  # the installed release is one the declarations were checked against
    monkeypatch.setattr(litert_native, "LITERT_CHECKED", ("0.1",))
    with pytest.raises(NativeBuildError, match=r"ai-edge-litert 2\.3\.\d+ \| lite_run's declarations .* against 0\.1\.x"):
        build("lite_run")
