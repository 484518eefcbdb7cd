"""The paired reference worker builds the target from the kept build cache, and its cold start reads no cache."""

from __future__ import annotations

import json

import pytest

from ..conftest import run_cli

SPEC = "benchmarks.real_models:eqx_mlp"  # equinox's MLP: its weights are drawn eagerly, one XLA compile per op


def _reference_bench(tmp_path, out: str, cache) -> dict:
    proc = run_cli("compare", SPEC, "--backends", "xla", "--out-dir", tmp_path / out, "--trials", "1",
                   "--bench-time", "0.05", env={"MULTIEXPORT_BUILD_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((tmp_path / out / "results.json").read_text())["reference"]["bench"]


@pytest.mark.subprocess
def test_the_reference_worker_builds_from_the_kept_cache_and_its_cold_start_compiles_afresh(tmp_path):
    """A second compare of the same model: the reference's worker reads its factory's programs from the cache the
    first one kept (hits, no miss), says so with its start-up figure, and its cold start reads no cache at all
    (the cache is switched off before it loads: a cold start never hides a compile)."""
    cache = tmp_path / "build-cache"
    _reference_bench(tmp_path, "first", cache)  # its own build records the factory's programs
    bench = _reference_bench(tmp_path, "second", cache)
    built = bench["extra"]["target_build_cache"]
    assert built["dir"] == str(cache) and built["hits"] >= 3 and built["misses"] == 0, built
    assert built["cold_start_reads"] == 0, built
    assert "built from the build cache" in bench["extra"]["process_start_how"]
    assert bench["sizes"][0]["compile_s"] > 0  # compiled in the cold start, not read


@pytest.mark.subprocess
def test_without_a_kept_cache_the_reference_builds_as_before(tmp_path):
    bench = _reference_bench(tmp_path, "off", "off")
    assert "target_build_cache" not in bench["extra"]
    assert "build cache" not in bench["extra"]["process_start_how"]


SERVE_WITHOUT_JAX = """
import sys
sys.modules["jax"] = None  # `import jax` raises ImportError: a machine with onnxruntime and no JAX
from multiexport.run.serve import serve_main
raise SystemExit(serve_main(sys.argv[1:]))
"""


@pytest.mark.subprocess
def test_an_onnx_paired_worker_cold_starts_without_importing_jax(tmp_path):
    """Only the reference worker built from the build cache counts JAX's cache reads at its cold start: an ONNX
    worker's cold start neither imports JAX (0.35 s of its timed cold start, and its memory) nor needs it."""
    import subprocess
    import sys

    pytest.importorskip("onnxruntime")
    from multiexport.api import export
    from multiexport.files.npz import load_npz
    from multiexport.measure.bench import BenchConfig
    from multiexport.run.messages import ColdStart, Load, Loaded, Prepare, Quit, decode_answer, encode_request
    from multiexport.run.runs import write_bench_feeds

    from ..conftest import REPO

    artifact = tmp_path / "onnx"
    export("multiexport.examples:seed", out_dir=artifact, backend="onnx")
    write_bench_feeds(tmp_path / "bench", [(None, load_npz(artifact / "example_inputs.npz"))], {})
    requests = [Load(), Prepare(str(tmp_path / "bench"), BenchConfig(warmup_iters=2, bench_time=0.01)), Quit()]
    done = subprocess.run([sys.executable, "-c", SERVE_WITHOUT_JAX, "serve", "run", str(artifact),
                           str(tmp_path / "out"), "--runtime", "onnx"], cwd=REPO, capture_output=True, text=True,
                          input="".join(encode_request(r) + "\n" for r in requests), timeout=300)
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert len(answers) == 3, (done.stdout, done.stderr[-2000:])  # Imported, Loaded, ColdStart; Quit exits
    assert isinstance(decode_answer(answers[1], Loaded, "load"), Loaded), answers[1]
    cold = decode_answer(answers[2], ColdStart, "prepare")
    assert isinstance(cold, ColdStart), answers[2]
    assert cold.bench.sizes[0].status.value == "ok" and cold.bench.sizes[0].first_call_s is not None
