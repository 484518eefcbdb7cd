"""XLA's locate hook on a module with a symbolic batch: the shipped module is refined to the trial's sizes, as JAX
refines one before compiling it (`refine_module`), then instrumented and re-compiled, so every op is mapped; a
fault planted in the symbolic module is located at its op."""

from __future__ import annotations

import shutil

import pytest

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.leaves import load_target
from multiexport.locate import LocateConfig, locate
from tests.locate import plant

pytestmark = pytest.mark.slow  # one export, two locates of a small MLP: ~20 s


def test_a_symbolic_module_is_refined_to_the_trial_and_a_changed_op_located(tmp_path):
    target = load_target("multiexport.examples:mlp_dynamic")
    clean = locate(target, LocateConfig(backends=("xla",), out_dir=tmp_path / "clean", trial="random0 b=5"),
                   say=lambda line: None).backends[0]
    assert not clean.error and clean.mapped == clean.total > 0 and clean.first is None
    assert "refined to this feed's sizes" in clean.how
    artifact = tmp_path / "planted"
    shutil.copytree(clean.artifact, artifact)
    plant.xla_module(artifact, lambda text: text.replace("stablehlo.maximum", "stablehlo.minimum", 1))
    answer = locate(target, LocateConfig(backends=("xla",), out_dir=tmp_path / "out", trial="random0 b=5",
                                         artifacts={"xla": artifact}), say=lambda line: None).backends[0]
    culprit = answer.culprit
    assert answer.failing and culprit is not None and culprit.site.op == "stablehlo.maximum"
    assert culprit.site.shape[0] == 5 and "stablehlo.minimum" in culprit.error.note
    assert culprit.replay is not None and culprit.replay.verdict == "op-differs"
