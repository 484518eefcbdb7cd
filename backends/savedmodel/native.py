"""The SavedModel's native consumer: `tf_run` (csrc/tf_run.c) on the TF C API, how it is built, and the section it
reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from multiexport.sdk import (
    NATIVE_SCHEMA,
    NativeBuildError,
    NativeConsumer,
    Recipe,
    leaf_entry,
    package_dir,
    symbolic_names,
)

CONSUMER = "tf_c_api"  # the section's consumer id (manifest.schema.json)
SOURCE = Path(__file__).resolve().parent / "csrc" / "tf_run.c"  # package data: a wheel carries it


def find_tensorflow() -> tuple[Path, Path]:
    """(include dir, library dir) of the tensorflow wheel's C API."""
    tf = package_dir("tensorflow")
    if tf is None:
        raise NativeBuildError("no tensorflow: the TF C API consumer links the tensorflow wheel's "
                               "libtensorflow_cc.so.2; pip install 'multiexport[tf]'")
    for need in (tf / "include" / "tensorflow" / "c" / "c_api.h", tf / "libtensorflow_cc.so.2",
                 tf / "libtensorflow_framework.so.2"):
        if not need.is_file():
            raise NativeBuildError(f"tensorflow at {tf} | no {need.relative_to(tf)}: this wheel lacks the C API")
    return tf / "include", tf


def savedmodel_section(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                       input_tensors: Mapping[str, str], output_tensors: Mapping[str, str], *,
                       signature: str = "serving_default", tag: str = "serve") -> dict[str, Any]:
    """The section of a SavedModel artifact for a TF C API consumer (csrc/tf_run.c).

    params: each input leaf's signature key (None: not declared). input_tensors / output_tensors: key ->
    graph tensor, read back from the SavedModel's own SignatureDef (`serving_default_<key>:0`,
    `StatefulPartitionedCall:<i>` where `<i>` is the key's position among the *sorted* output keys).
    """
    args = []
    for i, (leaf, key) in enumerate(zip(inputs, params, strict=True)):
        if key is not None:
            args.append({**leaf_entry(leaf, i, "input"), "key": key, "tensor": input_tensors[key]})
    results = [{**leaf_entry(leaf, j, "output"), "key": leaf.alias, "tensor": output_tensors[leaf.alias]}
               for j, leaf in enumerate(outputs)]
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMER,
        "export_dir": ".",
        "tags": [tag],
        "signature": signature,
        "args": args,
        "results": results,
        "output_index_rule": "StatefulPartitionedCall:<i>, i = position of the output key in sorted(keys)",
        "symbolic_dims": symbolic_names(inputs),
    }


@dataclass(frozen=True)
class TfConsumer(NativeConsumer):
    """tf_run: the TF C API reads its log level and thread pools from the environment when it loads.
    The section is not recomputed here (its tensor names come from the SavedModel's own SignatureDef): the
    trust gate (`check_untrusted`) checks the graph instead."""

    consumer: str = CONSUMER
    program: str = "tf_run"
    env: tuple[tuple[str, str], ...] = (("TF_CPP_MIN_LOG_LEVEL", "1"),)  # read when the library loads
    threads_flag: bool = False
    load_loop: bool = True  # tf_run --load-lanes: the scenarios of `multiexport load` in C (common/mx_load.h)

    def recipe(self) -> Recipe:
        """C99 linked with the tensorflow wheel's `libtensorflow_cc.so.2` / `libtensorflow_framework.so.2`, with an
        rpath to the wheel so the program runs under `env -i`."""
        include, lib = find_tensorflow()
        return Recipe("c", SOURCE, ("-std=c99", f"-I{include}", f"-L{lib}", "-l:libtensorflow_cc.so.2",
                                    "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{lib}", "-pthread"),
                      (include / "tensorflow" / "c" / "c_api.h", lib / "libtensorflow_cc.so.2"))

    def thread_env(self, threads: int) -> dict[str, str]:
        return {"TF_NUM_INTRAOP_THREADS": str(threads), "TF_NUM_INTEROP_THREADS": "1"}
