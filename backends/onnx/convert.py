"""jax2onnx conversion for the ONNX backend: naming inputs and outputs by leaf, dropping unread inputs,
counting every tensor (ONNX functions included), saving with external data, validating.

The function converted is the signature's flat function of named leaves, so graph inputs are the
canonical leaf names (`foo.bar`) and graph outputs the output leaf names (`out.logits`); symbolic
dimensions stay named ONNX dims (`b`). A 64-bit target is converted with jax2onnx's double precision,
and the dtypes the graph declares are read back so the core can refuse any leaf whose dtype changed.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import traceback
from pathlib import Path

from multiexport.sdk import ExportError, current_umask, dist_version, tpu_only

from . import equations, plugins

MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"

# Seconds jax2onnx's plugin import has cost this process so far, and how it was done.
_FIRST_USE_SECONDS: float | None = None
PLUGIN_IMPORT: list[str] = []


def jax2onnx_first_use(fn=None, specs=()) -> tuple[float, float]:
    """(seconds this call spent importing jax2onnx and its plugins, seconds that cost in this process).

    Only the plugins a conversion of `fn(*specs)` can use are imported (plugins.py: ~1 s instead of ~11 s
    of jax2onnx's own import_all_plugins, byte-identical ONNX); to_onnx then skips its own import. A later
    call imports only what its function needs beyond that (nothing, unless it uses other equinox layers).
    """
    global _FIRST_USE_SECONDS

    before = len(plugins.imported)
    t0 = time.perf_counter()
    import jax2onnx  # noqa: F401

    how = plugins.import_plugins(fn, specs)
    spent = time.perf_counter() - t0
    if _FIRST_USE_SECONDS is not None and len(plugins.imported) == before:
        return 0.0, _FIRST_USE_SECONDS  # nothing new: this process paid it already
    _FIRST_USE_SECONDS = (_FIRST_USE_SECONDS or 0.0) + spent
    PLUGIN_IMPORT[:] = [how]
    return spent, _FIRST_USE_SECONDS


def convert(fn, signature, opset: int, double: bool):
    """jax2onnx's IR model of the flat function, inputs named by leaf and outputs by output leaf."""
    import jax2onnx
    import onnx_ir.passes.common as passes

    try:
        # No input_names/output_names: jax2onnx cannot name one value twice (an input returned as
        # an output, an output returned twice), so name_values renames after fixing those up.
        with equations.recording() as record:  # for `locate`: which tensor holds which equation's output
            model = jax2onnx.to_onnx(signature.flat_function(fn), list(signature.specs),
                                     model_name=signature.name or "model", opset=opset, return_mode="ir",
                                     enable_double_precision=double)
    except Exception as exc:
        raise conversion_error(exc, signature) from exc
    # A clone: jax2onnx's IR still counts uses by nodes it discarded, and "which inputs feed a
    # node" must count only nodes in the graph (the clone shares the tensors, copies no data).
    model = model.clone()
    positional = positional_inputs(model, signature)  # before OutputFixPass renames any of them
    passes.OutputFixPass()(model)  # Identity between an input returned as is, or a repeated output
    passes.RemoveUnusedNodesPass()(model)  # dead nodes and initializers, so "unread" means unread
    name_values(model, positional, signature)
    equations.attach_table(model, record)
    return model


# ONNX ops that draw their own random numbers (seeded by an attribute, or not at all): a jax.random draw that
# jax2onnx lowers to one of these ignores the key the function is given, so the artifact is not the function.
RANDOM_OPS = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli")


def check_no_random_ops(model, signature) -> None:
    """Refuse a graph whose random numbers do not come from the function's keys (see RANDOM_OPS)."""
    import onnx_ir as ir

    found = sorted({node.op_type for root in [model.graph, *model.functions.values()]
                    for node in ir.traversal.RecursiveGraphIterator(root) if node.op_type in RANDOM_OPS})
    if found:
        keys = [leaf.name for leaf in signature.inputs if leaf.key_impl]
        raise ExportError(
            f"Backend 'onnx' | jax2onnx lowered jax.random draws to ONNX {', '.join(found)}, which draws its own "
            f"numbers and ignores the key{' ' + repr(keys[0]) if keys else ''}: the artifact would not compute the "
            "function, so it is refused (draw the random numbers outside the exported function and pass them in)",
            backend="onnx", category="unsupported-op")


def drop_unread_inputs(model, signature, keep_unused: bool) -> list[str]:
    """Input leaves no node reads, in leaf order; removed from the graph unless keep_unused.

    A value's uses include nodes of subgraphs (If/Loop/Scan bodies) that read it from outer scope.
    """
    unread = [v.name for v in model.graph.inputs if not v.uses() and not v.is_graph_output()]
    if not keep_unused:
        for value in [v for v in model.graph.inputs if v.name in unread]:
            model.graph.inputs.remove(value)
    order = {leaf.name: i for i, leaf in enumerate(signature.inputs)}
    return sorted(unread, key=order.__getitem__)


def tensor_bytes(model) -> int:
    """Bytes of every tensor the model file would hold: initializers and tensor attributes, in the main
    graph, its subgraphs and every ONNX function (jax2onnx puts a GPT's weights inside functions)."""
    import onnx_ir as ir

    total = 0
    roots = [model.graph, *model.functions.values()]
    graphs: dict[int, ir.Graph | ir.Function | ir.GraphView] = {}  # by identity

    def enter(graph: ir.Graph | ir.Function | ir.GraphView) -> None:
        graphs.setdefault(id(graph), graph)

    for root in roots:
        graphs.setdefault(id(root), root)
        for node in ir.traversal.RecursiveGraphIterator(root, enter_graph=enter):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR:
                    total += attr.value.nbytes
                elif attr.type == ir.AttributeType.TENSORS:
                    total += sum(t.nbytes for t in attr.value)
    for graph in graphs.values():
        initializers = getattr(graph, "initializers", None) or {}
        total += sum(v.const_value.nbytes for v in initializers.values() if v.const_value is not None)
    return total


def save(model, out_dir: Path, external: bool) -> int:
    """Write model.onnx, with every tensor of 1 KiB or more in model.onnx.data when `external`.

    Tensors inside ONNX functions cannot be external data, so with `external` the functions are inlined
    first and their constants lifted to initializers: every weight then moves to the data file.
    onnx_ir writes the data file itself: a model past 2 GiB is never built as one protobuf message.
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as passes


    if external:
        if model.functions:
            _align_function_opsets(model)
            passes.InlinePass()(model)
        passes.LiftConstantsToInitializersPass()(model)
    ir.save(model, out_dir / MODEL_FILE, external_data=DATA_FILE if external else None, size_threshold_bytes=1024)
    written = [out_dir / MODEL_FILE] + ([out_dir / DATA_FILE] if external else [])
    for path in written:  # the data file comes from a 0600 temporary file; an artifact is meant to be shipped
        os.chmod(path, 0o666 & ~current_umask())
    return sum(p.stat().st_size for p in written)


def _align_function_opsets(model) -> None:
    """jax2onnx gives its function domains version 1 in the model and the default opset's number inside each
    function, which the inliner refuses; a function domain has no versions of its own, so align them."""
    for function in model.functions.values():
        for domain, version in list(function.opset_imports.items()):
            if domain and domain in model.opset_imports and model.opset_imports[domain] != version:
                function.opset_imports[domain] = model.opset_imports[domain]


def declared_dtypes(model) -> dict[str, str]:
    """Graph input and output value name -> the numpy dtype name the ONNX graph declares."""
    found = {}
    for value in [*model.graph.inputs, *model.graph.outputs]:
        dtype = value.dtype
        if dtype is not None:
            try:
                found[value.name] = dtype.numpy().name
            except Exception:  # an ONNX type with no numpy equivalent: report its ONNX name
                found[value.name] = str(dtype).lower()
    return found


def positional_inputs(model, signature) -> list:
    """jax2onnx's graph inputs in_0..in_N, one per input leaf, in leaf order."""
    inputs = list(model.graph.inputs)
    by_index = {int(m.group(1)): v for v in inputs if (m := re.fullmatch(r"in_(\d+)", v.name or ""))}
    if len(inputs) != len(signature.inputs) or sorted(by_index) != list(range(len(inputs))):
        raise ExportError(f"Backend 'onnx' | jax2onnx produced graph inputs {[v.name for v in inputs]}, "
                          f"expected in_0..in_{len(signature.inputs) - 1} for {len(signature.inputs)} leaves",
                          backend="onnx", category="converter-error")
    return [by_index[i] for i in range(len(inputs))]


def name_values(model, positional: list, signature) -> None:
    """Rename the positional inputs to leaf names and the graph outputs to output leaf names.

    Renaming a value renames every reference to it (nodes, subgraphs); an internal value that
    already holds a target name is renamed out of the way first.
    """
    import onnx_ir as ir

    graph = model.graph
    if len(graph.outputs) != len(signature.outputs):
        raise ExportError(f"Backend 'onnx' | jax2onnx produced {len(graph.outputs)} graph outputs, expected "
                          f"{len(signature.outputs)} ({', '.join(o.name for o in signature.outputs)})",
                          backend="onnx", category="converter-error")
    values = list(positional) + list(graph.outputs)
    targets = [leaf.name for leaf in signature.inputs] + [leaf.name for leaf in signature.outputs]
    if len(set(targets)) != len(targets):
        clash = sorted({t for t in targets if targets.count(t) > 1})
        raise ExportError(f"Backend 'onnx' | leaf names {clash} name both an input and an output, expected "
                          "distinct ONNX value names", backend="onnx", category="unsupported-signature")
    existing = ir.convenience.create_value_mapping(graph)  # subgraphs included
    renamed, wanted = {id(v) for v in values}, set(targets)
    blockers = {name: v for name, v in existing.items() if name in wanted and id(v) not in renamed}  # name: v.name
    taken = set(existing) | wanted
    if blockers:
        ir.convenience.rename_values(list(blockers.values()), [_fresh_name(name, taken) for name in blockers])
    ir.convenience.rename_values(values, targets)


def _fresh_name(name: str, taken: set[str]) -> str:
    n = 0
    while f"{name}__{n}" in taken:
        n += 1
    taken.add(f"{name}__{n}")
    return f"{name}__{n}"


def validate(path: Path, backend: str) -> None:
    """onnx.checker full check and strict shape inference on the written files (external data included)."""
    import onnx

    try:
        onnx.checker.check_model(str(path), full_check=True)
        with tempfile.TemporaryDirectory() as tmp:  # infer_shapes_path writes its result; we keep only the verdict
            onnx.shape_inference.infer_shapes_path(str(path), os.path.join(tmp, "inferred.onnx"),
                                                   check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        typed = _UNSUPPORTED_TYPE.search(str(exc))
        if typed:  # the ONNX operator's own type constraint: the format cannot express the op at this dtype
            op, dtype = typed.group("op"), typed.group("dtype")
            raise ExportError(f"Backend '{backend}' | ONNX's {op} operator does not take {dtype} (its type constraint "
                              f"in the ONNX standard), so the function cannot be expressed in ONNX at this dtype: "
                              f"{first_lines(exc)}", backend=backend, category="unsupported-dtype") from exc
        raise ExportError(f"Backend '{backend}' | {path.name} fails ONNX validation: {type(exc).__name__}: "
                          f"{first_lines(exc)}", backend=backend, category="invalid-model") from exc


# onnx's shape inference on a type an operator's schema does not allow (jax2onnx writes bfloat16 Einsum).
_UNSUPPORTED_TYPE = re.compile(r"op_type:(?P<op>\w+).*?has unsupported type: tensor\((?P<dtype>\w+)\)", re.DOTALL)


# onnx.checker's words for a value_info shape that its own inference contradicts.
STALE_SHAPE = "Inferred shape and existing shape differ"


def drop_intermediate_shapes(model) -> int:
    """Clear the shape annotations of every value that is neither a graph input nor a graph output.

    Those annotations (value_info) are optional hints; a consumer infers shapes itself. jax2onnx 0.17's
    layout pass can leave a stale one (an NHWC shape on a value it made NCHW), which makes a correct graph
    fail onnx.checker. The interface shapes, which the manifest states, are kept. Returns how many were cleared.
    """
    import onnx_ir as ir

    interface = {id(v) for v in (*model.graph.inputs, *model.graph.outputs)}
    graphs = [model.graph, *model.functions.values()]
    cleared = 0
    for graph in graphs:
        for node in ir.traversal.RecursiveGraphIterator(graph):
            for value in node.outputs:
                if id(value) not in interface and value.shape is not None:
                    value.shape = None
                    cleared += 1
    return cleared


# jax2onnx's words for "this op/plugin cannot handle what it met", and the one category they all get.
_PLUGIN_FAILURE = re.compile(r"\b(\w+Plugin)\b|No (?:ONNX )?(?:handler|plugin|lowering) for|not (?:yet )?supported|"
                             r"Unsupported primitive|NotImplemented", re.IGNORECASE)
# A plugin that needs a static value where the function passes a traced one (weights fed as inputs).
_TRACED = re.compile(r"Tracer|traced|concrete value|ConcretizationTypeError|must be (?:a )?constant", re.IGNORECASE)


def conversion_error(exc: Exception, signature) -> ExportError:
    """jax2onnx's failure as one ExportError: `unsupported-op` whenever an op or plugin cannot convert
    (whatever path raised it), `converter-error` otherwise; positional argument names become leaf names."""

    if (pallas := tpu_only(exc, "ONNX")) is not None:
        return ExportError(f"Backend 'onnx' | {pallas[1]}", backend="onnx", category=pallas[0])
    text = rename_positional(f"{type(exc).__name__}: {exc}", signature)
    missing = _JAX_MISSING.search(str(exc)) if isinstance(exc, (AttributeError, ImportError)) else None
    if missing:
        # jax2onnx reaching for a jax internal this jax no longer has (jax2onnx 0.17.1 on jax 0.12: nested
        # jit): no op of the model is at fault, and a user reading `unsupported-op` would drop the wrong thing.

        j2o, jax = dist_version("jax2onnx"), dist_version("jax")
        return ExportError(
            f"Backend 'onnx' | jax2onnx {j2o} cannot convert with jax {jax}: it uses "
            f"{missing['m1'] or missing['m2']}.{missing['n1'] or missing['n2']}, which this jax does not have "
            f"({key_lines(text, 300)}); expected a jax2onnx release made for jax {jax}, "
            "or a jax this jax2onnx supports", backend="onnx", category="version-skew")
    plugin = re.search(r"\b(\w+Plugin)\b", text)
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    plugin_file = next((f for f in reversed(frames) if f"jax2onnx{os.sep}plugins{os.sep}" in f), None)
    body = key_lines(text)
    if isinstance(exc, NotImplementedError) or plugin or plugin_file or _PLUGIN_FAILURE.search(text):
        where = plugin.group(1) if plugin else (Path(plugin_file).stem if plugin_file else "")
        what = f"jax2onnx's {where} plugin" if where else "jax2onnx"
        hint = ""
        if "get_monkey_patch.<locals>.patched()" in text:
            # e.g. flax.linen.avg_pool(x, (2, 2)): the plugin's stand-in takes window_shape by keyword only
            hint = ("; jax2onnx swaps the library function for a stand-in with a narrower signature, "
                    "so passing its arguments by keyword may avoid this")
        elif _TRACED.search(text) and "input leaf '" in text:
            # Only when the message names one of the function's own inputs: then baking it in is the way out.
            hint = ("; the plugin needs a value known at conversion time but got a traced input leaf: if it is a "
                    "weight, bake it in (close over it) so the converter sees a constant")
        return ExportError(f"Backend 'onnx' | {what} cannot convert the function: {body}{hint}", backend="onnx",
                           category="unsupported-op")
    hint = ""
    if "Shapes must be 1D sequences of concrete values" in text:
        # Measured on flax.linen nn.scan over layers, nn.RNN(LSTMCell) and nn.scan(LSTMCell) (benchmarks/real_models);
        # a plain lax.scan converts.
        hint = ("; jax2onnx made a shape that JAX keeps static into a traced value while re-tracing the function "
                "(seen with flax.linen's nn.scan and nn.RNN in jax2onnx 0.17): a converter limitation, not the "
                "model's math; the other formats are unaffected")
    return ExportError(f"Backend 'onnx' | jax2onnx failed: {body}{hint}", backend="onnx", category="converter-error")


# "module 'jax._src.core' has no attribute 'ClosedJaxpr'", "cannot import name 'x' from 'jax.core'"
_JAX_MISSING = re.compile(r"module '(?P<m1>jax(?:lib)?(?:\.[\w.]+)?)' has no attribute '(?P<n1>\w+)'"
                          r"|cannot import name '(?P<n2>\w+)' from '(?P<m2>jax(?:lib)?(?:\.[\w.]+)?)'")


def rename_positional(text: str, signature) -> str:
    """`in_6` (jax2onnx's name for the function's input 6) in a converter message -> the leaf's name
    (`'params.conv.kernel'`). Other positional names are left alone on purpose: `xs[4]` or `args[4]` inside a
    scan, a cond or a plugin index that op's own operands, not the function's (measured: nn.scan's `xs[4]` was
    the input `x`, and renaming it named a weight that had nothing to do with the failure)."""
    names = [leaf.name for leaf in signature.inputs]

    def leaf(match: re.Match) -> str:
        i = int(match.group(1))
        return f"input leaf '{names[i]}'" if 0 <= i < len(names) else match.group(0)

    return re.sub(r"\bin_(\d+)\b", leaf, text)


def key_lines(text: str, limit: int = 1200) -> str:
    """The first line and the lines that say what went wrong (errors, unsupported, shapes), bounded."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    keep = [lines[0]] + [line for line in lines[1:] if re.search(r"error|unsupported|not supported|shape|dtype|"
                                                                r"expected|cannot", line, re.IGNORECASE)]
    out = " | ".join(dict.fromkeys(keep))
    return out if len(out) <= limit else out[:limit] + " ..."


def first_lines(exc: Exception, n: int = 3) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return " ".join(lines[:n])
