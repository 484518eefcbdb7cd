"""Loading an artifact for the TPU through the Python API: only the XLA format has a TPU runtime, so any other
format is refused in one line (it would otherwise run on the CPU under a TPU label, or fail deep in its runtime)."""

from __future__ import annotations

import pytest

from multiexport import api, examples
from multiexport.errors import UsageError
from multiexport.exporting.registry import get_backend


@pytest.mark.parametrize("backend", ["onnx", "iree", "savedmodel"])
def test_a_format_without_a_tpu_runtime_is_refused_for_the_tpu(backend, tmp_path):
    if not get_backend(backend).available().ok:
        pytest.skip(f"the {backend} backend is not installed")
    artifact = api.export(examples.seed(), tmp_path / backend, backend, check_load=False)
    with pytest.raises(UsageError) as info:
        api.load(artifact.directory, device="tpu")
    text = str(info.value)
    assert "no TPU runtime" in text and str(artifact.directory) in text and len(text.splitlines()) == 1
