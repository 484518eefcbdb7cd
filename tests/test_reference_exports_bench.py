"""benchmarks/reference_exports.py: two reference workers, one that exported first, timed side by side."""

from __future__ import annotations

import re


def test_the_benchmark_times_an_exported_and_a_plain_reference_worker_in_alternating_rounds(capsys):
    from benchmarks.reference_exports import main

    assert main(["--model", "eqx_mlp", "--exports", "xla", "--rounds", "4", "--slice", "0.02"]) == 0
    said = capsys.readouterr().out
    assert "exported before its load: ['xla']" in said and "exported before its load: []" in said, said
    ratio = re.search(r"over 4 rounds: ([0-9.]+) \(quartiles", said)
    assert ratio is not None and float(ratio.group(1)) > 0, said
