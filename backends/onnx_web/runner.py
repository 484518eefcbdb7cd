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

from typing import Any, ClassVar

import numpy as np

from multiexport.sdk import ResidentFeedRunner, RunError

from .page import JS_TYPES, PageSession


class OnnxWebRunner(ResidentFeedRunner):
    """Runs model.onnx through onnxruntime-web's wasm (or WebGPU) execution provider in headless Chromium.

    A runner dropped without close (an export's load check) ends its browser at exit (browser.driver), not from a
    finalizer: a collection inside a Playwright call would re-enter its dispatcher.
    """

    runtime: ClassVar[str] = "onnxruntime-web"
    dtypes: ClassVar[tuple[str, ...]] = tuple(JS_TYPES)
    place: ClassVar[str] = "the page"
    threads_key = "wasm_threads"

    def __init__(self, manifest, directory, options, session: PageSession, facts: dict[str, Any]):
        super().__init__(manifest, directory, options, session, facts)
        self.page = session
        self.calling_path = (f"onnxruntime-web {facts.get('runtime_version')} InferenceSession.run ({session.ep} EP) in "
                             "headless Chromium, feeds resident in the page as ort.Tensors, outputs left in the page; "
                             "driven from Python by Playwright (one DevTools round trip per call)")

    def error(self, exc: Exception, what: str) -> RunError:
        return page_error(exc, self.directory, what)

    def time_in_page(self, prepared, warmup: int, min_calls: int, max_calls: int, seconds: float) -> np.ndarray:
        """Nanoseconds per session.run, timed back to back inside the page (performance.now): the runtime's
        own cost, with the harness's warm-up and stopping rule (at least min_calls, until `seconds`)."""
        return self.time_own_calls(prepared, warmup, min_calls, max_calls, seconds)

    def _describe_impl(self) -> dict[str, Any]:
        page = self.page.page_ms() if not getattr(self, "_closed", False) else []
        return {**self.facts, "execution_provider": self.page.ep,
                "wasm_threads": self.page.info.get("threads"),
                "cross_origin_isolated": self.page.info.get("crossOriginIsolated"),
                "page_ms_p50": float(np.median(page)) if page else None,
                "round_trip_ms_p50": self.round_trip_ms_p50(),
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
