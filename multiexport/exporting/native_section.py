"""The manifest's `"native"` section: everything a compiled, Python-free consumer reads to run an artifact.

Pure functions of what a backend has at export time (the `jax.export.Exported`, the module's real
argument list from `export.stablehlo.module_interface`, the signature's leaves, the SavedModel's tensor
names). A backend stores the result in `FormatResult.native`; the core writes the example inputs the
section names into `inputs/`, so the printed native command runs in the artifact directory as is.
`csrc/README.md` specifies every field; `check_section` validates one read back from disk.

File names never come from leaf names: input leaf `i` of the manifest is `inputs/input{i}.npy` and
output leaf `j` is `outputs/output{j}.npy`, for every consumer, whatever the module's positions are.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from ..dtypes import is_extension, parse_dtype
from ..errors import ArtifactError, BackendUnavailable, UsageError
from ..files import inside
from .registry import get_backend, names

if TYPE_CHECKING:
    from .native_consumer import NativeConsumer

NATIVE_SCHEMA = "multiexport.native/1"
COMPILE_OPTIONS_FILE = "compile_options.pb"
STATIC_DIR = "static"
INPUT_DIR, OUTPUT_DIR = "inputs", "outputs"  # relative to the directory the consumer runs in
MAX_STATIC_MODULES = 32  # the product of --static-sizes; each refined module is a full copy of embedded weights

MLIR_DTYPES = {
    "f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16", "i1": "bool",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2",
}


def input_file(index: int) -> str:
    """The .npy file (in the consumer's inputs directory) of the manifest's input leaf `index`."""
    return f"input{index}.npy"


def output_file(index: int) -> str:
    """The .npy file (in the consumer's outputs directory) of the manifest's output leaf `index`."""
    return f"output{index}.npy"


class _Consumers(Mapping[str, str]):
    """Backend name -> its native section's consumer id, for every registered backend with a native consumer
    (`Backend.native_consumer`): read from the registry at each use, so a backend registered later is in it."""

    def _table(self) -> dict[str, str]:

        return {name: found.consumer for name in names() if (found := consumer_for(name)) is not None}

    def __getitem__(self, name: str) -> str:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return repr(self._table())


CONSUMERS: Mapping[str, str] = _Consumers()


def consumer_for(backend: str) -> "NativeConsumer | None":
    """The `native_consumer.NativeConsumer` of backend `backend`, or None when it has none (or is not registered)."""

    try:
        return get_backend(backend).native_consumer()
    except BackendUnavailable:
        return None


def ports(leaves: Sequence[Any]) -> list[str | None]:
    """Each leaf's `param` as the name its port, value or signature key has in the model (None: not taken)."""
    return [None if leaf.param is None else str(leaf.param) for leaf in leaves]


class NoNativeSection(Exception):
    """The format's native consumer cannot take this artifact: the export writes no native section and says why
    in the manifest's warnings (never a section naming files or flags that cannot work)."""


def npy_describes(dtype: str) -> bool:
    """Whether a .npy header names `dtype` itself; bfloat16 and the float8s (ml_dtypes) are stored as opaque
    bytes, `V2` / `V1`, whose type only the manifest gives."""

    return not is_extension(parse_dtype(dtype))


def leaf_entry(leaf: Any, index: int, role: str, shape: Sequence[int | str] | None = None) -> dict[str, Any]:
    """One leaf argument or result: `{"kind": "leaf", "leaf", "index", "file", "shape", "dtype"}`."""
    return {"kind": "leaf", "leaf": leaf.name, "index": index,
            "file": input_file(index) if role == "input" else output_file(index),
            "shape": list(leaf.shape if shape is None else shape), "dtype": str(leaf.dtype)}


def bound_entries(inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                  output_params: Sequence[str | None], field: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(args, results): the leaf entries of a model bound by name, each with its name in the model under `field`
    ("tensor", "key"); an input whose name is None is one the model does not take."""
    args = [{**leaf_entry(leaf, i, "input"), field: name}
            for i, (leaf, name) in enumerate(zip(inputs, params, strict=True)) if name is not None]
    results = [{**leaf_entry(leaf, j, "output"), field: name}
               for j, (leaf, name) in enumerate(zip(outputs, output_params, strict=True))]
    return args, results


def bound_section(consumer: str, inputs: Sequence[Any], params: Sequence[str | None], outputs: Sequence[Any],
                  output_params: Sequence[str | None], field: str, **facts: Any) -> dict[str, Any]:
    """The section of a model its consumer binds by name (ONNX Runtime, OpenVINO, LiteRT): the schema, the
    consumer id, the format's own `facts` (its model file, device, options), the leaf entries (`bound_entries`)
    and the symbolic dimensions, in that order."""
    args, results = bound_entries(inputs, params, outputs, output_params, field)
    return {"schema": NATIVE_SCHEMA, "consumer": consumer, **facts, "args": args, "results": results,
            "symbolic_dims": symbolic_names(inputs)}


def compile_options_proto(num_replicas: int = 1, num_partitions: int = 1) -> bytes:
    """A serialized `xla.CompileOptionsProto` for `PJRT_Client_Compile`: 1 replica, 1 partition.

    Hand-encoded (`executable_build_options`, field 3, holding `num_replicas` field 4 and
    `num_partitions` field 5), so it depends on no protobuf library or jaxlib version. Nothing else is set
    on purpose: with no `debug_options` the plugin applies its own XLA's defaults, whereas jaxlib's
    serialized CompileOptions fix ~1 KB of flags an older plugin may not know (measured: xla-cpu-pjrt
    logs "Unsupported fusion type: 5" on jaxlib 0.10.2's). Empty options abort the CPU client
    (`Check failed: replica_count > 0`).
    """
    inner = b"\x20" + _varint(num_replicas) + b"\x28" + _varint(num_partitions)
    return b"\x1a" + _varint(len(inner)) + inner


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def static_key(sizes: Mapping[str, int]) -> str:
    """The key of a refined module in `static_modules`: `"b=8"`, `"b=8,s=16"` (symbols sorted); the native
    program builds the same key from the sizes its inputs bind."""
    return ",".join(f"{name}={int(sizes[name])}" for name in sorted(sizes))


def static_filename(sizes: Mapping[str, int]) -> str:
    """Where the refined module for `sizes` lives: `static/b8.mlirbc`, `static/b8_s16.mlirbc`."""
    return f"{STATIC_DIR}/" + "_".join(f"{name}{int(sizes[name])}" for name in sorted(sizes)) + ".mlirbc"


def static_size_sets(symbols: Sequence[str], requested: Mapping[str, Sequence[int]],
                     example: Mapping[str, int] | None) -> list[dict[str, int]]:
    """The size bindings to refine static modules for: every combination of the requested sizes and the
    example's (the printed native command runs on the example inputs); nothing requested: the example's."""
    unknown = sorted(set(requested) - set(symbols))
    if unknown:
        raise UsageError(f"Option 'static_sizes' | got {unknown[0]}, expected one of the target's symbolic dims "
                         f"({', '.join(symbols) or 'none: the target has static shapes'})")
    if not symbols:
        return []
    choices = []
    for symbol in sorted(symbols):
        sizes = {int(s) for s in requested.get(symbol, ())} | ({int(example[symbol])} if example and symbol in example else set())
        if not sizes:
            return []  # no size to refine for: the section lists none and the program says so
        choices.append(sorted(sizes))
    combos = [dict(zip(sorted(symbols), values)) for values in itertools.product(*choices)]
    if len(combos) > MAX_STATIC_MODULES:
        raise UsageError(f"Option 'static_sizes' | asks for {len(combos)} refined modules, expected at most "
                         f"{MAX_STATIC_MODULES} (each is a full module)")
    return combos


def symbolic_names(leaves: Sequence[Any]) -> list[str]:
    found: set[str] = set()
    for leaf in leaves:
        for dim in leaf.shape:
            if isinstance(dim, str):
                found.update(s for s in re.findall(r"[A-Za-z_]\w*", dim) if s not in ("floordiv", "mod", "max", "min"))
    return sorted(found)


# -- reading one back ---------------------------------------------------------------------------------------

_FILE = re.compile(r"^(input|output)\d+\.(npy|bin)$")


def check_section(manifest, directory) -> dict[str, Any]:
    """The manifest's native section, validated as user input: its consumer matches the backend, every
    leaf entry names a manifest leaf by index with the file name the index gives, and every path the
    consumer opens stays inside the artifact. One ArtifactError line names what is wrong."""
    from pathlib import Path


    where = f"Artifact '{directory}' | native section"
    native = manifest.native
    fallback = manifest.format.get("static_fallback")
    if not isinstance(native, dict) and isinstance(fallback, dict) and isinstance(fallback.get("models"), dict):
        models = ", ".join(f"{key}: {rel}" for key, rel in sorted(fallback["models"].items()))
        raise ArtifactError(f"Artifact '{directory}' | holds one model per size ({models}) because its converter could "
                            "not keep the symbolic dims, and has no native section of its own: run the model of your "
                            "size natively (each is a complete artifact), e.g. `multiexport native DIR/<its directory>`")
    if not isinstance(native, dict):
        why = next((w for w in manifest.warnings if w.startswith("no native section: ")), None)
        raise ArtifactError(f"Artifact '{directory}' | manifest.json has no \"native\" section: " + (
            why[len("no native section: "):] if why else
            f"backend '{manifest.backend}' has no native consumer, or the artifact predates it"))
    consumer = consumer_for(manifest.backend)
    expected = consumer.consumer if consumer is not None else None
    if native.get("schema") != NATIVE_SCHEMA or native.get("consumer") != expected:
        raise ArtifactError(f"{where} | got schema {native.get('schema')!r} consumer {native.get('consumer')!r}, expected "
                            f"{NATIVE_SCHEMA!r} {expected!r}")
    if consumer is not None:
        consumer.check_fields(native, Path(directory))
    modules = [native, *(native.get("static_modules") or {}).values()]
    for module in modules:
        if not isinstance(module, dict) or not isinstance(module.get("args"), list) \
                or not isinstance(module.get("results"), list):
            raise ArtifactError(f"{where} | a module binding has no args/results lists")
        for role, entries, leaves in (("input", module["args"], manifest.inputs),
                                      ("output", module["results"], manifest.outputs)):
            for entry in entries:
                if not isinstance(entry, dict):
                    raise ArtifactError(f"{where} | got {entry!r} among the {role}s, expected an object")
                if entry.get("kind") == "leaf":
                    i = entry.get("index")
                    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(leaves) \
                            or leaves[i].name != entry.get("leaf") or str(entry.get("file")).rsplit(".", 1)[0] != (
                                input_file(i) if role == "input" else output_file(i)).rsplit(".", 1)[0] \
                            or not _FILE.match(str(entry.get("file"))):
                        raise ArtifactError(f"{where} | {role} entry {entry.get('leaf')!r} does not match the "
                                            f"manifest's {role} leaf {i!r} and its file")
                elif entry.get("kind") == "weight":
                    inside(Path(directory), str(entry.get("file")), "native weights file")
        if "program" in module:
            inside(Path(directory), str(module["program"]), "native program")
    if "model" in native:
        inside(Path(directory), str(native["model"]), "native model")
    for key in ("compile_options",):
        if key in native:
            inside(Path(directory), str(native[key]), "native compile options")
    return native
