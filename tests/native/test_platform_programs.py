"""A module lowered for several platforms carries one single-platform program per platform, and pjrt_run runs the
one of its plugin's platform: the multi-platform main takes the platform index at run time, so its `case` over
platforms survives into the compile and, on a TPU, a transformer block's numbers differed from jax's by 1.3e-3 of
max|ref|; the program lowered for the TPU alone ran bit-exact. Checked here with the real PJRT CPU plugin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from multiexport import api
from multiexport.backends.xla import runtime as pjrt
from multiexport.errors import RunError
from multiexport.leaves import build_signature
from multiexport.native.run import command, run

from ..cases import case


def _cpu_plugin() -> Path:
    try:
        pjrt.find_pjrt_header()
        return pjrt.find_pjrt_plugin(device="cpu")
    except Exception as exc:  # noqa: BLE001 - pjrt_run needs the header and a CPU plugin
        pytest.skip(f"no PJRT CPU plugin or pjrt_c_api.h here: {exc}")


@pytest.fixture(scope="module")
def two_platform(tmp_path_factory):
    """The MLP exported for cpu,tpu (lowering for the TPU needs no TPU), its signature and its example feed."""
    target = case("mlp").make()
    out = tmp_path_factory.mktemp("platforms") / "mlp_xla"
    api.export(target, out, "xla", platforms=("cpu", "tpu"))
    sig = build_signature(target)
    return out, sig.example_feed()


def _module_text(path: Path) -> str:
    from jax._src.interpreters import mlir as jax_mlir
    from jax.extend.mlir.dialects import stablehlo

    with jax_mlir.make_ir_context() as ctx:
        return str(stablehlo.deserialize_portable_artifact(ctx, path.read_bytes()))


def test_a_cpu_tpu_export_has_a_tpu_program_with_no_platform_index_and_no_case(two_platform):
    out, _ = two_platform
    native = json.loads((out / "manifest.json").read_text())["native"]
    assert sorted(native["platform_modules"]) == ["cpu", "tpu"]
    tpu = native["platform_modules"]["tpu"]
    assert tpu["program"] == "platforms/tpu.mlirbc" and tpu["platforms"] == ["tpu"]
    assert native["args"][0]["kind"] == "platform_index"
    assert [a["kind"] for a in tpu["args"]] == [a["kind"] for a in native["args"][1:]]  # the leaves, no index
    main, alone = _module_text(out / native["program"]), _module_text(out / tpu["program"])
    assert "stablehlo.case" in main and "_platform_index" in main  # what the TPU compiled before
    assert "stablehlo.case" not in alone and "_platform_index" not in alone


@pytest.mark.subprocess
def test_the_cpu_plugin_runs_the_cpu_program_bit_exact_to_the_runner(two_platform):
    out, feed = two_platform
    plugin = _cpu_plugin()
    native = run(out, feed, plugin=plugin, iters=2)
    assert native.timing["program"] == "platforms/cpu.mlirbc"
    want = api.load(out)(feed)
    for name, value in want.items():
        assert np.array_equal(np.asarray(value), native.outputs[name]), name


@pytest.mark.subprocess
def test_an_older_manifest_runs_the_main_module_and_says_so(two_platform, tmp_path):
    out, _ = two_platform
    plugin = _cpu_plugin()
    older = tmp_path / "older"
    subprocess.run(["cp", "-r", str(out), str(older)], check=True)
    manifest = json.loads((older / "manifest.json").read_text())
    del manifest["native"]["platform_modules"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    argv, env = command(older, plugin=plugin, iters=1, trust_artifact=True)
    (older / "outputs").mkdir(exist_ok=True)
    done = subprocess.run(argv, env=env, cwd=older, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "no single-platform program for 'cpu' (platform_modules: none, an older manifest)" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["program"] == "model.mlirbc"


@pytest.mark.subprocess
def test_pjrt_run_refuses_in_one_line_programs_that_lack_its_platform(tmp_path):
    plugin = _cpu_plugin()
    target = case("mlp").make()
    api.export(target, tmp_path / "mlp", "xla", platforms=("tpu", "cuda"))
    native = json.loads((tmp_path / "mlp" / "manifest.json").read_text())["native"]
    assert sorted(native["platform_modules"]) == ["cuda", "tpu"]
    with pytest.raises(RunError, match=r"programs are lowered for tpu, cuda, this plugin's platform is 'cpu'") as got:
        run(tmp_path / "mlp", build_signature(target).example_feed(), plugin=plugin)
    assert "\n" not in str(got.value)


@pytest.mark.subprocess
def test_a_bundle_of_a_cpu_tpu_artifact_carries_and_runs_the_cpu_program(two_platform, tmp_path):
    out, _ = two_platform
    plugin = _cpu_plugin()
    from multiexport.native.bundle import bundle

    made = bundle(out, tmp_path / "bundle", plugin=plugin)
    assert (made.directory / "artifact" / "platforms" / "tpu.mlirbc").is_file()  # for a server with a TPU
    proc = subprocess.run(["env", "-i", str(made.directory / "run.sh"), "--iters", "1"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["program"] == "platforms/cpu.mlirbc"
    assert "note:" not in proc.stderr
