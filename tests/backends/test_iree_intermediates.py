"""IREE's locate hook on an artifact with lifted weights (model.mlir: the StableHLO `main` renamed and called from
a `main` that loads each weight from an IREE parameter in weights.safetensors): the StableHLO part is
instrumented, re-compiled with the artifact's flags and run with the shipped parameter file's values as
arguments, so every op is mapped, and a weight changed in the shipped parameter file is located at its op."""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiexport.exporting  # noqa: F401  (installs the export driver)
from multiexport.examples import flax_models
from multiexport.examples.flax_models import CNN
from multiexport.exporting import export_artifact
from multiexport.exporting.manifest import Manifest
from multiexport.exporting.options import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.files.safetensors import iter_safetensors, write_safetensors
from multiexport.leaves import Target, build_signature
from multiexport.locate import LocateConfig, locate
from tests.locate import plant

pytestmark = pytest.mark.slow  # one IREE export, two locates (each one iree-compile): ~60 s


def baked_cnn() -> Target:
    """The example CNN with its weights closed over (baked: lifted out with --external-weights always)."""
    model = CNN()
    image = jax.random.normal(jax.random.key(3), (2, 16, 16, 3), jnp.float32)
    params = model.init(jax.random.key(0), image)["params"]
    return Target(lambda image: {"logits": model.apply({"params": params}, image)}, args=(image,), name="cnn_baked")


def test_lifted_weights_are_mapped_and_a_changed_weight_located(tmp_path):
    target = baked_cnn()
    shipped = tmp_path / "shipped"
    export_artifact(get_backend("iree"), target.fn, build_signature(target), shipped,
                    ExportOptions(keep_unused=True, external_weights="always"))
    clean = locate(target, LocateConfig(backends=("iree",), out_dir=tmp_path / "clean", artifacts={"iree": shipped}),
                   say=lambda line: None).backends[0]
    assert not clean.error and clean.first is None
    assert clean.mapped == clean.total > 0 and "lifted weights passed as arguments" in clean.how
    artifact = tmp_path / "planted"
    shutil.copytree(clean.artifact, artifact)
    manifest = Manifest.read(artifact)
    assert "stablehlo_text" in manifest.files and "weights" in manifest.files
    path = manifest.path(artifact, "weights")
    tensors = {name: np.array(a) for name, a in iter_safetensors(path)}
    kernel = next(n for n in tensors if n.endswith("Conv_1.kernel") or ("Conv_1" in n and tensors[n].ndim == 4))
    tensors[kernel] = np.ascontiguousarray(np.swapaxes(tensors[kernel], 0, 1))  # a transposed weight
    write_safetensors(path, tensors)
    plant.reseal(artifact)
    answer = locate(target, LocateConfig(backends=("iree",), out_dir=tmp_path / "out", artifacts={"iree": artifact}),
                    say=lambda line: None).backends[0]
    culprit = answer.culprit
    assert answer.failing and culprit is not None and culprit.site.op == "stablehlo.convolution"
    assert culprit.site.location.endswith(plant.source_line(flax_models.cnn, "nn.Conv(16"))
    assert culprit.replay is not None and culprit.replay.verdict == "op-differs"
