"""Shared StableHLO work: the one `jax.export` of a signature, and the truth about its module's interface.

Every StableHLO-based backend (XLA, IREE, and the native PJRT consumer) exports the same flat function
of named leaves here. `module_interface` reads the exported module's `main` itself, so argument
positions in manifests are the real ones: a platform-index argument comes first when lowered for several
platforms, token arguments for ordered effects next, then the leaves jax.export kept
(`Exported.module_kept_var_idx`) and lifted weights.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..leaves.handed import NeedsTarget, is_handed
from ..leaves.weights import LiftedWeights, module_function


@dataclass(frozen=True)
class ModuleArg:
    """One positional argument of the module's `main`.

    kind: "platform_index" (int32 scalar: the index of the platform in `platforms`), "token" (an
        ordered-effect token), "leaf" (an input leaf) or "weight" (a lifted weight).
    name: the leaf or weight name (None for platform_index and tokens).
    type: the MLIR type as printed (`tensor<?x16xf32>`).
    """

    kind: str
    name: str | None
    type: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "type": self.type}


def export_module(fn: Callable[..., Any], signature, *, keep_unused: bool = False,
                  platforms: Sequence[str] | None = None, lifted: LiftedWeights | None = None,
                  specs: Sequence[Any] | None = None, donate: bool = False):
    """`jax.export.Exported` of the signature's flat function (with `lifted` weights as trailing parameters).

    specs: the input avals to export at (default: the signature's, symbolic dims included); a list of
        concrete shapes exports a static module for one size.
    donate: keep the donation a `jax.jit(..., donate_argnums=/donate_argnames=)` target declares
        (`donated_leaves`): the module then aliases those inputs to outputs (`tf.aliasing_output`), which a
        PJRT caller may update in place. Off for converters that read the module as a graph.
    """
    import jax
    from jax import export

    if is_handed(fn):  # the compare's module of the same target (leaves/handed.py), else NeedsTarget
        if lifted is not None or specs is not None:
            raise NeedsTarget(f"a module of '{signature.name}' with lifted weights or at fixed sizes")
        return fn.module(keep_unused, platforms, donate, signature)
    kwargs: dict[str, Any] = {"platforms": tuple(platforms)} if platforms else {}
    flat, weight_specs = module_function(fn, signature, lifted)
    donated = donated_leaves(fn, signature) if donate else ()
    # Locations name source files relative to the import root they were found under (`model.py`,
    # `flax/linen/linear.py`): a shipped artifact does not carry the exporting machine's directories, and a
    # reader (locate) resolves the name against its own sys.path. JAX's own canonicalisation does the rewrite.
    previous = jax.config.jax_hlo_source_file_canonicalization_regex  # type: ignore[attr-defined]  # jax reads it so
    jax.config.update("jax_hlo_source_file_canonicalization_regex", source_root_pattern())
    try:
        return export.export(jax.jit(flat, keep_unused=keep_unused, donate_argnums=donated), **kwargs)(
            *(specs if specs is not None else signature.specs), *weight_specs)
    finally:
        jax.config.update("jax_hlo_source_file_canonicalization_regex", previous)


def donated_leaves(fn: Callable[..., Any], signature) -> tuple[int, ...]:
    """Positions of the input leaves a jitted target donates (`jax.jit(f, donate_argnames="cache")`), read from
    the jit equation jax traces for it (its `donated_invars`); () for a function that is not a jax.jit one."""
    if not (callable(getattr(fn, "trace", None)) and callable(getattr(fn, "lower", None))):
        return ()
    import jax

    closed = jax.make_jaxpr(signature.flat_function(fn))(*signature.specs)
    position = {id(var): i for i, var in enumerate(closed.jaxpr.invars)}
    donated: set[int] = set()
    for eqn in closed.jaxpr.eqns:
        for var, flag in zip(eqn.invars, eqn.params.get("donated_invars") or ()):
            if flag and id(var) in position:
                donated.add(position[id(var)])
    return tuple(sorted(donated))


def module_aliases(exported) -> dict[int, int]:
    """The module's input/output aliases: `main` argument position -> result index (`tf.aliasing_output`, what
    jax writes for a donated input that has an output of its shape and dtype)."""
    from jax.extend.mlir import ir

    with ir_context() as ctx:
        module = parse_module(exported, ctx)
        main = next(op for op in module.body.operations if op.operation.name == "func.func"
                    and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        if "arg_attrs" not in main.attributes:
            return {}
        attrs = ir.ArrayAttr(main.attributes["arg_attrs"])
        out = {}
        for i in range(len(attrs)):
            a = ir.DictAttr(attrs[i])
            if "tf.aliasing_output" in a:
                out[i] = ir.IntegerAttr(a["tf.aliasing_output"]).value
    return out


def source_root_pattern(roots: Sequence[str] | None = None) -> str:
    """A regex that removes the import root from a source path: the longest entry of `roots` (default
    sys.path, as given and resolved) that the path starts with, else every directory (a file outside every
    root keeps its base name only). Anchored, so a relative name is left as it is."""
    import os
    import sys

    entries: set[str] = set()
    for root in (sys.path if roots is None else roots):
        if not root or not os.path.isabs(root):
            root = os.path.abspath(root or os.curdir)
        for form in (root, os.path.realpath(root)):
            entries.add(form.rstrip(os.sep))
    alternatives = [re.escape(e + os.sep) for e in sorted(entries, key=len, reverse=True) if e]
    return "^(?:" + "|".join([*alternatives, r"/.*/"]) + ")"


def concrete_specs(signature, sizes: dict[str, int]) -> list[Any]:
    """The signature's input avals with every symbolic dimension replaced by its size in `sizes`."""
    import jax

    out = []
    for leaf, spec in zip(signature.inputs, signature.specs):
        if not leaf.is_symbolic:
            out.append(spec)
            continue
        shape = [d if isinstance(d, int) else evaluate_dim(d, sizes) for d in spec.shape]
        out.append(jax.ShapeDtypeStruct(tuple(shape), spec.dtype, weak_type=bool(getattr(spec, "weak_type", False))))
    return out


_DIM_FUNCTIONS = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max, "min": min}


def evaluate_dim(dim: Any, sizes: dict[str, int]) -> int:
    """A symbolic dimension as jax.export prints it (`b`, `2*b`, `b^2`, `floordiv(b, 2)`) at the given sizes."""
    import ast
    import re

    text = str(dim)
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) - set(_DIM_FUNCTIONS)
    missing = names - set(sizes)
    if missing:
        raise KeyError(f"no size for {', '.join(sorted(missing))}")
    tree = ast.parse(text.replace("^", "**"), mode="eval")  # jax writes a power as b^2
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Load, ast.Constant, ast.Add,
               ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub, ast.Pow)
    small_powers = all(isinstance(node.right, ast.Constant) and isinstance(node.right.value, int)
                       and 0 <= node.right.value <= 8
                       for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow))
    if not all(isinstance(node, allowed) for node in ast.walk(tree)) or not small_powers:
        raise ValueError(f"dimension {text!r} is not an arithmetic expression of symbols")
    scope = {**_DIM_FUNCTIONS, **{n: int(sizes[n]) for n in names}}
    return int(eval(compile(tree, "<dim>", "eval"), {"__builtins__": {}}, scope))  # noqa: S307 (checked above)


def module_interface(exported, leaf_names: Sequence[str], weight_names: Sequence[str] = ()) -> list[ModuleArg]:
    """The module's `main` arguments in order, each named, read from the module itself.

    `leaf_names` are the signature's input leaves and `weight_names` the lifted weights after them: the
    flat function's parameters, of which jax.export keeps `module_kept_var_idx` (in order).
    """
    from jax.extend.mlir import ir

    names = list(leaf_names) + list(weight_names)
    kept = [names[i] for i in sorted(exported.module_kept_var_idx)]
    n_leaves = len(leaf_names)
    kinds = ["leaf" if i < n_leaves else "weight" for i in sorted(exported.module_kept_var_idx)]
    with ir_context() as ctx:
        module = parse_module(exported, ctx)
        main = next(op for op in module.body.operations if op.operation.name == "func.func"
                    and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        attrs = ir.ArrayAttr(main.attributes["arg_attrs"]) if "arg_attrs" in main.attributes else None
        out, data = [], iter(zip(kinds, kept))
        for i, arg_type in enumerate(ftype.inputs):
            a = ir.DictAttr(attrs[i]) if attrs is not None else None
            text = str(arg_type)
            if a is not None and "jax.global_constant" in a and ir.StringAttr(a["jax.global_constant"]).value == "_platform_index":
                out.append(ModuleArg("platform_index", None, text))
            elif "token" in text:
                out.append(ModuleArg("token", None, text))
            else:
                kind, name = next(data)
                out.append(ModuleArg(kind, name, text))
    return out


def leaf_binding(args: Sequence[ModuleArg], leaf_names: Sequence[str]) -> tuple[list[bool], list[int | None]]:
    """Per input leaf: whether the module reads it, and its real argument position in `main`."""
    position = {a.name: i for i, a in enumerate(args) if a.kind == "leaf"}
    return [n in position for n in leaf_names], [position.get(n) for n in leaf_names]


def module_attributes(exported) -> dict[str, Any]:
    """The module-level attributes a consumer may need (`jax.uses_shape_polymorphism`, replicas, partitions)."""

    with ir_context() as ctx:
        module = parse_module(exported, ctx)
        found = {}
        attributes = module.operation.attributes
        for i in range(len(attributes)):
            named = attributes[i]
            name, value = named.name, named.attr
            text = str(value)
            number = re.fullmatch(r"(-?\d+) : i\d+", text)
            found[name] = text == "true" if text in ("true", "false") else int(number.group(1)) if number else text
    return found


def ir_context():
    """A fresh MLIR context for JAX's modules, through public APIs only: StableHLO and CHLO registered; the
    portable artifact's deserializer loads func and VHLO itself (measured on jax 0.10.2 and 0.12.0.1)."""
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import chlo, stablehlo

    ctx = ir.Context()
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    return ctx


def parse_module(exported, ctx):
    """The Exported's module in `ctx`, from its portable artifact (what every consumer reads)."""
    from jax.extend import mlir as jmlir

    return jmlir.deserialize_portable_artifact(bytes(exported.mlir_module_serialized), ctx)


def producer_version(bytecode: bytes) -> str | None:
    """The StableHLO version a portable artifact was written for (`1.15.0`), read from its own header.

    MLIR bytecode starts with `ML\\xefR`, a PrefixVarInt bytecode version and a NUL-terminated producer string
    (`StableHLO_v1.15.0`); None when the bytes are not such an artifact.
    """
    if bytecode[:4] != b"ML\xefR" or len(bytecode) < 6:
        return None
    width = (bytecode[4] & -bytecode[4]).bit_length()  # PrefixVarInt: the lowest set bit gives the byte count
    end = bytecode.find(b"\0", 4 + width)
    producer = bytecode[4 + width:end].decode(errors="replace") if end > 0 else ""
    return producer.split("_v", 1)[1] if producer.startswith("StableHLO_v") else None


def retarget(exported, version: str):
    """The Exported with its module re-serialized for StableHLO `version` (an older consumer's), same semantics.

    jax.export writes for its own 4-week compatibility window; a consumer built against an older StableHLO
    (TF 2.21 reads 1.13.7) cannot read ops newer than it, though most have an older form the serializer can
    downgrade to. A module that cannot be written for `version` raises ValueError (the producer's words).
    """
    import dataclasses

    from jax.extend.mlir.dialects import stablehlo as jhlo

    data = jhlo.serialize_portable_artifact_str(exported.mlir_module(), version)
    return dataclasses.replace(exported, mlir_module_serialized=bytes(data))


def jax_stablehlo_versions() -> dict[str, str]:
    """What this JAX writes: its current StableHLO version and the one jax.export targets (4-week window)."""
    from jax.extend.mlir.dialects import stablehlo as jhlo

    week4 = jhlo.get_version_from_compatibility_requirement(jhlo.StablehloCompatibilityRequirement.WEEK_4)
    return {"stablehlo_current": str(jhlo.get_current_version()), "stablehlo_export_target": str(week4)}


def exported_header(data: bytes) -> dict[str, object]:
    """What a serialized `jax.export.Exported` says about itself, read from its flatbuffer (no JAX internals):
    `serialization_version` (slot 0) and, from jax 0.12, `jax_version` (slot 26). jax 0.10.2 writes version 3
    into the file (so older readers accept it) while its module constant says 11: the file is the truth."""
    import struct

    out: dict[str, object] = {"serialization_version": None, "jax_version": None}
    try:
        table = struct.unpack_from("<I", data, 0)[0]
        vtable = table - struct.unpack_from("<i", data, table)[0]
        size = struct.unpack_from("<H", data, vtable)[0]

        def field(slot: int) -> int:
            at = 4 + 2 * slot
            return struct.unpack_from("<H", data, vtable + at)[0] if at < size else 0

        if (offset := field(0)):
            out["serialization_version"] = struct.unpack_from("<H", data, table + offset)[0]
        if (offset := field(26)):
            start = table + offset + struct.unpack_from("<I", data, table + offset)[0]
            length = struct.unpack_from("<I", data, start)[0]
            out["jax_version"] = data[start + 4:start + 4 + length].decode()
    except (struct.error, UnicodeDecodeError, ValueError):
        pass
    return out
