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
