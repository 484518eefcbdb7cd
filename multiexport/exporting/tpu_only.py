"""A function that calls a Pallas kernel, named as such when a format cannot take it.

`jax.experimental.pallas.pallas_call` (how fused attention and other hand-written kernels are called) lowers to a
custom call only the TPU (`tpu_custom_call`, a Mosaic kernel) or a GPU (Triton / Mosaic GPU) runs; on the CPU it
lowers only with interpret=True. Each converter then fails in its own words: "Only interpret mode is supported on
CPU backend" from JAX's CPU lowering (XLA and IREE for the CPU, the SavedModel's jax2tf), "No plugins registered for
primitive 'pallas_call'" from jax2onnx, and the formats built on those inherit the failure. `tpu_only` turns any of
them into one reason a user can act on: what the call is, where it can run, and what to do.
"""

from __future__ import annotations

# What the failure says, where it says it: the messages and the module JAX's Pallas lowering raises from.
_SIGNS = ("only interpret mode is supported on cpu backend", "primitive 'pallas_call'", "pallas_call")
_MODULE = "jax/_src/pallas/"
CATEGORY = "unsupported-platform"


def _chain(exc: BaseException):
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _from_pallas(exc: BaseException) -> bool:
    for link in _chain(exc):
        text = " ".join(str(link).split()).lower()
        if any(sign in text for sign in _SIGNS):
            return True
        tb = link.__traceback__
        while tb is not None:
            if _MODULE in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
                return True
            tb = tb.tb_next
    return False


def tpu_only(exc: BaseException, fmt: str) -> tuple[str, str] | None:
    """(category, reason) when `exc` comes from a Pallas kernel the format `fmt` cannot lower, else None."""
    if not _from_pallas(exc):
        return None
    return (CATEGORY, f"tpu-only: the function calls a Pallas kernel (jax.experimental.pallas.pallas_call), a custom "
                      f"call that runs on the TPU (tpu_custom_call, a Mosaic kernel) or a GPU only, not in {fmt}; the "
                      "XLA artifact lowered for the TPU keeps it (export --backend xla --platforms tpu), or give the "
                      "CPU formats the kernel's math in plain JAX")
