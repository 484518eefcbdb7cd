"""A model that calls a Pallas kernel (a TPU-only custom call, as fused attention kernels are): each format that
cannot run it on the CPU is one `tpu-only` row saying what the call is and where it runs, never the converter's or
JAX's own words ("Only interpret mode is supported on CPU backend", "No plugins registered for primitive
'pallas_call'"); the XLA artifact lowered for the TPU keeps the call (tpu_custom_call), made on this CPU machine."""

from __future__ import annotations

import pytest

from multiexport import Target, api
from multiexport.errors import ExportError
from multiexport.exporting.registry import get_backend

TPU_ONLY = ("tpu-only: the function calls a Pallas kernel (jax.experimental.pallas.pallas_call), a custom call that "
            "runs on the TPU (tpu_custom_call, a Mosaic kernel) or a GPU only, not in ")


def pallas_target() -> Target:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + 2.0 * y_ref[...]

    def fn(x, y):
        z = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
        return {"out": jnp.tanh(z)}

    ones = jnp.ones((8, 128), jnp.float32)
    return Target(fn, args=(ones, ones), name="pallas_add")


@pytest.mark.parametrize("backend", ["xla", "savedmodel", "onnx", "iree", "litert", "openvino"])
def test_each_cpu_format_is_a_tpu_only_row_naming_the_pallas_call(backend, tmp_path):
    if not get_backend(backend).available().ok:
        pytest.skip(f"{backend} is not installed here")
    with pytest.raises(ExportError) as info:
        api.export(pallas_target(), tmp_path / backend, backend)
    text = str(info.value)
    assert TPU_ONLY in text and "export --backend xla --platforms tpu" in text, text
    assert "interpret mode" not in text and "No plugins registered" not in text, text  # not the converter's words
    assert info.value.category == "unsupported-platform" and len(text.splitlines()) == 1
    assert not (tmp_path / backend).exists()


def test_the_xla_artifact_lowered_for_the_tpu_keeps_the_kernel(tmp_path):
    artifact = api.export(pallas_target(), tmp_path / "xla", "xla", platforms=["tpu"])
    assert artifact.manifest.supports["platforms"] == ["tpu"]
    assert "tpu_custom_call" in (tmp_path / "xla" / "model.mlir").read_text()
    assert "tpu_custom_call" in (tmp_path / "xla" / "model.hlo.txt").read_text()  # lowered for the TPU, not the CPU
