"""The native section of an XLA artifact, for the PJRT C API consumer (csrc/pjrt_run.cc): the module's real
argument list, the compile options, per requested size a static module refined from the symbolic one
(PJRT compiles no symbolic shapes), and for a module lowered for several platforms one single-platform
program per platform (`platform_modules`). The common parts of every section are in `exporting.native_section`."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from multiexport.sdk import (
    COMPILE_OPTIONS_FILE,
    MLIR_DTYPES,
    NATIVE_SCHEMA,
    evaluate_dim,
    leaf_entry,
    present,
    producer_version,
    static_filename,
    static_key,
    symbolic_names,
)

CONSUMER = "pjrt_c_api"  # the section's consumer id (manifest.schema.json)


def xla_section(exported, args: Sequence[Any], inputs: Sequence[Any], outputs: Sequence[Any], *,
                weights: Sequence[Mapping[str, Any]] = (), weights_file: str = "weights.safetensors",
                program: str = "model.mlirbc", static_modules: Mapping[str, Mapping[str, Any]] | None = None,
                uses_shape_polymorphism: bool = False) -> dict[str, Any]:
    """The section of an XLA artifact for a PJRT C API consumer (csrc/pjrt_run.cc).

    args: `module_interface(exported, ...)`, the module's real arguments (platform index, tokens, leaves,
    weights) in order. weights: the manifest's `weights.tensors` for lifted weights. static_modules:
    `static_key(sizes) -> static_module(...)`; PJRT cannot compile the polymorphic `program` itself.
    """
    index = {leaf.name: i for i, leaf in enumerate(inputs)}
    tensors = {t["name"]: t for t in weights}
    entries: list[dict[str, Any]] = []
    for a in args:
        if a.kind == "platform_index":
            entries.append({"kind": "platform_index", "dtype": "int32", "shape": []})
        elif a.kind == "token":
            entries.append({"kind": "token"})
        elif a.kind == "leaf":
            entries.append(leaf_entry(inputs[index[a.name]], index[a.name], "input"))
        else:
            t = tensors[a.name]
            entries.append({"kind": "weight", "tensor": t["name"], "file": weights_file, "shape": list(t["shape"]),
                            "dtype": str(t["dtype"])})
    symbolic = symbolic_names(inputs)
    poly = bool(symbolic) or uses_shape_polymorphism
    return {
        "schema": NATIVE_SCHEMA,
        "consumer": CONSUMER,
        "program": program,
        "format": "mlir",  # PJRT_Program.format: StableHLO portable-artifact bytecode
        "stablehlo_version": _producer(exported.mlir_module_serialized),
        "compile_options": COMPILE_OPTIONS_FILE,
        "compile_options_text": "executable_build_options { num_replicas: 1 num_partitions: 1 }",
        "platforms": [p.lower() for p in exported.platforms],
        "nr_devices": int(exported.nr_devices),
        "uses_shape_polymorphism": poly,
        "symbolic_dims": symbolic,
        # PJRT refuses dynamic shapes ("'stablehlo.dynamic_broadcast_in_dim' op can't be translated").
        "compilable": not poly,
        "args": entries,
        "results": [*({"kind": "token"} for _ in exported.ordered_effects),
                    *(leaf_entry(leaf, j, "output") for j, leaf in enumerate(outputs))],
        "static_modules": dict(static_modules or {}),
    }


PLATFORM_DIR = "platforms"  # platform_modules' programs: platforms/tpu.mlirbc, platforms/cpu.mlirbc


def platform_module(section: Mapping[str, Any], platform: str, bytecode: bytes, arg_shapes, result_shapes,
                    how: str) -> dict[str, Any]:
    """The `platform_modules[platform]` entry for a static module lowered by `refine_static` for `platform` alone.

    Why: the multi-platform main takes the platform index as a runtime argument, so its `case` over platforms
    survives into the compile and XLA cannot optimise across it as jax does with the index folded to a
    constant: on the TPU a transformer block's numbers differed by 1.3e-3 of max|ref| from jax's. This program
    is what jax compiles for that platform, so a native consumer of the plugin's platform runs it bit-exact."""
    entry = static_module(section, {}, bytecode, arg_shapes, result_shapes, how, platform)
    del entry["sizes"]
    entry["program"] = f"{PLATFORM_DIR}/{platform}.mlirbc"
    return entry


def _producer(bytecode: bytes) -> str | None:

    return producer_version(bytes(bytecode))


def refine_static(exported, sizes: Mapping[str, int], platform: str | None = None
                  ) -> tuple[bytes, list[list[int]], list[list[int]], str]:
    """A static-shape module for `sizes`: what JAX itself compiles when it calls `exported` at those sizes.

    platform: the one platform to lower for (one of `exported.platforms`; default: the first). Lowering
    needs no device of that platform, so a CUDA module is refined on a CPU-only machine as well.

    Lowers `jax.jit(call)` at the concrete shapes, where `call` takes the kept arguments and calls
    `exported.call` (so the argument layout is the kept leaves and weights, no platform index or
    tokens), then runs JAX's own shape refinement, the pass pxla applies before compiling any module that
    uses shape polymorphism: it checks the module's shape assertions at these sizes and fails if a
    dynamic shape survives. JAX has no public entry point for it; where the private one is missing, the
    lowering is used unrefined and PJRT will say if a dynamic shape is left. Serialized as a StableHLO
    portable artifact at the Exported's own version, so it needs the same consumer.

    Returns (bytecode, arg shapes, result shapes, how it was refined).
    """
    import jax
    import jax.numpy as jnp
    from jax.extend.mlir.dialects import stablehlo


    if exported.ordered_effects:
        raise ValueError(f"ordered effects {exported.ordered_effects} | a native consumer supports none "
                         "(they come with host callbacks, which no native consumer can run)")
    env = {k: int(v) for k, v in sizes.items()}
    specs = [jax.ShapeDtypeStruct(tuple(d if isinstance(d, int) else evaluate_dim(d, env) for d in aval.shape),
                                  aval.dtype, weak_type=aval.weak_type) for aval in exported.in_avals]
    kept = sorted(exported.module_kept_var_idx)

    def call_kept(*kept_args):
        full = [jnp.zeros(s.shape, s.dtype) for s in specs]  # a leaf the module does not read: dropped by call
        for i, a in zip(kept, kept_args):
            full[i] = a
        return exported.call(*full)

    x64 = any(s.dtype.itemsize == 8 for s in specs) or any(a.dtype.itemsize == 8 for a in exported.out_avals)
    with jax.enable_x64(x64 or bool(jax.config.read("jax_enable_x64"))):
        target_platform = (platform or exported.platforms[0]).lower()
        if target_platform not in [p.lower() for p in exported.platforms]:
            raise ValueError(f"platform '{target_platform}' | the module is lowered for "
                             f"{', '.join(exported.platforms)} only")
        traced = jax.jit(call_kept, keep_unused=True).trace(*[specs[i] for i in kept])
        lowered = traced.lower(lowering_platforms=(target_platform,))
        module = present(lowered.compiler_ir("stablehlo"), "jax lowers to StableHLO on every platform it exports for")
        try:
            from jax._src.interpreters import mlir as jax_mlir  # private: JAX's refinement pass, no public API

            module = jax_mlir.refine_polymorphic_shapes(module)
            how = "JAX's refine_polymorphic_shapes of jax.jit(Exported.call) lowered at these sizes"
        except (ImportError, AttributeError):
            how = "jax.jit(Exported.call) lowered at these sizes, unrefined (this JAX has no refinement pass)"
        arg_types, result_types = main_signature(module)  # before serializing, which rewrites it to VHLO
        target = _producer(exported.mlir_module_serialized) or str(stablehlo.get_current_version())
        with module.context:
            bytecode = stablehlo.serialize_portable_artifact(module, target)
    return bytes(bytecode), [s for s, _ in arg_types], [s for s, _ in result_types], how


def main_signature(module) -> tuple[list[tuple[list[int], str]], list[tuple[list[int], str]]]:
    """(shape, dtype) of each argument and result of the module's public `main`."""
    from jax.extend.mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            return [_tensor(t) for t in ftype.inputs], [_tensor(t) for t in ftype.results]
    raise ValueError("module has no main function")


def _tensor(t) -> tuple[list[int], str]:
    from jax.extend.mlir import ir

    if t.typeid != ir.RankedTensorType.static_typeid:
        return [], str(t)  # !stablehlo.token
    ranked = ir.RankedTensorType(t)
    dims = [-1 if ranked.is_dynamic_dim(i) else ranked.get_dim_size(i) for i in range(ranked.rank)]
    return dims, MLIR_DTYPES.get(str(ranked.element_type), str(ranked.element_type))


def static_module(section: Mapping[str, Any], sizes: Mapping[str, int], bytecode: bytes, arg_shapes, result_shapes,
                  how: str, platform: str) -> dict[str, Any]:
    """The `static_modules[static_key(sizes)]` entry for a module made by `refine_static`: the section's
    leaf and weight arguments at concrete shapes, lowered for one platform (no platform index, no tokens)."""
    args = [dict(a) for a in section["args"] if a["kind"] in ("leaf", "weight")]
    results = [dict(r) for r in section["results"] if r["kind"] == "leaf"]
    if len(args) != len(arg_shapes) or len(results) != len(result_shapes):
        raise ValueError(f"refined module for {static_key(sizes)} | takes {len(arg_shapes)} arguments and returns "
                         f"{len(result_shapes)} results, expected {len(args)} and {len(results)}")
    for entry, shape in [*zip(args, arg_shapes), *zip(results, result_shapes)]:
        if any(d < 0 for d in shape):
            raise ValueError(f"refined module for {static_key(sizes)} | still has a dynamic shape {shape}")
        entry["shape"] = list(shape)
    return {"program": static_filename(sizes), "sizes": {k: int(v) for k, v in sorted(sizes.items())},
            "stablehlo_version": _producer(bytecode), "refined_by": how, "platforms": [platform],
            "args": args, "results": results}
