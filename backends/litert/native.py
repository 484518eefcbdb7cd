"""LiteRT's native consumer: `lite_run` (csrc/lite_run.c) on LiteRT's C API, and the section it reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from multiexport.exporting.native_consumer import NativeConsumer
from multiexport.exporting.native_section import bound_section, ports

CONSUMER = "litert_c_api"  # the section's consumer id (manifest.schema.json)
LITERT_SIGNATURE = "serving_default"  # the signature this backend converts and binds by (its SIGNATURE_KEY)


def litert_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                   output_params: Sequence[str | None], *, model: str) -> dict[str, Any]:
    """The section of a LiteRT artifact for a LiteRT C API consumer (csrc/lite_run.c).

    params / output_params: each leaf's name in the model's `serving_default` signature (its alias; None: an
    input the SavedModel stage dropped, which the signature does not declare). The consumer binds by these
    names, never by tensor position, and runs on the CPU accelerator (XNNPACK) with the caller's threads.
    """
    return bound_section(CONSUMER, inputs, params, outputs, output_params, "key", model=model,
                         signature=LITERT_SIGNATURE, accelerator="cpu")


@dataclass(frozen=True)
class LiteConsumer(NativeConsumer):
    """lite_run: the section is recomputed from the manifest's model, signature names and leaves (the tamper
    check); the program takes `--threads`."""

    consumer: str = CONSUMER
    program: str = "lite_run"
    mismatch: str = "model, signature names and leaves give: refusing to run a binding the export did not write"

    def expected(self, manifest: Any, native: Mapping[str, Any]) -> dict[str, Any]:
        return litert_section(manifest.inputs, ports(manifest.inputs), manifest.outputs, ports(manifest.outputs),
                              model=manifest.files.get("model", ""))
