"""A target an export worker has not built: the compare's signature and StableHLO modules, read from disk.

An export worker builds the target to export it: it imports the user's module (keras-hub imports TensorFlow:
~3.5 CPU s) and runs the factory, although most exports need only `jax.export`'s module of the signature's
flat function, which the compare (that built the target already) can hand over. Such a worker exports with
a `HandedFunction` in place of the function and a signature read back from the compare's (`read_handed`): an
export that asks for a module the compare exported gets it (`HandedFunction.module`), and anything else the
function is needed for (a trace by jax2onnx, weights to lift, a module at fixed sizes) raises `NeedsTarget`,
on which the worker builds the target and exports that artifact again from the start. The handed module is
the compare's own `jax.export` of the same target, which is what the fingerprint check of a built target
compares against anyway: the two ways make the same artifact, one without the build.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TypeGuard

import numpy as np

from ..dtypes import parse_dtype
from ..files.npz import load_npz, save_npz
from .naming import AliasCollision
from .signature import Leaf, NeedsTarget, Signature

SIGNATURE_FILE = "signature.json"
EXAMPLES_FILE = "examples.npz"
MODULES_FILE = "modules.json"
CPU = ("cpu",)  # the platforms of every module handed

__all__ = ["CPU", "EXAMPLES_FILE", "MODULES_FILE", "SIGNATURE_FILE", "Handed", "HandedFunction", "ModuleKey", "NeedsTarget",
           "is_handed", "read_handed", "write_signature"]


@dataclass(frozen=True)
class ModuleKey:
    """What one `export_module` call asks for, in the exporting process's terms.

    keep_unused: jax.jit's keep_unused. platforms: the lowering platforms, resolved (None is the process's
    default export platform). donate: whether the module aliases the leaves the target donates (only a target
    that donates differs).
    """

    keep_unused: bool
    platforms: tuple[str, ...]
    donate: bool

    def to_json(self) -> dict[str, Any]:
        return {"keep_unused": self.keep_unused, "platforms": list(self.platforms), "donate": self.donate}


@dataclass(frozen=True, eq=False)
class HandedFunction:
    """Stands for the target's function in a worker that has not built it (see the module's docstring).

    modules: serialized `jax.export.Exported` per ModuleKey, by file in `directory`.
    donates: whether the target donates any leaf (when not, a donating export asks for the plain module).
    name: the target's name, for messages.
    """

    directory: Path
    modules: dict[ModuleKey, str]
    donates: bool
    name: str
    leaves: tuple[tuple[str, tuple[Any, ...], str], ...] = ()
    _loaded: dict[str, Any] = field(default_factory=dict, repr=False)

    def module(self, keep_unused: bool, platforms: Sequence[str] | None, donate: bool,
               signature: Signature | None = None):
        """The compare's `jax.export.Exported` for these arguments, else NeedsTarget. signature: the one the
        export asks for, which must be the handed one (`leaves`: each input and output leaf's name, shape and
        dtype): one fixed at sizes by the static-size fallback is another function's module."""
        from jax import export

        if signature is not None and _leaves(signature) != self.leaves:
            raise NeedsTarget(f"a module of '{self.name}' for other leaves or shapes than the handed ones")
        resolved = tuple(platforms) if platforms else (export.default_export_platform(),)
        key = ModuleKey(bool(keep_unused), resolved, bool(donate and self.donates))
        file = self.modules.get(key)
        if file is None:
            raise NeedsTarget(f"no module of '{self.name}' was handed for {key}")
        if file not in self._loaded:
            self._loaded[file] = export.deserialize(bytearray((self.directory / file).read_bytes()))
        return self._loaded[file]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NeedsTarget(f"the function of '{self.name}' is called")

    def __getattr__(self, name: str) -> Any:
        # Anything that inspects the function (jax.jit's `trace`, `__wrapped__`, a closure) needs the real one
        raise NeedsTarget(f"the function of '{self.name}' is inspected ({name})")


def is_handed(fn: Any) -> TypeGuard[HandedFunction]:
    """Whether `fn` stands for a target this process has not built."""
    return isinstance(fn, HandedFunction)


@dataclass(frozen=True)
class Handed:
    """A handed target: its signature (no pytree: `flat_function` raises NeedsTarget), its stand-in function,
    and the compare's fingerprint of it."""

    signature: Signature
    fn: HandedFunction
    fingerprint: str


def write_signature(signature: Signature, directory: Path) -> None:
    """The signature as `read_handed` reads it back: its leaves and facts (JSON), its example values (.npz)."""
    data = {
        "name": signature.name,
        "inputs": [leaf.to_json() for leaf in signature.inputs],
        "outputs": [leaf.to_json() for leaf in signature.outputs],
        "collisions": [{"base": c.base, "names": list(c.names), "aliases": list(c.aliases)}
                       for c in signature.collisions],
        "warnings": list(signature.warnings),
        "symbolic_dims": list(signature.symbolic_dims),
        "weights": dict(signature.weights),
        "x64": signature.x64,
        "examples": [example is not None for example in signature.examples],
    }
    (directory / SIGNATURE_FILE).write_text(json.dumps(data))
    save_npz(directory / EXAMPLES_FILE, {f"{i}": np.asarray(example) for i, example in enumerate(signature.examples)
                                         if example is not None})


def read_handed(directory: Path) -> Handed:
    """The handed target the compare wrote in `directory` (`exporting.handoff.write_handoff`). Anything
    missing or unreadable raises (the worker then builds the target, as without a handoff)."""
    directory = Path(directory)
    data = json.loads((directory / SIGNATURE_FILE).read_text())
    modules = json.loads((directory / MODULES_FILE).read_text())
    examples_present = [bool(x) for x in data["examples"]]
    stored = load_npz(directory / EXAMPLES_FILE, "The compare's example values") if any(examples_present) else {}
    inputs = tuple(_leaf(x) for x in data["inputs"])
    examples = tuple(stored[f"{i}"] if present else None for i, present in enumerate(examples_present))
    if len(examples) != len(inputs):
        raise ValueError(f"{len(examples)} examples for {len(inputs)} input leaves")
    outputs = tuple(_leaf(x) for x in data["outputs"])
    fn = HandedFunction(directory, {ModuleKey(bool(m["keep_unused"]), tuple(m["platforms"]), bool(m["donate"])):
                                    str(m["file"]) for m in modules["modules"]},
                        bool(modules["donates"]), str(data["name"]), _leaves_of(inputs, outputs))
    signature = Signature(
        name=str(data["name"]), inputs=inputs, outputs=outputs,
        collisions=tuple(AliasCollision(c["base"], tuple(c["names"]), tuple(c["aliases"])) for c in data["collisions"]),
        warnings=tuple(data["warnings"]), symbolic_dims=tuple(data["symbolic_dims"]), examples=examples,
        specs=_specs(inputs), weights=dict(data["weights"]), x64=bool(data["x64"]), _fn=fn)
    return Handed(signature, fn, str(modules["fingerprint"]))


def _leaves(signature: Signature) -> tuple[tuple[str, tuple[Any, ...], str], ...]:
    return _leaves_of(signature.inputs, signature.outputs)


def _leaves_of(inputs: Sequence[Leaf], outputs: Sequence[Leaf]) -> tuple[tuple[str, tuple[Any, ...], str], ...]:
    return tuple((leaf.name, tuple(leaf.shape), leaf.dtype) for leaf in (*inputs, *outputs))


def _leaf(data: dict[str, Any]) -> Leaf:
    return Leaf(str(data["name"]), str(data["alias"]), tuple(data["shape"]), str(data["dtype"]),
                bool(data.get("weak_type", False)), data.get("key_impl"))


def _specs(inputs: Sequence[Leaf]) -> tuple[Any, ...]:
    """Each input leaf's ShapeDtypeStruct, symbolic dimensions in one scope (as `build_signature` makes them)."""
    import jax
    from jax import export

    scope = export.SymbolicScope()
    specs = []
    for leaf in inputs:
        shape: Any = leaf.shape
        if leaf.is_symbolic:
            shape = export.symbolic_shape(", ".join(str(d) for d in leaf.shape), scope=scope)
        specs.append(jax.ShapeDtypeStruct(shape, parse_dtype(leaf.dtype), weak_type=leaf.weak_type))
    return tuple(specs)
