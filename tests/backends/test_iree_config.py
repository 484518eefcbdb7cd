"""IREE configured for llvm-cpu performance (issue 33): data tiling on, im2col by the module's convolutions,
the runtime driver measured at export; each a backend option, recorded in the manifest, outputs in parity."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from multiexport import ArtifactError, Target, UsageError, examples
from multiexport.backends.iree import IreeBackend
from multiexport.backends.iree.config import DATA_TILING, IM2COL, IreeOptions, conv_contractions, cpu_config
from multiexport.backends.iree.driver import choose_driver
from multiexport.exporting import ExportOptions
from multiexport.leaves import build_signature
from multiexport.native import run as native

from ..conftest import assert_matches_jit, tamper

HOST = "--iree-llvmcpu-target-cpu=host"


def wide_conv() -> Target:
    """One 3x3 convolution over 64 channels (contraction 3*3*64 = 576): ResNet's shape, im2col's case."""
    x = jax.random.normal(jax.random.key(0), (1, 8, 8, 64), jnp.float32)
    w = jax.random.normal(jax.random.key(1), (3, 3, 64, 64), jnp.float32) * 0.05

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    return Target(conv, args=(x, w), name="wide_conv")


def export(tmp_path, target, name, **backend_options):
    sig = build_signature(target)
    artifact = IreeBackend().export(target.fn, sig, tmp_path / name, ExportOptions(backend_options=backend_options))
    return sig, artifact


def test_the_cnn_gets_data_tiling_and_no_im2col_and_stays_in_parity(tmp_path):
    target = examples.cnn()
    sig, artifact = export(tmp_path, target, "cnn")
    m = artifact.manifest
    assert m.format["compile_flags"] == [HOST, DATA_TILING]
    assert m.format["compile_command"][-3:] == [DATA_TILING, "-o", "model.vmfb"]
    config = m.format["cpu_config"]
    assert (config["data_tiling"], config["im2col"], config["largest_conv_contraction"]) == (True, False, 72)
    assert "72 elements, < 256" in config["why"]["im2col"]
    assert m.options == {"data_tiling": True, "im2col": "auto", "driver": "auto"}
    feed = sig.example_feed()
    assert_matches_jit(target, sig, IreeBackend().load(artifact.directory)(feed), feed, "python")
    assert_matches_jit(target, sig, native.run(artifact.directory, feed).outputs, feed, "native")


def test_a_wide_convolution_gets_im2col_and_the_options_turn_both_flags_off(tmp_path):
    target = wide_conv()
    sig, on = export(tmp_path, target, "on")
    assert on.manifest.format["compile_flags"] == [HOST, DATA_TILING, IM2COL]
    assert on.manifest.format["cpu_config"]["largest_conv_contraction"] == 576
    feed = sig.example_feed()
    got_on = IreeBackend().load(on.directory)(feed)
    assert_matches_jit(target, sig, got_on, feed, "im2col + data tiling")

    _, off = export(tmp_path, target, "off", data_tiling=False, im2col="off")
    m = off.manifest
    assert m.format["compile_flags"] == [HOST] and m.options["data_tiling"] is False
    assert m.format["cpu_config"]["why"] == {"data_tiling": "off: iree.data_tiling=false", "im2col": "off: iree.im2col=off"}
    got_off = IreeBackend().load(off.directory)(feed)
    assert_matches_jit(target, sig, got_off, feed, "default flags")
    (name,) = got_on
    np.testing.assert_allclose(got_on[name], got_off[name], rtol=1e-5, atol=1e-5)


def test_the_driver_is_measured_at_export_recorded_and_used_by_both_runners(tmp_path):
    sig, artifact = export(tmp_path, examples.mlp(), "mlp")
    m = artifact.manifest
    choice = m.format["driver_choice"]
    assert set(choice["median_us"]) == {"local-sync", "local-task"} and choice["threads"] >= 1
    assert choice["driver"] == m.format["drivers"]["llvm-cpu"] in ("local-sync", "local-task")
    assert "measured at export" in choice["rule"]
    assert m.native["run_args"][0] == f"--device={choice['driver']}"
    runner = IreeBackend().load(artifact.directory)
    assert runner.describe()["driver"] == choice["driver"] and runner.describe()["driver_choice"] == choice

    _, fixed = export(tmp_path, examples.mlp(), "task", driver="local-task")
    assert fixed.manifest.format["driver_choice"] == {"driver": "local-task",
                                                      "rule": "set by the backend option iree.driver=local-task"}
    assert fixed.manifest.native["run_args"][0] == "--device=local-task"
    described = IreeBackend().load(fixed.directory).describe()
    assert described["driver"] == "local-task" and described["iree_worker_threads"] >= 1
    # the pool as counted is what the report's threads column shows (Runner.threads_key)
    assert described["threads_reported"] == described["num_threads"] == described["iree_worker_threads"]
    feed = sig.example_feed()
    assert native.run(fixed.directory, feed).outputs.keys() == runner(feed).keys()


def test_a_small_call_runs_on_local_sync_and_one_thread_never_measures(tmp_path):
    sig, artifact = export(tmp_path, examples.seed(), "seed")
    choice = artifact.manifest.format["driver_choice"]
    # The seed's call is a few microseconds; local-task's hand-off alone is tens (measured 3.4 vs 36 us).
    assert choice["driver"] == "local-sync", choice
    described = IreeBackend().load(artifact.directory).describe()
    assert described["num_threads"] == 1 and "iree_worker_threads" not in described  # the calling thread
    assert described["threads_reported"] == 1
    arrays = [sig.example_feed()["foo.baz"]]
    one = choose_driver(artifact.directory / "model.vmfb", None, arrays, 1, threads=1)
    assert one["driver"] == "local-sync" and "median_us" not in one


def test_a_driver_the_manifest_names_outside_the_allowed_set_is_refused(tmp_path):
    _, artifact = export(tmp_path, examples.seed(), "seed", driver="local-sync")

    def edit(directory):
        path = directory / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["format"]["drivers"]["llvm-cpu"] = "cuda"
        path.write_text(json.dumps(manifest))

    tamper(artifact.directory, edit)
    with pytest.raises(ArtifactError, match=re.escape("format.drivers.llvm-cpu is 'cuda', expected one of local-sync, local-task")):
        IreeBackend().load(artifact.directory)


def test_bad_option_values_fail_before_any_work():
    with pytest.raises(UsageError, match=re.escape("Option 'iree.im2col' | got 'yes', expected one of auto, on, off")):
        IreeBackend().resolve_options({"im2col": "yes"})
    with pytest.raises(UsageError, match="Option 'iree.driver'"):
        IreeBackend().resolve_options({"driver": "cuda"})


def test_conv_contractions_read_the_kernel_layout_and_cuda_compiles_get_neither_flag():
    text = ("%0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], "
            "window = {} : (tensor<1x64x8x8xf32>, tensor<32x64x3x3xf32>) -> tensor<1x32x8x8xf32>")
    assert conv_contractions(text) == [576]
    assert cpu_config(IreeOptions(im2col="auto", data_tiling=True), ["llvm-cpu"], text).flags == (DATA_TILING, IM2COL)
    both = cpu_config(IreeOptions(im2col="on", data_tiling=True), ["llvm-cpu", "cuda"], text)
    assert both.flags == () and "global" in both.why["im2col"]


@pytest.mark.subprocess
def test_export_s_one_thread_load_check_leaves_later_local_task_runners_their_threads(tmp_path):
    """IREE sizes local-task's pool once per process. Export's load check runs with one thread; it pinned every
    later local-task runner and driver measurement of that process to one worker (BERT-base measured 795 ms on
    local-task vs 804 on local-sync, instead of 406 vs 798, so the export chose local-sync). In a fresh process."""
    import subprocess
    import sys

    from multiexport.exporting.options import usable_cpus

    if usable_cpus() < 2:
        pytest.skip("one CPU: a pool of one is all there is")
    script = f"""
import json, sys
from pathlib import Path
from multiexport import examples
from multiexport.backends.iree import IreeBackend
from multiexport.exporting import ExportOptions, RunOptions
from multiexport.leaves import build_signature
target = examples.mlp()
artifact = IreeBackend().export(target.fn, build_signature(target), Path({str(tmp_path / 'task')!r}),
                                ExportOptions(backend_options={{"driver": "local-task"}}))
one = IreeBackend().load(artifact.directory, RunOptions(threads=1)).describe()
two = IreeBackend().load(artifact.directory, RunOptions(threads=2)).describe()
print(json.dumps({{"one": [one["driver"], one.get("driver_note"), one["num_threads"]],
                   "two": [two["driver"], two["num_threads"]]}}))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["two"] == ["local-task", 2], got  # before: ["local-task", 1]
    assert got["one"][0] == "local-sync" and "one thread requested" in got["one"][1] and got["one"][2] == 1
