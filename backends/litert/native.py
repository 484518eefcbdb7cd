"""LiteRT's native consumer: `lite_run` (csrc/lite_run.c) on LiteRT's C API, how it is built, and the section it
reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from multiexport.sdk import NativeBuildError, NativeConsumer, Recipe, bound_section, package_dir, ports

CONSUMER = "litert_c_api"  # the section's consumer id (manifest.schema.json)
LITERT_SIGNATURE = "serving_default"  # the signature this backend converts and binds by (its SIGNATURE_KEY)
SOURCES = Path(__file__).resolve().parent / "csrc"  # package data: a wheel carries them
LITERT_CHECKED = ("2.3",)  # ai-edge-litert releases csrc/litert_api.h was checked against (major.minor)


def find_litert() -> Path:
    """libLiteRt.so of the ai-edge-litert wheel (its LiteRt* C API; the wheel ships no headers: the program
    declares what it calls in csrc/litert_api.h)."""
    litert = package_dir("ai_edge_litert")
    if litert is None:
        raise NativeBuildError("no ai_edge_litert: the LiteRT C API consumer links the ai-edge-litert wheel's "
                               "libLiteRt.so; pip install 'multiexport[litert]'")
    if not (litert / "libLiteRt.so").is_file():
        raise NativeBuildError(f"ai_edge_litert at {litert} | no libLiteRt.so: this wheel lacks the C API library")
    # litert_api.h is our declaration of a C API whose signatures have changed between releases, and no library
    # call reports its version: a release it was not checked against is unavailable, never called on a guess.
    import importlib.metadata

    try:
        version = importlib.metadata.version("ai-edge-litert")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if not version.startswith(tuple(f"{v}." for v in LITERT_CHECKED)):
        raise NativeBuildError(f"ai-edge-litert {version} | lite_run's declarations (csrc/litert_api.h) are checked "
                               f"against {', '.join(f'{v}.x' for v in LITERT_CHECKED)}, expected one of those: "
                               "its C API's signatures change between releases")
    return litert / "libLiteRt.so"


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
    load_loop: bool = True  # lite_run --load-lanes: the scenarios of `multiexport load` in C (common/mx_load.h)

    def recipe(self) -> Recipe:
        """C11 (litert_api.h checks LiteRT's documented struct sizes with _Static_assert) linked with the wheel's
        `libLiteRt.so`, with an rpath to the wheel, and -pthread for the load loop's lanes."""
        lib = find_litert()
        return Recipe("c", SOURCES / "lite_run.c", ("-std=c11", f"-L{lib.parent}", "-l:libLiteRt.so",
                                                     f"-Wl,-rpath,{lib.parent}", "-pthread"),  # pthread: the load loop
                      (SOURCES / "litert_api.h", lib))

    def expected(self, manifest: Any, native: Mapping[str, Any]) -> dict[str, Any]:
        return litert_section(manifest.inputs, ports(manifest.inputs), manifest.outputs, ports(manifest.outputs),
                              model=manifest.files.get("model", ""))
