"""Pairing a jax2onnx graph's tensors with the reference's StableHLO ops, for `multiexport locate`.

jax2onnx converts the jaxpr, not the StableHLO module, and it traces with its plugins (a flax `nn.Conv` is one
`linen.conv` equation, a `jax.nn.relu` one equation), so its equations are coarser than the module's ops. The
ONNX backend records at conversion time which shipped tensor holds each equation's output, with the equation's
source frames (`backends/onnx/equations.py`: the table in the model's metadata_props). An equation's output is
the value of one op of the module lowered from the same source: same user line, same shape and dtype, computed
from the same input leaves, under the equation's name stack (the ops of `Stack/layer_3` are named under it: that
is what tells repeated layers apart, their lines and shapes being their twins'). Those five facts form a *key*;
a tensor and an op are paired only when the key holds as many recorded tensors as ops, and either one of each
or a single chain of dependencies on both sides (a converter cannot reorder a chain, so the k-th of one is the
k-th of the other). Anything else, several parallel values of one key, or counts that differ (an equation
holding an op's value the module has as several ops, a module op no equation outputs), is "cannot map", per op,
with the reason, unless names and data flow settle it (`_by_scope`: jax.jit names each op by its equation's
name stack and primitive, a flax module or jitted call by a scope of its own; a tensor left one candidate op by
names and by the dependencies of the pairs already made is paired, one left several is not).

Every pairing is then checked against both graphs: a recorded tensor reads another pair's tensor (through any
number of nodes) exactly when that pair's op feeds the op. Contradicting pairs are dropped, the most
contradicted first. These rules import nothing heavy: OpenVINO's hook uses them on the same table.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from .dim_size import recorded_size
from .instrument import installed_file
from .intermediates import IntermediatesRequest, Site

EQUATION_TABLE_KEY = "multiexport.locate.jax2onnx"
EQUATION_TABLE_VERSION = 1


@dataclass(frozen=True)
class EquationTensor:
    """Where a site's value is in a jax2onnx graph.

    name: the tensor. to_jax: the permutation taking the tensor to the site's layout (np.transpose(value,
    to_jax)), None when it is in the site's layout already. note: what the converter made of it (the equation
    and its primitive), shown with the site's finding.
    """

    name: str
    to_jax: tuple[int, ...] | None
    note: str


@dataclass(frozen=True)
class _Entry:
    index: int
    tensor: str
    to_jax: tuple[int, ...] | None
    shape: tuple[int, ...]
    dtype: str
    primitive: str
    line: str
    deps: frozenset[str]
    near: tuple[int, ...]
    scope: str  # name stack and primitive (`block4a_bn/mul`): what the op jax.jit lowers it to is named
    stack: str  # the equation's name stack (`Stack/layer_3/attention`): its ops are named under it


def user_line(frames: Sequence[str]) -> str:
    """`file.py:42` (the base name) of the innermost frame outside installed packages, "" when none: what the
    reference's sites call their location (`Site.location`, as MLIR prints a file: its base name)."""
    for frame in frames:
        file, _, line = frame.rpartition(":")
        if file and not installed_file(file):
            return f"{posixpath.basename(file.replace(chr(92), '/'))}:{line}"
    return ""


def map_equations(table_text: str, sites: Sequence[Site], leaves: Sequence[str], dims: Mapping[str, int] | None = None
                  ) -> tuple[dict[str, EquationTensor], dict[str, str]]:
    """(site key -> its tensor, site key -> why it has none) from the equation table's text. `leaves` are the
    module's argument leaves in order (`arg<i>` reads leaves[i]); `dims` the trial's size of each symbolic
    dimension (`b` -> 5), which a recorded shape's symbolic dimensions (`b`, `2*b`) are evaluated with."""
    try:
        entries = _entries(table_text, dims or {})
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        why = f"cannot map: the graph's equation table is unreadable ({exc})"
        return {}, {s.key: why for s in sites}
    site_deps, site_anc = _site_graph(sites, leaves)
    groups: dict[tuple, tuple[list[_Entry], list[Site]]] = {}
    stacks: dict[tuple, set[str]] = {}
    for e in entries:
        if e.line:
            groups.setdefault((e.line, e.shape, e.dtype, e.deps, e.stack), ([], []))[0].append(e)
            stacks.setdefault((e.line, e.shape, e.dtype, e.deps), set()).add(e.stack)
    unmapped: dict[str, str] = {}
    for s in sites:
        key = (_base(s.location), s.shape, s.dtype, site_deps[s.key])
        stack = _innermost_stack(stacks.get(key, ()), _tail(s.scope))
        if stack is not None:
            groups[key + (stack,)][1].append(s)
        else:
            unmapped[s.key] = ("cannot map: no equation jax2onnx converted outputs a value of this line, shape and "
                               "inputs (the converter computes it inside a larger equation, or folded it)")
    entry_anc = _entry_ancestors(entries)
    pairs: list[tuple[_Entry, Site]] = []
    unsettled: list[tuple[tuple, list[_Entry], list[Site]]] = []
    for key, (es, ss) in groups.items():
        if not ss:
            continue
        ordered = _chain(es, entry_anc) if len(es) > 1 else es
        chain_sites = len(ss) == 1 or all(site_anc[b.key] >> _bit(a) & 1 for a, b in zip(ss, ss[1:]))
        if len(es) == len(ss) and ordered is not None and chain_sites:
            pairs.extend(zip(ordered, ss))
        else:
            unsettled.append((key, es, ss))
    named = _by_scope(unsettled, sites, pairs, entry_anc, site_anc)
    pairs.extend(named)
    named_keys = {p[1].key for p in named}
    for (line, shape, *_), es, ss in unsettled:
        why = (f"cannot map: {len(es)} jax2onnx equation outputs and {len(ss)} ops share line {line}, shape "
               f"{list(shape)}, inputs and name stack" + ("" if len(es) != len(ss) else ", not one chain of dependencies")
               + (", and this op's name stack and primitive are not one equation's"
                  if any(s.key in named_keys for s in ss) else ""))
        unmapped.update({s.key: why for s in ss if s.key not in named_keys})
    pairs = _consistent(pairs, entry_anc, sorted(sites, key=lambda s: (s.index, s.result)), unmapped)
    found = {s.key: EquationTensor(e.tensor, e.to_jax,
                                   f"ONNX tensor {e.tensor} holds this value: the output of jax2onnx's {e.primitive} "
                                   f"equation at {e.line}" + (f", transposed by {list(e.to_jax)} to this op's layout" if e.to_jax else ""))
             for e, s in pairs}
    _broadcasts(sites, found, unmapped)
    return found, unmapped


def _broadcasts(sites: Sequence[Site], found: dict[str, EquationTensor], unmapped: dict[str, str]) -> None:
    """A broadcast_in_dim of a mapped op to a shape of its rank (each dimension kept or grown from 1) is that
    op's tensor read by numpy broadcasting, as locate reads every value: jax2onnx folds such broadcasts into
    the op that uses them, and an op replayed on the artifact's inputs needs the artifact's value there, not the
    reference's (a gate broadcast over a feature map, within tolerance of the reference, multiplied by a large
    activation)."""
    shapes = {s.key: s.shape for s in sites}
    for s in sorted(sites, key=lambda s: (s.index, s.result)):
        if s.op != "stablehlo.broadcast_in_dim" or s.key in found or len(s.operands) != 1:
            continue
        o = s.operands[0]
        if o in found and _broadcastable(shapes.get(o), s.shape):
            t = found[o]
            found[s.key] = EquationTensor(t.name, t.to_jax, f"{t.note}; broadcast to this op's shape (op {o}'s value)")
            unmapped.pop(s.key, None)


def _broadcastable(source: tuple[int, ...] | None, shape: tuple[int, ...]) -> bool:
    return source is not None and len(source) == len(shape) and all(a in (1, b) for a, b in zip(source, shape))


def misshapen(values: Mapping[str, object], sites: Sequence[Site], keys: Iterable[str]) -> dict[str, str]:
    """Of `keys` (sites mapped through the equation table), those whose value, read in the site's layout, does not
    have the site's shape, each with why: the table's layout did not hold for this file, so the tensor is not
    compared (a shape mismatch would read as a divergence)."""
    by_key = {s.key: s for s in sites}
    out = {}
    for key in keys:
        if key in by_key and by_key[key].op == "stablehlo.broadcast_in_dim" and key in values \
                and _broadcastable(tuple(getattr(values[key], "shape", ())), by_key[key].shape):
            continue  # a broadcast read from its operand's tensor (`_broadcasts`)
        if key in values and key in by_key and tuple(getattr(values[key], "shape", ())) != by_key[key].shape:
            out[key] = (f"cannot map: the recorded tensor has shape {list(getattr(values[key], 'shape', ()))} in this "
                        f"op's layout, the op {list(by_key[key].shape)}")
    return out


def feed_dims(request: IntermediatesRequest) -> dict[str, int]:
    """The trial's size of each symbolic dimension (`b` -> 5), read from the input leaves that carry one."""
    found: dict[str, int] = {}
    for leaf in request.manifest.inputs:
        if leaf.name in request.feed:
            for dim, size in zip(leaf.shape, getattr(request.feed[leaf.name], "shape", ())):
                if isinstance(dim, str):
                    found.setdefault(dim, int(size))
    return found


# jax.numpy functions jax2onnx converts as one equation of its own name, and the one lax primitive jax.jit lowers
# them to (operands broadcast first: a broadcast holds other inputs, so it is not of the same key).
_NUMPY_PRIMITIVE = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
                    "maximum": "max", "minimum": "min", "negative": "neg", "exp": "exp", "tanh": "tanh",
                    "sqrt": "sqrt", "log": "log", "abs": "abs"}


def _by_scope(groups: Sequence[tuple[tuple, list[_Entry], list[Site]]], sites: Sequence[Site],
              seeds: Sequence[tuple[_Entry, Site]], entry_anc: dict[int, int], site_anc: dict[str, int]
              ) -> list[tuple[_Entry, Site]]:
    """Within the keys that counts do not settle, the pairs that names and data flow settle. jax.jit names each
    op by its equation's name stack and primitive (`jit(f)/block4a_bn/mul`): a tensor whose equation has that
    name stack and primitive (or is jax2onnx's `jax.numpy.add` of a plain primitive) may hold the value of the op
    of its key so named that no other op so named reads. A flax module jax2onnx converts as one equation
    (`linen.dense` at `Stack/layer_0`) is a scope of its own in the module (`Stack/layer_0/intermediate/...`), a
    jitted library function (`jax.nn.silu`, `jnp.einsum`) a call (`.../jit(silu)`, `.../...qhd,...khd->...hqk`):
    its value may be the one op of its key that is that scope's only exit (nothing else in the scope reads it).
    Those are each tensor's candidates. Then data flow decides among them: a pair (tensor t, op o) leaves another
    tensor only the ops that o depends on exactly when t depends on it, and o depends on exactly when it depends
    on t (`seeds`, the pairs counts settled, count too); a tensor left one candidate no other tensor is left only
    with is paired, and so on. A tensor left several candidates pairs nothing."""
    exits = _scope_exits(sites)
    cand: dict[int, set[str]] = {}
    by_index: dict[int, _Entry] = {}
    for _, es, ss in groups:
        for e in es:
            by_index[e.index] = e
            cand[e.index] = {s.key for s in ss if _names(e, s, exits)}
    site_of = {s.key: s for s in sites}
    used = {s.key for _, s in seeds}
    out: list[tuple[_Entry, Site]] = []
    queue = [(e.index, s.key) for e, s in seeds]
    while True:
        for f, t in queue:
            bit_t = _bit(site_of[t])
            for i, c in cand.items():
                after, before = entry_anc[f] >> i & 1, entry_anc[i] >> f & 1
                cand[i] = {k for k in c - used if (site_anc[t] >> _bit(site_of[k]) & 1) == after
                           and (site_anc[k] >> bit_t & 1) == before}
        only = [(i, next(iter(c))) for i, c in cand.items() if len(c) == 1]
        claims: dict[str, int] = {}
        for _, k in only:
            claims[k] = claims.get(k, 0) + 1
        queue = [(i, k) for i, k in only if claims[k] == 1]
        if not queue:
            return out
        for i, k in queue:
            out.append((by_index[i], site_of[k]))
            used.add(k)
            del cand[i]


def _names(e: _Entry, s: Site, exits: Mapping[str, str]) -> bool:
    """Whether op `s` may hold `e`'s value by names (see `_by_scope`)."""
    scope = _tail(s.scope)
    name = _scope_name(e)
    if name and not name.endswith(")"):  # a plain primitive: the op so named that no other so named reads
        return scope == name and exits.get(f"{scope}#{s.key}") == s.key
    inner = scope[len(e.stack) + 1:] if e.stack else scope
    if (e.stack and not scope.startswith(e.stack + "/")) or not inner:
        return False
    call = inner.partition("/")[0]
    if exits.get(f"{e.stack}/{call}" if e.stack else call) != s.key:
        return False
    library, _, function = e.primitive.rpartition(".")
    if library == "linen":  # a flax module: a scope of its own, named by the module, its ops named under it
        return "/" in inner and call.replace("_", "a").replace("-", "a").isalnum()
    if e.primitive == "jax.numpy.einsum":
        return "->" in call
    return library in ("jax.nn", "jax.numpy") and call in (f"jit({function})", f"jit(_{function})")


def _scope_exits(sites: Sequence[Site]) -> dict[str, str]:
    """name stack -> the key of the one op under it that nothing else under it reads (absent when there are
    several); for ops of one full name, `name#key` -> key when no other op of that name reads that op."""
    members: dict[str, list[Site]] = {}
    for s in sites:
        parts = _tail(s.scope).split("/")
        for i in range(1, len(parts) + 1):  # a call's ops are named by the call (`act/jit(silu)`)
            members.setdefault("/".join(parts[:i]), []).append(s)
        members.setdefault("/".join(parts) + "#", []).append(s)
    out: dict[str, str] = {}
    for scope, ss in members.items():
        read = {o for s in ss for o in s.operands}
        last = [s.key for s in ss if s.key not in read]
        if scope.endswith("#"):
            out.update({scope + k: k for k in last})
        elif len(last) == 1:
            out[scope] = last[0]
    return out


def _tail(scope: str) -> str:
    """A site's name stack without jax.jit's outer `jit(f)/`: what jax2onnx's name stacks start from."""
    head, _, rest = scope.partition("/")
    return rest if head.startswith("jit(") and rest else scope


def _innermost_stack(stacks: Iterable[str], scope: str) -> str | None:
    """Of the equations' name stacks, the longest that `scope` (an op's) is under, None when none is."""
    under = [st for st in stacks if not st or scope.startswith(st + "/")]
    return max(under, key=len) if under else None


def _scope_name(e: _Entry) -> str:
    """The name jax.jit gives the op holding `e`'s value (see `_by_scope`), "" when it has none to go by."""
    stack, _, primitive = e.scope.rpartition("/")
    prefix = f"{stack}/" if stack else ""
    library, _, function = primitive.rpartition(".")
    if not library:
        return e.scope
    if library == "jax.numpy" and function in _NUMPY_PRIMITIVE:
        return prefix + _NUMPY_PRIMITIVE[function]
    if library in ("jax.nn", "jax.numpy") and function.isidentifier():
        return f"{prefix}jit({function})"
    return ""


def _base(location: str) -> str:
    file, _, line = location.rpartition(":")
    return f"{posixpath.basename(file)}:{line}" if file else ""


def _bit(site: Site) -> int:
    return site.index * 8 + site.result


def _entries(text: str, dims: Mapping[str, int]) -> list[_Entry]:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != EQUATION_TABLE_VERSION:
        raise ValueError(f"not a version-{EQUATION_TABLE_VERSION} equation table")
    inputs = [str(n) for n in data["inputs"]]
    out = []
    for i, (tensor, to_jax, shape, dtype, primitive, stack, frames, mask, near) in enumerate(data["entries"]):
        bits = int(mask, 16)
        out.append(_Entry(i, str(tensor), tuple(int(p) for p in to_jax) if to_jax is not None else None,
                          tuple(recorded_size(d, dims) for d in shape), str(dtype), str(primitive),
                          user_line([str(f) for f in frames]),
                          frozenset(n for j, n in enumerate(inputs) if bits >> j & 1), tuple(int(n) for n in near),
                          f"{stack}/{primitive}" if stack else str(primitive), str(stack)))
    return out


def _site_graph(sites: Sequence[Site], leaves: Sequence[str]) -> tuple[dict[str, frozenset[str]], dict[str, int]]:
    """(site key -> the input leaves it depends on, site key -> bit mask of its ancestor sites, by `_bit`)."""
    deps: dict[str, frozenset[str]] = {}
    anc: dict[str, int] = {}
    for s in sorted(sites, key=lambda s: (s.index, s.result)):
        d: set[str] = set()
        a = 0
        for o in s.operands:
            if o.startswith("arg") and o[3:].isdigit() and int(o[3:]) < len(leaves):
                d.add(leaves[int(o[3:])])
            elif o in deps:
                d |= deps[o]
                a |= anc[o] | (1 << _bit_key(o))
        deps[s.key], anc[s.key] = frozenset(d), a
    return deps, anc


def _bit_key(key: str) -> int:
    index, _, result = key[2:].partition(".")
    return int(index) * 8 + (int(result) if result else 0)


def _entry_ancestors(entries: Sequence[_Entry]) -> dict[int, int]:
    """entry index -> bit mask of the entries it is computed from (through any number of nodes)."""
    anc: dict[int, int] = {}
    for e in entries:  # recorded in lowering order: a parent is recorded before its child
        mask = 0
        for p in e.near:
            mask |= (1 << p) | anc.get(p, 0)
        anc[e.index] = mask
    return anc


def _chain(entries: Sequence[_Entry], anc: dict[int, int]) -> list[_Entry] | None:
    """The entries ordered along one chain of dependencies, or None when they are not one chain."""
    ordered = sorted(entries, key=lambda e: bin(anc[e.index]).count("1"))
    for a, b in zip(ordered, ordered[1:]):
        if not anc[b.index] >> a.index & 1:
            return None
    return ordered


def _consistent(pairs: list[tuple[_Entry, Site]], entry_anc: dict[int, int], sites: Sequence[Site],
                unmapped: dict[str, str]) -> list[tuple[_Entry, Site]]:
    """The pairs whose dependencies agree in both graphs: pair j's tensor feeds pair i's (through any nodes)
    exactly when j's op feeds i's. Contradicted pairs are dropped, the most contradicted first, each with why.
    Both sides' ancestors are bit masks over the entries' indices, so one round is one pass over the sites."""
    live = list(pairs)
    while live:
        entry_of = {s.key: e.index for e, s in live}
        mask = 0
        for e, _ in live:
            mask |= 1 << e.index
        through: dict[str, int] = {}
        for s in sites:  # data-flow order: an operand's mask is known before its reader's
            m = 0
            for o in s.operands:
                if o in through:
                    m |= through[o] | (1 << entry_of[o] if o in entry_of else 0)
            through[s.key] = m
        count = [bin((entry_anc[e.index] ^ through[s.key]) & mask).count("1") for e, s in live]
        worst = max(range(len(live)), key=lambda i: (count[i], i))
        if count[worst] == 0:
            break
        e, s = live.pop(worst)
        unmapped[s.key] = (f"cannot map: ONNX tensor {e.tensor} (jax2onnx's {e.primitive} at {e.line}) matched this "
                           f"op by line, shape and inputs, but its dependencies contradict {count[worst]} other "
                           "pairing(s) in the two graphs")
    return live


def equations_hint(option: str) -> str:
    """What a user whose jax2onnx graph leaves ops unmapped can do (appended to a hook's `how`): the StableHLO
    route's converter records every op. `option`: the backend option naming the route (`onnx.route`)."""
    return (f"; jax2onnx's graph holds only its equations' values (a layer's inner ops are inside them): "
            f"--backend-option {option}=stablehlo exports a model whose every op maps")
