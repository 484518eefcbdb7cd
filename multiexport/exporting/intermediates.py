"""The intermediates hook's vocabulary: what `locate` asks a backend to expose, and what the backend gives back.

`multiexport locate` pairs every result of every StableHLO op of the exported module (in data-flow order, calls
inlined) with the value the artifact computed for it. The unit is a `Site`: one result of one op, keyed
`op<index>` (or `op<index>.<result>` for an op with several results). A backend's `_intermediates_impl`
receives an `IntermediatesRequest` (the artifact, one trial's feed, the reference module's sites) and returns
`Intermediates`: a value per site key it could map, and for every other key a one-line reason why not. A site
the format cannot map is said so, never guessed: the core leaves it out of the pairing.

A backend that re-compiles its own shipped StableHLO with outputs added (XLA, IREE, a SavedModel's
XlaCallModule) instruments it with `exporting.instrument.instrument_module` and returns its values keyed by
that module's own sites, listed in `Intermediates.own_sites`: the core aligns them with the reference's by op
sequence, so a shipped module that differs (an op changed, one inserted) is still paired op by op.
These types import nothing heavy: the report side reads locate.json without JAX.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from .manifest import Manifest
    from .options import RunOptions


@dataclass(frozen=True)
class Site:
    """One result of one StableHLO op of the flattened module (`main` with every `func.call` inlined).

    key: `op<index>` for an op's only result, `op<index>.<result>` when the op has several results.
    index: the op's position in the flattened `main` (data-flow order; ops inside regions are not sites).
    result: which result of the op.
    op: the op's name (`stablehlo.convolution`).
    shape: the result's static shape.
    dtype: the result's numpy dtype name (`float32`, `bool`, `bfloat16`).
    location: the user's source line (`model.py:42`), the innermost frame of the op's location; "" if none.
    scope: the name stack of the op (`jit(f)/Conv_0/conv_general_dilated`: flax/haiku/keras module path).
    operands: the site keys this op reads (`arg<i>` for the module's argument i, a constant's key for a constant).
    frames: every source frame of the op's location, innermost first (`flax/linen/linear.py:612`, `model.py:42`).
    name: the name of the op's own location (`max` for jit(relu)'s op), what converters that name tensors after
        locations (TFLite) call it; "" if none.
    """

    key: str
    index: int
    result: int
    op: str
    shape: tuple[int, ...]
    dtype: str
    location: str = ""
    scope: str = ""
    operands: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "index": self.index, "result": self.result, "op": self.op,
                "shape": list(self.shape), "dtype": self.dtype, "location": self.location, "scope": self.scope,
                "operands": list(self.operands), "frames": list(self.frames), "name": self.name}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Site":
        return cls(key=str(data["key"]), index=int(data["index"]), result=int(data["result"]), op=str(data["op"]),
                   shape=tuple(int(d) for d in data["shape"]), dtype=str(data["dtype"]),
                   location=str(data.get("location", "")), scope=str(data.get("scope", "")),
                   operands=tuple(str(o) for o in data.get("operands", ())),
                   frames=tuple(str(f) for f in data.get("frames", ())),
                   name=str(data.get("name", "")))


def site_key(index: int, result: int, n_results: int) -> str:
    """The key of result `result` of op `index` that has `n_results` results."""
    return f"op{index}" if n_results == 1 else f"op{index}.{result}"


@dataclass(frozen=True)
class IntermediatesRequest:
    """What `locate` hands a backend's `_intermediates_impl`.

    artifact_dir: the artifact examined (the shipped one when the user gave `--artifact`).
    manifest: its manifest, read.
    feed: one trial's inputs, leaf name -> array (validated against the manifest by the core).
    sites: the reference module's sites, in data-flow order: what the core pairs.
    work_dir: a scratch directory inside locate's output directory (instrumented modules, compiled files).
    options: how to run (device, threads, trust_artifact), as for `Backend.load`.
    """

    artifact_dir: Path
    manifest: "Manifest"
    feed: Mapping[str, Any]
    sites: tuple[Site, ...]
    work_dir: Path
    options: "RunOptions"


@dataclass(frozen=True)
class Intermediates:
    """What a backend's `_intermediates_impl` returns.

    values: site key -> the artifact's value for it (numpy array of the site's shape, or one that broadcasts
        to it). Keyed by `request.sites`' keys, or by `own_sites`' keys when those are given.
    unmapped: site key -> one line saying why the format cannot give that value (`cannot map: ...`). A key in
        neither mapping counts as unmapped with a generic reason.
    how: one line saying how the values were obtained ("ONNX Runtime on the shipped model.onnx with 812
        tensors added as graph outputs", "re-compile of the shipped StableHLO with every op result returned").
    outputs: the artifact's final outputs from the same run (output leaf -> array), when the hook has them:
        locate checks them against the artifact's ordinary run.
    own_sites: the sites of the artifact's own module when `values` are keyed by them (a re-compile of the
        shipped module); None when `values` use the request's keys.
    recompiled: True when the values come from a re-compile of the shipped module with outputs added (not
        the shipped compiled file itself): the report says so.
    notes: site key -> a line shown with that site's finding (e.g. LiteRT: "the .tflite computes this in
        CONV_2D ..., fused from stablehlo.convolution (op16), stablehlo.add (op19)"), naming what the format
        did to the op; keyed like `values`.
    """

    values: Mapping[str, Any]
    unmapped: Mapping[str, str] = field(default_factory=dict)
    how: str = ""
    outputs: Mapping[str, Any] = field(default_factory=dict)
    own_sites: tuple[Site, ...] | None = None
    recompiled: bool = False
    notes: Mapping[str, str] = field(default_factory=dict)


# Where a converter that writes a graph of named tensors (multiexport's StableHLO -> ONNX route) records, in the
# file it ships (ONNX: the model's metadata_props), which tensor holds each op's result: `SiteTable`.
SITE_TABLE_KEY = "multiexport.locate.sites"
SITE_TABLE_VERSION = 1
_UNLISTED = ("stablehlo.constant",)


@dataclass
class SiteTable:
    """A converter's record, op by op of the flattened `main` (the numbering of `instrument_module`), of the
    tensor names its results got. Entry: [op index, op name, [name per result], [broadcast shape or None per
    result]] (a name with a shape holds a tensor that numpy-broadcasts to the result). Constants are counted in
    the numbering but not listed."""

    entries: list[list[Any]] = field(default_factory=list)
    count: int = 0

    def record(self, op: str, names: Sequence[str], lazy: Sequence[Sequence[int] | None]) -> None:
        if op not in _UNLISTED:
            self.entries.append([self.count, op, list(names), [list(s) if s is not None else None for s in lazy]])
        self.count += 1

    def to_text(self) -> str:
        return json.dumps({"version": SITE_TABLE_VERSION, "ops": self.count, "sites": self.entries},
                          separators=(",", ":"))


@dataclass(frozen=True)
class TensorSite:
    """Where a site's value is in a graph: the tensor `name`, and `broadcast` (the shape it stands for by
    numpy broadcasting) when the tensor is smaller than the result."""

    name: str
    broadcast: tuple[int, ...] | None = None


def map_sites(table_text: str, sites: Sequence[Site]) -> tuple[dict[str, TensorSite], dict[str, str]]:
    """(site key -> its tensor, site key -> why it has none) from a `SiteTable`'s text. A site whose op index
    holds another op in the table (the graph was converted from another module) is not mapped."""
    try:
        data = json.loads(table_text)
        if not isinstance(data, dict) or data.get("version") != SITE_TABLE_VERSION:
            raise ValueError(f"not a version-{SITE_TABLE_VERSION} site table")
        table = {int(e[0]): e for e in data["sites"]}
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        why = f"cannot map: the graph's site table is unreadable ({exc})"
        return {}, {s.key: why for s in sites}
    found: dict[str, TensorSite] = {}
    missing: dict[str, str] = {}
    for site in sites:
        entry = table.get(site.index)
        if entry is None:
            missing[site.key] = f"cannot map: the converter recorded no tensor for op {site.index}"
        elif entry[1] != site.op or site.result >= len(entry[2]):
            missing[site.key] = (f"cannot map: op {site.index} of the converted module was {entry[1]}, not {site.op} "
                                 "(the graph was converted from another module)")
        else:
            shape = entry[3][site.result]
            found[site.key] = TensorSite(str(entry[2][site.result]), tuple(shape) if shape is not None else None)
    return found, missing
