"""The TPU found without opening it, and one process per chip: on a machine with a TPU, `compare`'s own process
and every worker it starts run JAX with JAX_PLATFORMS=cpu (libtpu lets one process hold a chip; a parent that
opened it made every worker fail with the libtpu lockfile error). Rehearsed on the CPU: the TPU is announced the
way the lent machine announces it (TPU_ACCELERATOR_TYPE, device files), and each process that builds the target
writes down the JAX platform setting it started with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from multiexport.environment import tpu_presence, tpu_variables

from .conftest import REPO


def _without_tpu_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TPU_") and k != "JAX_PLATFORMS"}


def test_device_files_and_the_accelerator_variable_are_the_evidence(tmp_path):
    assert not tpu_presence({}, dev=str(tmp_path)).attached
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    (tmp_path / "dev" / "vfio" / "vfio").write_text("")  # the VFIO control file alone is no device
    assert not tpu_presence({}, dev=str(tmp_path)).attached
    (tmp_path / "dev" / "accel0").write_text("")
    (tmp_path / "dev" / "vfio" / "0").write_text("")
    found = tpu_presence({"TPU_ACCELERATOR_TYPE": "v5litepod-4"}, dev=str(tmp_path))
    assert found.evidence == ("/dev/accel0", "/dev/vfio/0", "TPU_ACCELERATOR_TYPE=v5litepod-4")
    assert "a TPU (/dev/accel0" in found.describe()


def test_the_tpu_variables_are_passed_as_they_are():
    env = {"TPU_SKIP_MDS_QUERY": "true", "TPU_HOST_BOUNDS": "1,1,1", "PATH": "/bin", "XTPU_X": "1"}
    assert tpu_variables(env) == {"TPU_HOST_BOUNDS": "1,1,1", "TPU_SKIP_MDS_QUERY": "true"}


def _platforms_after(code: str, env: dict[str, str]) -> list[str]:
    script = ("import os, sys\nfrom multiexport.environment import keep_jax_off_the_tpu, tpu_worker_environment\n"
              + code + "\nimport jax\nprint(os.environ.get('JAX_PLATFORMS'), jax.config.jax_platforms, "
              "tpu_worker_environment()['JAX_PLATFORMS'], jax.default_backend())")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**_without_tpu_env(), **env}, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_with_a_tpu_jax_is_kept_on_the_cpu_before_and_after_its_import():
    assert _platforms_after("keep_jax_off_the_tpu()", {"TPU_ACCELERATOR_TYPE": "v5litepod-4"}) == \
        ["cpu", "cpu", "tpu,cpu", "cpu"]
    # JAX imported first (a target module imports it) reads JAX_PLATFORMS at import: its config is set too
    assert _platforms_after("import jax\nkeep_jax_off_the_tpu()", {"TPU_ACCELERATOR_TYPE": "v5litepod-4"}) == \
        ["cpu", "cpu", "tpu,cpu", "cpu"]
    # the user's own setting goes to the one TPU process
    assert _platforms_after("keep_jax_off_the_tpu()", {"TPU_ACCELERATOR_TYPE": "v5litepod-4",
                                                       "JAX_PLATFORMS": "tpu"})[2] == "tpu"


def test_without_a_tpu_nothing_changes():
    assert _platforms_after("keep_jax_off_the_tpu()", {})[:2] == ["None", "None"]


TARGET = '''
import os
from pathlib import Path

import jax.numpy as jnp

import multiexport

with open(os.environ["TPU_TEST_LOG"], "a") as log:  # each process that builds the target says how JAX starts
    log.write(f"{os.getpid()} {os.environ.get('JAX_PLATFORMS')}\\n")


def f(x):
    return jnp.tanh(x) * 2.0


target = multiexport.Target(f, args=(jnp.ones((4, 3), jnp.float32),), name="tpu_target")
'''


def test_compare_on_a_tpu_machine_runs_every_process_with_jax_on_the_cpu(tmp_path):
    (tmp_path / "tpu_target.py").write_text(TARGET)
    log = tmp_path / "platforms.log"
    out = tmp_path / "out"
    env = {**_without_tpu_env(), "TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_TEST_LOG": str(log),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "multiexport", "compare", "tpu_target:target", "--backends", "xla",
                           "--trials", "1", "--bench-time", "0.05", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    seen = [line.split() for line in log.read_text().splitlines()]
    assert len({pid for pid, _ in seen}) >= 2, seen  # the parent and at least one worker built it
    assert {platform for _, platform in seen} == {"cpu"}, seen
    environment = json.loads((out / "results.json").read_text())["environment"]
    assert environment["jax_platforms"] == "cpu"
    assert environment["tpu"].startswith("a TPU (") and "TPU_ACCELERATOR_TYPE=v5litepod-4" in environment["tpu"]


def test_device_tpu_adds_the_tpu_rows_and_auto_adds_them_only_with_a_tpu():
    from multiexport.run.devices import resolve

    plan = resolve("tpu", {})
    assert plan.tpu and plan.chosen == "cpu" and "one TPU worker" in plan.note
    assert resolve("auto", {}, tpu_here=True).tpu
    assert not resolve("auto", {}, tpu_here=False).tpu and not resolve("cpu", {}, tpu_here=True).tpu


def test_compare_device_tpu_without_a_tpu_gives_no_tpu_rows_with_the_reason_beside_the_cpu_rows(tmp_path):
    out = tmp_path / "out"
    env = {**_without_tpu_env(), "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "multiexport", "compare", "--backends", "xla", "--device", "tpu",
                           "--native", "--trials", "1", "--bench-time", "0.05", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["backends"]["xla"]["status"] == "ok"  # the CPU row as ever
    tpu = results["device"]["tpu_rows"]
    runners = {row["runner"]: row for row in tpu["rows"]}
    assert set(runners) == {"jax.jit", "jax.jit highest", "xla", "xla native"}
    assert {row["status"] for row in runners.values()} == {"no-tpu"}
    assert all(row["device"] == "tpu" and row["reason"] for row in runners.values())
    assert tpu["reason"].startswith("JAX sees no TPU")
    assert "TPU xla: no-tpu" in proc.stderr + proc.stdout
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("multiexport-")]  # its temporaries are gone
    # a TPU row that failed parity is the compare's verdict too (exit 1), a failed one a backend failure (3)
    from multiexport.results import load_results

    assert load_results(out / "results.json").exit_code == 0
    for status, code in (("parity-failed", 1), ("failed", 3)):
        results["device"]["tpu_rows"]["rows"][2]["status"] = status
        (out / "results.json").write_text(json.dumps(results))
        assert load_results(out / "results.json").exit_code == code
        assert load_results(out / "results.json").exit_code_allowing(["tpu"]) == 0


def test_the_reference_at_a_matmul_precision_lowers_every_dot_at_it():
    import jax.numpy as jnp
    import numpy as np

    from multiexport import Target
    from multiexport.leaves import build_signature
    from multiexport.measure.reference import ReferenceRunner

    w = np.ones((8, 4), np.float32)
    target = Target(lambda x: jnp.tanh(x @ w), args=(jnp.ones((2, 8), jnp.float32),), name="dot")
    sig = build_signature(target)
    x = np.ones((2, 8), np.float32)

    def lowered(precision: str) -> str:
        runner = ReferenceRunner(target, sig, "cpu", matmul_precision=precision)
        return runner._jitted.lower(x).as_text()

    assert "HIGHEST" in lowered("highest") and "HIGHEST" not in lowered("default")
    assert "HIGH" in lowered("high")


def test_compare_records_the_matmul_precision_and_refuses_an_unknown_one(tmp_path):
    env = _without_tpu_env()
    out = tmp_path / "out"
    base = [sys.executable, "-m", "multiexport", "compare", "--backends", "xla", "--no-bench", "--trials", "1",
            "--out-dir", str(out)]
    proc = subprocess.run(base + ["--matmul-precision", "highest"], capture_output=True, text=True, timeout=300,
                          env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "results.json").read_text())["config"]["matmul_precision"] == "highest"
    bad = subprocess.run(base + ["--matmul-precision", "bf16"], capture_output=True, text=True, timeout=120, env=env,
                         cwd=REPO)
    assert bad.returncode == 2 and "--matmul-precision" in bad.stderr


def test_export_on_a_tpu_machine_lowers_xla_for_the_tpu_and_the_cpu(tmp_path):
    def platforms(env: dict[str, str]) -> list[str]:
        out = tmp_path / f"a{len(env)}"
        proc = subprocess.run([sys.executable, "-m", "multiexport", "export", "--out-dir", str(out)], capture_output=True,
                              text=True, timeout=300, env={**_without_tpu_env(), **env}, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return json.loads((out / "manifest.json").read_text())["supports"]["platforms"]

    assert platforms({}) == ["cpu"]
    assert platforms({"TPU_ACCELERATOR_TYPE": "v5litepod-4"}) == ["cpu", "tpu"]


def test_a_rehearsed_native_tpu_row_runs_its_platforms_own_program_and_is_judged_at_tpu_parity(tmp_path):
    """The TPU stage's artifact is lowered for cpu,tpu; its native row runs the program lowered for the plugin's
    platform alone (the CPU plugin in a rehearsal: platforms/cpu.mlirbc), so it is held to 1e-5, not the bf16 bound."""
    from multiexport.backends.xla import runtime as pjrt

    try:
        pjrt.find_pjrt_header()
        pjrt.find_pjrt_plugin(device="cpu")
    except Exception as exc:  # noqa: BLE001 - the rehearsal's native row needs pjrt_run and a CPU plugin
        import pytest

        pytest.skip(f"no PJRT CPU plugin or pjrt_c_api.h here: {exc}")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "multiexport", "compare", "--backends", "xla", "--device", "tpu",
                           "--native", "--trials", "1", "--bench-time", "0.05", "--out-dir", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**_without_tpu_env(), "MULTIEXPORT_TPU_REHEARSAL": "cpu", "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {row["runner"]: row for row in json.loads((out / "results.json").read_text())["device"]["tpu_rows"]["rows"]}
    native = rows["xla native"]
    assert native["status"] == "ok" and native["bit_exact"] is True, native
    assert native["program"] == "platforms/cpu.mlirbc"
