"""Backends with real faults, for fault-isolation and parity-failure tests.

Each is the XLA backend with one thing broken for real: a perturbed artifact, a worker that aborts,
hangs or raises. Registered only inside the tests that use them (see the `fault_backends` fixture).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from multiexport.backends.onnx import OnnxBackend
from multiexport.backends.xla import XlaBackend, XlaRunner


class PerturbedXla(XlaBackend):
    """Exports fn with 1e-3 added to every float output: a numerically wrong artifact."""

    name = "xla_perturbed"

    def _export_impl(self, job):
        def perturbed(*args, **kwargs):
            out = job.fn(*args, **kwargs)
            return jax.tree_util.tree_map(lambda a: a + 1e-3 if jnp.issubdtype(a.dtype, jnp.floating) else a, out)

        return super()._export_impl(dataclasses.replace(job, fn=perturbed))


class _Faulty(XlaBackend):
    fault = ""

    def _load_impl(self, manifest, directory, options):
        runner = super()._load_impl(manifest, directory, options)
        return _FaultyRunner(self.fault, runner)


class _FaultyRunner(XlaRunner):
    def __init__(self, fault, inner):
        self.__dict__.update(inner.__dict__)
        self.fault = fault

    def _prepare_impl(self, arrays):
        if self.fault == "abort":
            os.abort()  # SIGABRT, as a native runtime crash would
        if self.fault == "autograph":
            autograph_then_abort()
        if self.fault == "hang":
            if os.environ.get("MULTIEXPORT_TEST_PID_FILE"):  # so a test can check the worker is gone afterwards
                with open(os.environ["MULTIEXPORT_TEST_PID_FILE"], "w") as f:
                    f.write(str(os.getpid()))
            time.sleep(3600)
        if self.fault == "raise":
            raise RuntimeError("runtime refused the inputs")
        if self.fault == "killed":
            os.kill(os.getpid(), signal.SIGKILL)  # what `kill -9` does: no memory pressure involved
        if self.fault == "oom":
            import resource

            import numpy as np

            # a real allocation failure, bounded: cap this worker's address space, then ask for more
            resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
            np.ones(8 << 30, dtype=np.uint8)
        return super()._prepare_impl(arrays)


class CrashingXla(_Faulty):
    name = "xla_crash"
    fault = "abort"


class HangingXla(_Faulty):
    name = "xla_hang"
    fault = "hang"


class RaisingXla(_Faulty):
    name = "xla_raise"
    fault = "raise"


class OomXla(_Faulty):
    name = "xla_oom"
    fault = "oom"


class KilledXla(_Faulty):
    name = "xla_killed"
    fault = "killed"


class SleepyXla(XlaBackend):
    """XLA plus a real sleep of $MULTIEXPORT_TEST_SLEEP_MS in every timed call: a controlled slowdown."""

    name = "xla_sleepy"

    def _load_impl(self, manifest, directory, options):
        return _SleepyRunner(super()._load_impl(manifest, directory, options))


class _SleepyRunner(XlaRunner):
    def __init__(self, inner):
        self.__dict__.update(inner.__dict__)
        self.sleep_s = float(os.environ.get("MULTIEXPORT_TEST_SLEEP_MS", "0")) / 1e3

    def _run_impl(self, prepared):
        time.sleep(self.sleep_s)
        super()._run_impl(prepared)


class DiesWhileTimedXla(XlaBackend):
    """XLA whose runtime aborts on its 40th timed call: after parity and cold start, during the timed loops."""

    name = "xla_dies_timed"

    def _load_impl(self, manifest, directory, options):
        return _DyingRunner(super()._load_impl(manifest, directory, options))


class _DyingRunner(XlaRunner):
    def __init__(self, inner):
        self.__dict__.update(inner.__dict__)
        self.calls = 0

    def _run_impl(self, prepared):
        self.calls += 1
        if self.calls == 40:
            os.abort()
        super()._run_impl(prepared)


class StaticOnlyXla(XlaBackend):
    """A converter that cannot keep a symbolic dimension (it raises as jax2onnx does on Python shape logic)
    and converts every static signature faithfully: what the static-size fallback exists for."""

    name = "xla_static_only"

    def _export_impl(self, job):
        if job.signature.symbolic_dims:
            raise RuntimeError(f"Symbolic dimension '{job.signature.symbolic_dims[0]}' used in a context that requires "
                               "a constant")
        return super()._export_impl(job)


class StaticSmallOnlyXla(XlaBackend):
    """Like StaticOnlyXla, and it cannot build a static model whose first input holds 12 elements or more either:
    a fallback artifact that lacks some of the sizes (or, over two dims, combinations of sizes) a compare checks."""

    name = "xla_static_small"

    def _export_impl(self, job):
        if job.signature.symbolic_dims:
            raise RuntimeError("Symbolic dimension used in a context that requires a constant")
        first = job.signature.inputs[0]
        if int(np.prod(first.shape)) >= 12:
            raise RuntimeError(f"this converter holds inputs of at most 11 elements, got {first.shape}")
        return super()._export_impl(job)


class StaticOnlyPerturbedXla(PerturbedXla):
    """Like StaticOnlyXla, but its static artifacts are numerically wrong (1e-3 added to float outputs)."""

    name = "xla_static_only_perturbed"

    def _export_impl(self, job):
        if job.signature.symbolic_dims:
            raise RuntimeError("Symbolic dimension used in a context that requires a constant")
        return super()._export_impl(job)


class SymbolicWrongXla(XlaBackend):
    """A converter whose symbolic models run but compute a wrong result (every float output + 1), and whose
    static ones are right: what LiteRT's converter did to keras-hub's Llama with a symbolic batch."""

    name = "xla_symbolic_wrong"

    def _export_impl(self, job):
        if job.signature.symbolic_dims:
            def wrong(*args, **kwargs):
                out = job.fn(*args, **kwargs)
                return jax.tree_util.tree_map(lambda a: a + 1.0 if jnp.issubdtype(a.dtype, jnp.floating) else a, out)

            return super()._export_impl(dataclasses.replace(job, fn=wrong))
        return super()._export_impl(job)


class ExportFailingXla(XlaBackend):
    name = "xla_export_fails"

    def _export_impl(self, job):
        raise RuntimeError("this converter does not support the op 'reduce_precision'")


class ExportCrashingXla(XlaBackend):
    """Its export aborts the worker process (SIGABRT), as a converter's native code crashing would."""

    name = "xla_export_crashes"

    def _export_impl(self, job):
        os.abort()


def double_the_targets_weights() -> None:
    """Double in place the weights a test model's module closes over (`W` beside its `target` factory: the
    MODEL of tests/run/test_worker_pool.py and tests/compare/test_ahead.py), as a converter that folds or rescales
    constants in place would."""
    for module in list(sys.modules.values()):
        weights = getattr(module, "W", None)
        if isinstance(weights, np.ndarray) and callable(getattr(module, "target", None)):
            weights *= 2


class TargetMutatingXla(XlaBackend):
    """Exports as XLA does, then changes the process's target in place (`double_the_targets_weights`): the
    artifact is right, the target left in the process is not the one built. Not in ALL."""

    name = "xla_mutates_target"

    def _export_impl(self, job):
        result = super()._export_impl(job)
        double_the_targets_weights()
        return result


def autograph_then_abort() -> None:
    """Have TensorFlow's autograph write its module into $TMPDIR, as a SavedModel or LiteRT export does, then
    abort (SIGABRT) as a converter's native code does: no cleanup of the process's own runs. The module's path
    goes to $MULTIEXPORT_TEST_EVIDENCE, so a test knows the file was written and where."""
    import tensorflow as tf

    def step(x):
        if x > 0:  # Python control flow on a tensor: autograph converts `step` and writes its module to $TMPDIR
            x = x + 1
        return x

    tf.function(step)(tf.constant(1.0))
    written = [m.__file__ for n, m in sys.modules.items() if n.startswith("__autograph_generated_file")]
    with open(os.environ["MULTIEXPORT_TEST_EVIDENCE"], "a") as f:
        f.writelines(f"{path}\n" for path in written)
    os.abort()


class AutographExportCrashingXla(XlaBackend):
    """Its export runs TensorFlow's autograph, then aborts the worker."""

    name = "xla_autograph_export_crashes"

    def _export_impl(self, job):
        autograph_then_abort()


class AutographRunCrashingXla(_Faulty):
    """Its runtime runs TensorFlow's autograph, then aborts the worker, when handed inputs."""

    name = "xla_autograph_run_crashes"
    fault = "autograph"


ALL = {cls.name: f"tests.fault_backends:{cls.__name__}"
       for cls in (PerturbedXla, CrashingXla, HangingXla, RaisingXla, OomXla, KilledXla, SleepyXla, DiesWhileTimedXla,
                    ExportFailingXla, ExportCrashingXla, AutographExportCrashingXla, AutographRunCrashingXla,
                    StaticOnlyXla, StaticSmallOnlyXla, StaticOnlyPerturbedXla, SymbolicWrongXla)}


class MissingOnnx(OnnxBackend):
    """The ONNX backend on a machine without its converter: a module it requires is not installed (for real:
    nothing provides it). Not in ALL: registered only by the tests that use it."""

    name = "onnx_missing"
    requires = ("multiexport_test_module_nothing_provides",)


class TargetMutatingOnnx(OnnxBackend):
    """ONNX (which needs the built target: its jax2onnx route) changing the process's target in place after its
    export (`double_the_targets_weights`). Not in ALL: registered only by the tests that use it."""

    name = "onnx_mutates_target"

    def _export_impl(self, job):
        result = super()._export_impl(job)
        double_the_targets_weights()
        return result
