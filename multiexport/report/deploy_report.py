"""The report's deployment section, from a results.json alone: the targets `compare --deploy` asked for (recorded
in the results' config), or every target beside the single verdict when none was; the terminal's lines; what the
browser's row says about WebGPU. The verdicts themselves are `report.deploy`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..results import Results, Status
from .deploy import ALIASES, TARGETS, TargetVerdict, deploy_verdicts, first_batch, verdict_rows


def consumer_backends(names: Sequence[str]) -> list[str]:
    """The backends the targets `names` need in a compare (each once, in target order); unknown names are
    left to the compare's own check, which says them in one line."""
    out: list[str] = []
    for name in names:
        key = ALIASES.get(name, name)
        for c in TARGETS[key].consumers if key in TARGETS else ():
            if c.backend not in out:
                out.append(c.backend)
    return out


@dataclass(frozen=True)
class DeploySection:
    """What the report says about deployment targets.

    asked: the targets `compare --deploy` named (empty: none; the table then covers every target).
    verdicts: one per target shown. notes: lines under the table (the browser's WebGPU, what "today" means).
    """

    asked: tuple[str, ...]
    verdicts: list[TargetVerdict]
    notes: list[str]

    @property
    def sentences(self) -> list[str]:
        return [v.sentence for v in self.verdicts]

    @property
    def rows(self) -> list[list[str]]:
        return verdict_rows(self.verdicts)

    @property
    def title(self) -> str:
        return ("Verdict per deployment target (compare --deploy)" if self.asked else
                "Per deployment target, beside the single verdict")


DEPLOY_NOTE = ("Each target is judged only on the consumers that exist there, each on its own latency: the native "
               "C consumer's (compare --native) for a C++ server, a TF Serving fleet and a phone, the Python runner's "
               "for a Python server, the page's own clock for the browser. 'today's single verdict' is the fastest "
               "faithful Python runner, which the headline ranks. A lead's interval is paired when both were timed in "
               "the same interleaved rounds, else from the two medians' own intervals; one that includes 1 is a tie.")


def deploy_section(results: Results) -> DeploySection | None:
    """The report's deployment section: the targets `compare --deploy` asked for (recorded in the results'
    config), or every target when none was asked; None when nothing was timed and nothing was asked (no table
    would say anything)."""
    raw = (results.config or {}).get("deploy") or ()
    asked = tuple(str(n) for n in raw) if isinstance(raw, (list, tuple)) else ()  # a hand-edited file: ignored
    asked = tuple(n for n in asked if ALIASES.get(n, n) in TARGETS)  # a target this release does not know: left out
    if not asked and first_batch(results) is None:
        return None
    verdicts = deploy_verdicts(results, list(asked) or None)
    notes = [line for line in (_webgpu_line(results),) if line] if any(
        v.target.name == "browser" for v in verdicts) else []
    return DeploySection(asked, verdicts, notes)


def _webgpu_line(results: Results) -> str:
    """The browser's WebGPU, as the onnx-web row found it: which execution provider its figure is, and whether
    headless Chromium here offered a WebGPU adapter (the runner's probe), and if not why."""
    row = results.backends.get("onnx-web")
    facts = row.bench.runner if row is not None and row.bench else {}
    ep = facts.get("execution_provider")
    probe = facts.get("webgpu")
    if not ep and not isinstance(probe, dict):
        return ""
    text = f"browser: the onnx-web figure is onnxruntime-web's {ep or 'wasm'} execution provider"
    if isinstance(probe, dict):
        if probe.get("ok"):
            text += f"; WebGPU is offered here by {probe.get('reason')}"
            software = "swiftshader" in str(probe.get("reason", "")).lower()
            text += (" (a software adapter on the CPU: its figures are not a GPU's)" if software else "") + \
                ("" if ep == "webgpu" else "; time it with --backend-option onnx-web.execution_provider=webgpu")
        else:
            text += f"; no WebGPU row: {probe.get('reason')}"
    return text + "."


def deploy_lines(results: Results) -> list[str]:
    """The terminal's lines: each asked target's verdict sentence (nothing when `--deploy` was not given: the
    report files carry the table of every target)."""
    section = deploy_section(results)
    if section is None:
        return []
    if section.asked:
        return [f"deploy: {s}" for s in section.sentences] + [f"deploy: {n}" for n in section.notes]
    lines = []
    for v in section.verdicts:
        if v.pick is None and all(c.status is Status.NOT_RUN for c in v.candidates):
            lines.append(f"deploy {v.target.name}: not judged, none of its consumers ran (compare --deploy "
                         f"{v.target.name} runs what it needs)")
        else:
            lines.append(f"deploy {v.target.name}: {v.sentence}" + (" (differs from the single verdict)" if v.differs
                                                                    else ""))
    return lines + [f"deploy: {n}" for n in section.notes]
