"""The onnx-web runner: an onnxruntime-web session in headless Chromium, fed and fetched by leaf name.

What is timed. `run_prepared` is one session.run on inputs already resident in the page, its outputs left
there, driven from Python through Playwright: the compare's harness times that round trip, which adds the
DevTools protocol's cost (about 1.5 ms here) to the runtime's. The page also times every one of those calls
with performance.now() around `await session.run(...)` (5 us resolution: the page is cross-origin isolated),
and `time_in_page` times calls back to back inside the page with the harness's own warm-up and stopping rule.
The page-side figure is the runtime's cost, what a web page calling ORT pays; the round trip is the test
rig's, which no deployed page pays. Both are recorded (`describe`): `page_ms_p50` and `round_trip_ms_p50`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from multiexport.sdk import RunError, Runner, leaf_message

from .page import JS_TYPES, PageSession


@dataclass
class Prepared:
    """A feed resident in the page: its id there (`PageSession.feed`)."""

    feed_id: int


class OnnxWebRunner(Runner):
    """Runs model.onnx through onnxruntime-web's wasm (or WebGPU) execution provider in headless Chromium."""

    threads_key = "wasm_threads"

    def __init__(self, manifest, directory, options, session: PageSession, facts: dict[str, Any]):
        super().__init__(manifest, directory, options)
        self.session = session
        self.facts = facts
        # A runner dropped without close (an export's load check) ends its browser at exit (browser.driver),
        # not from a finalizer: a collection inside a Playwright call would re-enter its dispatcher.
        self.round_trip_ns: list[int] = []
        self.calling_path = (f"onnxruntime-web {facts.get('runtime_version')} InferenceSession.run ({session.ep} EP) in "
                             "headless Chromium, feeds resident in the page as ort.Tensors, outputs left in the page; "
                             "driven from Python by Playwright (one DevTools round trip per call)")

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Prepared:
        tensors = []
        for leaf, a in zip(self.manifest.inputs, arrays):
            if leaf.param is None:
                continue
            if a.dtype.name not in JS_TYPES:
                raise RunError(leaf_message("Input", leaf.name, a.dtype.name, "a dtype onnxruntime-web has a tensor "
                               f"type for ({', '.join(JS_TYPES)})"), backend="onnx-web", category="unsupported-dtype")
            tensors.append((str(leaf.param), a))
        try:
            return Prepared(self.session.feed(tensors))
        except Exception as exc:
            raise page_error(exc, self.directory, "moving the inputs into the page") from exc

    def _run_impl(self, prepared: Prepared) -> None:
        import time

        t0 = time.perf_counter_ns()
        try:
            self.session.run(prepared.feed_id)
        except Exception as exc:
            raise page_error(exc, self.directory, "session.run") from exc
        self.round_trip_ns.append(time.perf_counter_ns() - t0)

    def _fetch_impl(self, prepared: Prepared) -> Sequence[Any]:
        try:
            outputs = dict(self.session.fetch(prepared.feed_id))
        except Exception as exc:
            raise page_error(exc, self.directory, "session.run") from exc
        return [outputs[str(leaf.param)] for leaf in self.manifest.outputs]

    def time_in_page(self, prepared: Prepared, warmup: int, min_calls: int, max_calls: int,
                     seconds: float) -> np.ndarray:
        """Nanoseconds per session.run, timed back to back inside the page (performance.now): the runtime's
        own cost, with the harness's warm-up and stopping rule (at least min_calls, until `seconds`)."""
        self._check_open()
        try:
            return self.session.timed(prepared.feed_id, warmup, min_calls, max_calls, seconds)
        except Exception as exc:
            raise page_error(exc, self.directory, "timing session.run in the page") from exc

    def _close_impl(self) -> None:
        self.session.close()

    def time_own_calls(self, prepared: Prepared, warmup: int, min_calls: int, max_calls: int,
                       seconds: float) -> np.ndarray:
        """The harness's timing hook: the calls timed inside the page (the runtime's cost), not the round trip."""
        return self.time_in_page(prepared, warmup, min_calls, max_calls, seconds)

    def _describe_impl(self) -> dict[str, Any]:
        page = self.session.page_ms() if not getattr(self, "_closed", False) else []
        trips = np.asarray(self.round_trip_ns, dtype=np.float64) / 1e6
        return {**self.facts, "execution_provider": self.session.ep,
                "wasm_threads": self.session.info.get("threads"),
                "cross_origin_isolated": self.session.info.get("crossOriginIsolated"),
                "page_ms_p50": float(np.median(page)) if page else None,
                "round_trip_ms_p50": float(np.median(trips)) if trips.size else None,
                "calls_timed_both_ways": len(page),
                "webgpu": self.manifest.format.get("webgpu"),
                "timed_in_page": True,
                "timing": "the row's latency is session.run timed inside the page by performance.now() (the "
                          "runtime's own cost, what a deployed page pays); round_trip_ms_p50 is the test rig's "
                          "Python -> DevTools -> page -> Python time of the calls it drove one by one"}


# What the page says when wasm memory runs out (Emscripten's abort, the engine's allocation failure, ORT's own
# std::bad_alloc: measured with a 3 GiB tensor feeding a second one), or when a tensor's byte count passes the
# 32-bit size_t of wasm32 (ORT's SafeInt overflow: measured with a 5 GiB and a 4 GiB - 64 B tensor).
OUT_OF_WASM_MEMORY = ("Aborted(OOM)", "Out of memory", "out of memory", "Array buffer allocation failed",
                      "WebAssembly.Memory", "could not allocate memory", "std::bad_alloc", "SafeIntOnOverflow")


def page_error(exc: Exception, directory, what: str) -> RunError:
    """The page's failure as one typed line: out of wasm memory (size-limit), a node it cannot run, or a run failure."""
    text = " ".join(str(exc).split())
    text = text.split("Call log:")[0].strip()[:600]
    if any(s in text for s in OUT_OF_WASM_MEMORY):
        return RunError(f"Artifact '{directory}' | onnxruntime-web ran out of wasm memory during {what} (a 32-bit "
                        f"wasm heap has at most 4 GiB for the model, its copy and the activations, and no tensor "
                        f"can pass 4 GiB): {text}",
                        backend="onnx-web", category="size-limit")
    return RunError(f"Artifact '{directory}' | onnxruntime-web failed during {what}: {text}", backend="onnx-web",
                    category="run-failed")
