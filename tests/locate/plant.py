"""Planted faults: a real artifact's shipped file changed the way a converter pass could change it, one op each.

Each function edits an artifact directory in place (a copy the test made): the ONNX graph's attributes, the
StableHLO module IREE compiles (re-compiled into the shipped .vmfb with the artifact's own flags), or the module
inside XLA's serialized Exported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import re
from pathlib import Path

import onnx

from multiexport.examples import flax_models
from multiexport.exporting.manifest import Manifest


def source_line(fn, needle: str) -> str:
    """`file.py:N` of the first line of `fn`'s source file that contains `needle`."""
    path = Path(inspect.getsourcefile(fn))
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return f"{path.name}:{number}"
    raise AssertionError(f"{needle!r} not in {path}")


CNN_CONV0 = source_line(flax_models.cnn, "nn.Conv(8")  # the example CNN's two nn.Conv lines
CNN_CONV1 = source_line(flax_models.cnn, "nn.Conv(16")


def reseal(directory: Path) -> None:
    """The manifest's inventory (sizes and sha256) updated to the edited files: the artifact is consistent, as one
    a faulty converter wrote would be."""
    path = directory / "manifest.json"
    data = json.loads(path.read_text())
    for name in data.get("inventory", {}):
        data["inventory"][name] = (directory / name).stat().st_size
        if name in data.get("inventory_sha256", {}):
            data["inventory_sha256"][name] = hashlib.sha256((directory / name).read_bytes()).hexdigest()
    path.write_text(json.dumps(data, indent=1))


def onnx_conv_pads(directory: Path, nth: int, pads: list[int]) -> None:
    """The `nth` Conv of model.onnx gets `pads` (a wrong padding rule), in place of its `auto_pad` if it has one
    (jax2onnx writes SAME_UPPER)."""
    path = directory / "model.onnx"
    model = onnx.load(str(path))
    conv = [n for n in model.graph.node if n.op_type == "Conv"][nth]
    kept = [a for a in conv.attribute if a.name not in ("pads", "auto_pad")]
    del conv.attribute[:]
    conv.attribute.extend([*kept, onnx.helper.make_attribute("pads", pads)])
    onnx.save(model, str(path))
    reseal(directory)


def onnx_transposed_kernel(directory: Path, kernel: str) -> None:
    """The Transpose that feeds `kernel` to its Conv swaps the two spatial axes too (a transposed weight)."""
    path = directory / "model.onnx"
    model = onnx.load(str(path))
    node = next(n for n in model.graph.node if n.op_type == "Transpose" and n.input[0] == kernel)
    perm = list(node.attribute[0].ints)
    node.attribute[0].ints[:] = [perm[0], perm[1], perm[3], perm[2]]
    onnx.save(model, str(path))
    reseal(directory)


def edit_module(bytecode: bytes, edit) -> bytes:
    """A portable StableHLO artifact with its text passed through `edit` (text -> text), re-serialized for the
    same StableHLO version."""
    from jax.extend import mlir as jmlir
    from jax.extend.mlir.dialects import stablehlo as jhlo

    from multiexport.exporting.stablehlo import ir_context, jax_stablehlo_versions

    with ir_context() as ctx:
        text = jmlir.deserialize_portable_artifact(bytecode, ctx).operation.get_asm(enable_debug_info=True)
    changed = edit(text)
    assert changed != text, "the edit changed nothing"
    return bytes(jhlo.serialize_portable_artifact_str(changed, jax_stablehlo_versions()["stablehlo_export_target"]))


def first_conv_padding(text: str) -> str:
    """The first convolution pads [[0, 2], [0, 2]] instead of [[1, 1], [1, 1]] (a wrong padding rule)."""
    return text.replace("pad = [[1, 1], [1, 1]]", "pad = [[0, 2], [0, 2]]", 1)


def round_after_first_conv(text: str) -> str:
    """A rounding to integers inserted after the first convolution (an integer rounding a pass left in)."""
    found = re.search(r"^(\s*)(%[\w#]+) = stablehlo\.convolution(.*?): \(.*?\) -> (tensor<[^>]+>)(.*)$", text, re.M)
    assert found, "no convolution"
    indent, name, _, result, _ = found.groups()
    raw = f"%unrounded_{name[1:]}"
    line = found.group(0).replace(f"{name} = ", f"{raw} = ", 1)
    return text.replace(found.group(0), f"{line}\n{indent}{name} = stablehlo.round_nearest_even {raw} : {result}", 1)


def iree_module(directory: Path, edit) -> None:
    """Edit the StableHLO the IREE artifact ships and re-compile its .vmfb with the artifact's own flags."""
    from multiexport.backends.iree.compile import compile_vmfb

    manifest = Manifest.read(directory)
    source = manifest.path(directory, "stablehlo_bytecode")
    changed = edit_module(source.read_bytes(), edit)
    source.write_bytes(changed)
    facts = manifest.format
    vmfb = compile_vmfb(changed, facts["target_backends"], facts["compile_flags"])
    manifest.path(directory, "module").write_bytes(vmfb)
    reseal(directory)


def xla_module(directory: Path, edit) -> None:
    """Edit the module inside the XLA artifact's serialized Exported (what its runner compiles) and model.mlirbc."""
    from jax import export

    manifest = Manifest.read(directory)
    path = manifest.path(directory, "exported")
    exported = export.deserialize(bytearray(path.read_bytes()))
    changed = edit_module(bytes(exported.mlir_module_serialized), edit)
    path.write_bytes(bytes(dataclasses.replace(exported, mlir_module_serialized=changed).serialize()))
    manifest.path(directory, "stablehlo_bytecode").write_bytes(changed)
    reseal(directory)
