"""The compare's timeline: steps in order, each lasting until the next began, the last until now."""

from __future__ import annotations

import time

from multiexport.measure.timeline import Timeline
from multiexport.report.tables import timeline_rows
from multiexport.results import Reference, Results, SignatureData, Step


def test_each_step_lasts_until_the_next_began():
    clock = Timeline(start=time.perf_counter() - 5.0)  # the caller started the clock 5 s ago
    clock.mark("build")
    time.sleep(0.02)
    clock.mark("export")
    steps = clock.steps()
    assert [s.what for s in steps] == ["build", "export"]
    assert steps[0].at_s >= 5.0 and steps[0].seconds >= 0.02
    assert abs(steps[1].at_s - steps[0].at_s - steps[0].seconds) < 2e-3


def test_the_report_lists_the_longest_steps_first_with_their_share():
    steps = [Step(0.0, "build", 1.0), Step(1.0, "export", 6.0), Step(7.0, "rounds", 3.0)]
    results = Results(target="t", signature=SignatureData(name="t", inputs=[], outputs=[]), trials=[], backends={},
                      reference=Reference(), environment={},
                      out_dir="x", timeline=steps)
    rows = timeline_rows(results)
    assert [r[0] for r in rows[:3]] == ["export", "rounds", "build"]
    assert rows[0][3] == "60%" and rows[-1][2] == "10.0"
    assert Results.from_json(results.to_json()).timeline == steps  # results.json keeps it
