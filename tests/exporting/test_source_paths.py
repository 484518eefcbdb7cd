"""Shipped artifacts carry no absolute source path of the exporting machine: the StableHLO locations name each
file relative to the import root it was found under (`model.py`), so `locate` can still resolve them."""

from __future__ import annotations

import textwrap

import pytest

from multiexport import api
from multiexport.exporting.registry import get_backend
from multiexport.exporting.stablehlo import source_root_pattern
from multiexport.leaves.target import load_target

MODEL = textwrap.dedent("""
    import numpy as np
    import jax.numpy as jnp
    from multiexport import Target

    def scaled_tanh(x):
        return jnp.tanh(x * 2.0).sum(axis=-1)

    model = Target(scaled_tanh, args=(np.ones((2, 3), np.float32),), name="scaled_tanh")
""")


# The formats whose files keep StableHLO locations; ONNX, LiteRT and OpenVINO files carry none (checked: no leak).
KEEPS_LOCATIONS = {"xla", "savedmodel", "iree"}


@pytest.mark.parametrize("backend", ["xla", "savedmodel", "iree", "onnx", "litert", "openvino"])
def test_an_artifact_names_the_users_file_without_its_directory(tmp_path, backend):
    if not get_backend(backend).available().ok:
        pytest.skip(f"the {backend} backend is not installed")
    home = tmp_path / "private-home" / "project"
    home.mkdir(parents=True)
    (home / "model.py").write_text(MODEL)
    target = load_target(f"{home / 'model.py'}:model")
    out = tmp_path / "artifact"
    api.export(target, out, backend, check_load=False)
    leaked, named = [], False
    for path in (p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if str(home).encode() in data or str(tmp_path).encode() in data:
            leaked.append(str(path.relative_to(out)))
        named = named or b"model.py" in data
    assert not leaked, f"absolute source paths in {leaked}"
    assert named or backend not in KEEPS_LOCATIONS, "no file names the user's model.py: the locations were dropped, not made relative"


def test_the_pattern_strips_the_longest_root_and_leaves_relative_names():
    import re

    pattern = source_root_pattern(["/srv/app", "/srv/app/vendor/lib"])
    assert re.sub(pattern, "", "/srv/app/vendor/lib/flax/linear.py") == "flax/linear.py"
    assert re.sub(pattern, "", "/srv/app/model.py") == "model.py"
    assert re.sub(pattern, "", "/elsewhere/deep/model.py") == "model.py"
    assert re.sub(pattern, "", "model.py") == "model.py"
    assert re.sub(pattern, "", "<frozen runpy>") == "<frozen runpy>"
