"""The SavedModel's serving function: jax.export's module, written for the StableHLO TensorFlow reads, in one
XlaCallModule op (TF's own `call_module`), with lifted weights as tf.Variables.

This is what jax2tf's native serialization does for a serving artifact, through public APIs only, with one
difference that matters: jax.export writes StableHLO for its own 4-week window, which the installed TF may
not read (TF 2.21 reads 1.13.7; jax 0.10.2 writes 1.15.0, jax 0.12 1.18.0, and an op such as top_k's
composite or jax 0.12's shape assertion has no form TF knows). So the module is re-serialized for TF's own
StableHLO version, and TF's own reader checks it before anything is saved: skew is caught at export.
Weak types (Python-scalar leaves) come from the signature's specs, so no private JAX API is needed.

`serving_default` declares exactly the leaves the module takes (`module_kept_var_idx`): a dropped leaf is
not fed at all, as in every other format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from multiexport.sdk import ExportError, Leaf, LiftedWeights, dist_version, export_module, producer_version, retarget

VARIABLES_DIR = "variables"  # the SavedModel's checkpoint: lifted weights live here as tf.Variables


def tf_stablehlo_version() -> str:
    """The StableHLO version the installed TensorFlow's XlaCallModule reads."""
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tfhlo

    return str(tfhlo.get_current_version())


def exported_for_tf(fn, signature, options, lifted: LiftedWeights | None):
    """(the Exported, written for TF's StableHLO; what jax.export wrote first; what TF reads)."""
    from tensorflow.compiler.mlir.stablehlo import stablehlo as tfhlo

    exported = export_module(fn, signature, keep_unused=options.keep_unused, platforms=options.platforms,
                             lifted=lifted)
    written = producer_version(bytes(exported.mlir_module_serialized)) or "unknown"
    reads = tf_stablehlo_version()
    try:
        exported = retarget(exported, reads)
        tfhlo.deserialize_portable_artifact_str(bytes(exported.mlir_module_serialized))  # TF's own reader
    except Exception as exc:
        import tensorflow as tf

        raise ExportError(
            f"Backend 'savedmodel' | version skew: jax {jax_version()} writes StableHLO {written}, TensorFlow {tf.__version__} "
            f"reads StableHLO {reads}, and the module cannot be written for {reads} "
            f"({' '.join(str(exc).split())[:300]}): the function uses an op TensorFlow {tf.__version__} does not have. "
            "Run it with a TensorFlow built against a newer StableHLO, or avoid the op",
            backend="savedmodel", category="version-skew") from exc
    return exported, written, reads


def serving_function(tf, exported, signature, variables: Sequence[Any], declared: Sequence[bool]):
    """The `serving_default` tf.function: alias-keyed tensors of the declared leaves in, dict by output alias out."""
    import jax
    from tensorflow.compiler.tf2xla.python import xla as tfxla

    leaves = list(signature.inputs)
    try:
        specs = [tf.TensorSpec(_tf_shape(leaf), tf.as_dtype(leaf.dtype), name=leaf.alias)
                 for leaf, d in zip(leaves, declared) if d]
        tout = [tf.as_dtype(a.dtype) for a in exported.out_avals]
    except TypeError as exc:
        raise ExportError(f"Backend 'savedmodel' | TensorFlow has no dtype for a leaf of '{signature.name}': {exc}",
                          backend="savedmodel", category="unsupported-dtype") from exc
    kept = sorted(exported.module_kept_var_idx)
    n = len(leaves)
    attrs: dict[str, Any] = dict(
        version=exported.calling_convention_version, module=bytes(exported.mlir_module_serialized), Tout=tout,
        Sout=[tuple(d if isinstance(d, int) else None for d in a.shape) for a in exported.out_avals],
        platforms=[p.upper() for p in exported.platforms],
        disabled_checks=[str(c) for c in exported.disabled_safety_checks], function_list=[],
        has_token_input_output=False)
    if exported.calling_convention_version >= 10:
        attrs["use_shardy_partitioner"] = bool(jax.config.values["jax_use_shardy_partitioner"])
    out_keys = [leaf.alias for leaf in signature.outputs]
    weights = list(variables)

    def serve(*tensors):
        given = iter(tensors)
        fed = [next(given) if d else None for d in declared]
        args = [fed[i] if i < n else weights[i - n].read_value() for i in kept]
        results = tfxla.call_module(args, **attrs)
        return {key: tf.identity(value) for key, value in zip(out_keys, results)}

    serve.__name__ = "".join(c if c.isalnum() else "_" for c in signature.name) or "fn"
    return tf.function(serve, input_signature=specs, autograph=False)


def _tf_shape(leaf: Leaf) -> list[int | None]:
    return [d if isinstance(d, int) else None for d in leaf.shape]


def poly_shape(leaf: Leaf) -> str | None:
    """The leaf's shape with symbols by name (for the manifest): None when static."""
    if not leaf.is_symbolic:
        return None
    return "(" + ", ".join(str(d) for d in leaf.shape) + ")"


def jax_version() -> str:

    return dist_version("jax")


def variables_for(tf, lifted: LiftedWeights) -> list[Any]:
    """One non-trainable tf.Variable per lifted weight, named like the weight, on the host.

    Each is made from an `Identity` of the weight, whose output TF takes as the variable's buffer:
    the target's own (JAX) buffer when it is 64-byte aligned, as JAX's are, else one copy. Nothing
    writes to these variables (export traces and saves them, then drops them), so sharing the
    read-only JAX buffer is safe. `tf.Variable(array)` would make two copies (see `_to_tensor`).
    Measured: exporting a 112 MiB LM peaked 16 MB above the RSS it started from (131 MB with
    `tf.Variable(array)`), the 1.28 GiB LM 2 MB.
    """
    with tf.device("/CPU:0"):
        return [tf.Variable(tf.raw_ops.Identity(input=array), trainable=False, name=name)
                for name, array in zip(lifted.names, lifted.arrays)]


def checkpoint_files(out_dir: Path) -> dict[str, str]:
    """The SavedModel's variables/ files by manifest role: its index and its data shard(s)."""
    names = sorted(p.name for p in (out_dir / VARIABLES_DIR).iterdir() if p.is_file())
    data = [name for name in names if ".data-" in name]
    roles = {}
    for name in names:
        if name.endswith(".index"):
            roles["variables_index"] = f"{VARIABLES_DIR}/{name}"
    for i, name in enumerate(data):
        roles["variables_data" if len(data) == 1 else f"variables_data_{i}"] = f"{VARIABLES_DIR}/{name}"
    return roles


def describe_variables(lifted: LiftedWeights, out_dir: Path) -> dict[str, Any]:
    """The manifest's weights entry for lifted weights kept as the SavedModel's variables."""
    return {
        **lifted.describe(),
        "file": f"{VARIABLES_DIR}/",
        "file_format": "TF checkpoint (one tf.Variable per weight, named like it, restored by tf.saved_model.load)",
        "file_bytes": int(sum(p.stat().st_size for p in (out_dir / VARIABLES_DIR).iterdir() if p.is_file())),
    }


