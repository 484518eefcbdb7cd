"""The runner half of the contract: what runs one loaded artifact on named inputs.

A backend's `_load_impl` returns a subclass; `Runner` does the checks every format shares (the feed against the
manifest, the outputs' count and dtypes, refusing calls once closed) and leaves the runtime's calls to `_impl`s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import numpy as np

from ..errors import RunError, leaf_message
from .feed import check_feed
from .options import RunOptions

if TYPE_CHECKING:
    from .manifest import Manifest


class Runner:
    """Runs one loaded artifact on named inputs; a backend subclasses the `_impl` methods.

    `prepare` validates a feed against the manifest and moves it into the runtime's own tensors once;
    `run_prepared` is the timed call and is synchronous; `__call__` does both and returns named outputs.
    """

    calling_path: str = ""  # a class default that a runner may override per instance (its fallback path)
    # The key of `_describe_impl()` under which the runtime reports the threads it really uses (by its API,
    # or counted from its pool's thread names); describe() copies it to "threads_reported" for the report.
    threads_key: ClassVar[str | None] = None

    def __init__(self, manifest: "Manifest", directory: Path, options: RunOptions):
        self.manifest = manifest
        self.directory = directory
        self.options = options

    @property
    def device(self) -> str:
        return self.options.device

    def __call__(self, feed: Mapping[str, Any]) -> dict[str, np.ndarray]:
        outputs = self._fetch_impl(self.prepare(feed))
        return self._name_outputs(outputs)

    def prepare(self, feed: Mapping[str, Any]) -> Any:
        self._check_open()
        arrays, _ = check_feed(self.manifest.inputs, feed)
        return self._prepare_impl(arrays)

    def run_prepared(self, prepared: Any) -> None:
        self._run_impl(prepared)

    def time_own_calls(self, prepared: Any, warmup: int, min_calls: int, max_calls: int,
                       seconds: float) -> Any:
        """Nanoseconds per call (an int64 array) timed by the runtime's own clock, for a runner the harness's
        clock would misjudge: one that drives its runtime in another process (onnx-web's page, where a
        Python-side time is mostly the DevTools round trip no deployed page pays). Warm-up and stopping rule
        as the harness's: at least `min_calls`, until `seconds`, at most `max_calls`. None (every in-process
        runner): the harness times `run_prepared` itself."""
        return None

    def close(self) -> None:
        """Release the runtime's handles (session, compiled model, interpreter, device buffers) now rather
        than when the runner is collected; the runner refuses calls afterwards. Closing twice is harmless."""
        if getattr(self, "_closed", False):
            return
        self._close_impl()
        kept = {"manifest", "directory", "options"}
        for name in [n for n in vars(self) if n not in kept]:
            delattr(self, name)  # the runtime objects a backend's runner holds, whatever it named them
        self._closed = True

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if getattr(self, "_closed", False):
            raise RunError(f"Artifact '{self.directory}' | got a call on a closed runner, expected multiexport.load() again")

    def run_with_transfers(self, arrays: list[np.ndarray]) -> None:
        """End to end from host arrays (already checked by `prepare`) to host outputs: inputs copied to
        the device, the call, outputs copied back. What `--include-transfers` times."""
        self._fetch_impl(self._prepare_impl(arrays))

    def compile(self, prepared: Any) -> bool:
        """Compile ahead of the first call for these prepared inputs, if the runtime compiles lazily.

        Returns False when there is nothing to compile separately (the runtime compiled at load).
        """
        return bool(self._compile_impl(prepared))

    def compile_count(self) -> int | None:
        """How many executables the runner has compiled so far, or None when the runtime cannot say."""
        return None

    def describe(self) -> dict[str, Any]:
        """How this runner calls its runtime: calling path, device, threads as the runtime reports them."""
        own = self._describe_impl()
        reported = own.get(self.threads_key) if self.threads_key else None
        return {"calling_path": self.calling_path, "device": self.device, "threads_requested": self.options.thread_count,
                "threads_reported": reported, **own}

    def _name_outputs(self, outputs: Sequence[Any]) -> dict[str, np.ndarray]:
        expected = self.manifest.outputs
        if len(outputs) != len(expected):
            raise RunError(
                f"Artifact '{self.directory}' | got {len(outputs)} outputs, expected {len(expected)} "
                f"({', '.join(o.name for o in expected)})"
            )
        named = {}
        for leaf, value in zip(expected, outputs):
            value = np.asarray(value)
            if value.dtype.name != leaf.dtype:
                raise RunError(leaf_message("Output", leaf.name, value.dtype.name, leaf.dtype), category="unsupported-dtype")
            named[leaf.name] = value
        return named

    # -- to implement -------------------------------------------------------------------------
    def _close_impl(self) -> None:
        """Anything to release explicitly before the runner drops its references (default: nothing)."""

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Any:
        raise NotImplementedError

    def _run_impl(self, prepared: Any) -> None:
        raise NotImplementedError

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        raise NotImplementedError

    def _compile_impl(self, prepared: Any) -> bool:
        return False

    def _describe_impl(self) -> dict[str, Any]:
        return {}
