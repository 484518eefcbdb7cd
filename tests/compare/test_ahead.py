"""comparison/ahead.py: the export worker that builds the target, started as soon as the signature is known."""

from __future__ import annotations

import dataclasses
import os
import types
import uuid

import numpy as np
import pytest

from multiexport import compare
from multiexport.comparison.ahead import start_ahead
from multiexport.comparison.config import CompareConfig
from multiexport.comparison.exports import plan_with
from multiexport.comparison.memory_plan import AVAILABLE_ENV
from multiexport.leaves import build_signature
from multiexport.leaves.target import Target
from multiexport.results import Status

STARTED = "the worker that needs the built target started at the signature"

MODEL = '''
import os
import numpy as np
import jax
import {helper}  # a module of its own: the build imports something new (Context.target_modules)
from multiexport import Target

with open(os.environ["AHEAD_TEST_IMPORTS"], "a") as log:  # every process that imports this module says so
    log.write(f"{{os.getpid()}}\\n")

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
X = np.linspace(0, 1, 8, dtype=np.float32).reshape(2, 4)


def target():
    return Target(lambda x: {{"y": x @ W}}, args=(X,), name="ahead_model", symbolic_batch="b")


def drawing():  # draws a number at run time: not deterministic, stopped before any export
    def fn(x):
        noise = jax.pure_callback(lambda: np.float32(np.random.rand()), jax.ShapeDtypeStruct((), np.float32))
        return {{"y": x @ W + noise}}
    return Target(fn, args=(X,), name="drawing")
'''


def _model(tmp_path, monkeypatch) -> tuple[str, object]:
    helper = f"ahead_helper_{uuid.uuid4().hex}"  # new to this process, whatever ran in it before
    (tmp_path / f"{helper}.py").write_text("VALUE = 1\n")
    (tmp_path / "model.py").write_text(MODEL.format(helper=helper))
    log = tmp_path / "imports.log"
    monkeypatch.setenv("AHEAD_TEST_IMPORTS", str(log))
    return str(tmp_path / "model.py"), log


def _children() -> list[int]:
    """This process's live children (zombies are reaped ones' leftovers: none should remain)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


def test_a_target_whose_build_imports_a_module_has_its_builder_started_after_the_signature(tmp_path, monkeypatch):
    """ONNX's jax2onnx route needs the built target, XLA the handed module: one worker builds, started after
    the signature (it imported the model before the exports were planned), and both rows pass. Only this process
    and that worker import the model."""
    model, log = _model(tmp_path, monkeypatch)
    seen: list[str] = []
    results = compare(f"{model}:target", backends=["xla", "onnx"], out_dir=tmp_path / "out", trials=1, bench=None,
                      progress=seen.append)
    for name in ("xla", "onnx"):
        assert results.backends[name].status is Status.OK and results.backends[name].parity.passed, name
    export_line = next(line for line in seen if line.startswith("export with"))
    assert STARTED in export_line, seen
    from benchmarks.compare_time import kind_of

    assert kind_of(export_line) == "export"  # the phase is counted as the exports', not as the target's build
    pids = set(log.read_text().split())
    assert pids - {str(os.getpid())} and len(pids) == 2, pids


def test_a_compare_stopped_before_its_exports_leaves_no_worker_started_ahead(tmp_path, monkeypatch):
    """A target that draws random numbers at run time stops after its determinism check: the export worker started
    after the signature is ended with it, as every row says why."""
    model, _ = _model(tmp_path, monkeypatch)
    before = set(_children())
    results = compare(f"{model}:drawing", backends=["xla", "onnx"], out_dir=tmp_path / "out", trials=1, bench=None)
    assert all(row.status is Status.NONDETERMINISTIC_TARGET for row in results.backends.values())
    assert set(_children()) - before == set()


def _ctx(spec="multiexport.examples:seed", imported=frozenset({"keras_hub"})):
    return types.SimpleNamespace(spec=spec, target_modules=imported, threads=2,
                                 config=dataclasses.replace(CompareConfig(), backends=("xla", "onnx", "iree")))


def _sig():
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    return build_signature(Target(lambda x: {"y": x @ w}, args=(np.ones((2, 4), np.float32),), name="m"))


def test_no_worker_is_started_ahead_without_a_target_string_an_import_or_memory_for_two_exports(monkeypatch):
    device = types.SimpleNamespace(chosen="cpu", excluded={}, tpu=False)
    assert start_ahead(_ctx(spec=None), _sig(), device, {}) is None  # exports in this process
    assert start_ahead(_ctx(imported=frozenset()), _sig(), device, {}) is None  # its build imported nothing
    monkeypatch.setenv(AVAILABLE_ENV, str(64 * 2**30))
    need = max(plan_with(_ctx(), _sig(), device, {}).export_need.values())
    monkeypatch.setenv(AVAILABLE_ENV, str(int(1.5 * need)))  # one export at a time, as the memory plan counts
    assert start_ahead(_ctx(), _sig(), device, {}) is None
    monkeypatch.setenv(AVAILABLE_ENV, str(int(2.5 * need)))
    ahead = start_ahead(_ctx(), _sig(), device, {})
    assert ahead is not None
    ahead.close()


@pytest.fixture(autouse=True)
def _no_leftover_env(monkeypatch):
    monkeypatch.delenv("AHEAD_TEST_FAIL", raising=False)
