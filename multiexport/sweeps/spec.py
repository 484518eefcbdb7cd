"""A sweep's spec: a TOML file listing targets, each compared in a `multiexport compare` of its own.

    [sweep]
    name = "nightly"                       # default: the file's stem
    backends = ["xla", "onnx"]             # default: "all"
    args = ["--no-bench", "--trials", "2"] # compare flags every target gets
    timeout = 3600                         # seconds for one whole compare (default 3600)
    root = ".."                            # where targets resolve and compares run (default: the spec's folder)

    [[target]]
    target = "models/resnet.py:build"      # file.py:attr or package.module:attr; globs in the path or attr
    name = "resnet"                        # default: the attr (or the file's stem); one directory per name
    tags = ["conv", "quick"]               # for --only
    backends = ["xla", "litert"]           # replaces the sweep's
    args = ["--batch-sizes", "1,8"]        # appended to the sweep's
    resources = { cpus = 2, gpus = 1, memory_gib = 8, arch = "aarch64" }

Every field is checked when the spec is read, before anything runs: an unknown key, a backend that is
not registered, or a compare flag `multiexport compare` would refuse is one line naming the target.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import hashlib
import importlib
import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import UsageError
from ..exporting.registry import names
from ..files.bounded import nesting, read_bytes
from .names import valid_name

DEFAULT_TIMEOUT = 3600.0
SPEC_LIMIT = 64 << 20  # a spec of 20 000 targets is ~2 MiB
SPEC_DEPTH = 16        # [[target]].resources is 3 deep
_MAX_NUMBER = 1e12     # seconds, cores, GiB: past this no figure is real (and a 4000-digit int is no float)
# Flags the sweep itself sets per task, or that make no sense inside one (a task's gate is the sweep's).
_OWNED_FLAGS = ("--out", "--out-dir", "--backends", "--baseline", "--junit")
_GLOB = set("*?[")
# compare's verdict on a task's flags, by (backends, args): the same for every target that shares them
_Verdicts = dict[tuple[tuple[str, ...], tuple[str, ...]], "str | None"]


@dataclass(frozen=True)
class Resources:
    """What one compare needs from the machine that runs it (the Ray executor schedules by it).

    cpus: cores (default 1). gpus: GPUs (0: none). memory_gib: memory to reserve (0: no reservation).
    arch: the machine architecture (`uname -m`, e.g. x86_64, aarch64), None for any; on Ray a node offers
    it as the custom resource `arch:NAME`.
    """

    cpus: float = 1.0
    gpus: float = 0.0
    memory_gib: float = 0.0
    arch: str | None = None


@dataclass(frozen=True)
class SweepTask:
    """One target of a sweep, compared in a process of its own.

    name: its directory under OUT/rows and its key in every table. target: the TARGET string compare loads.
    backends: the backends to compare (empty: all registered). args: the other compare flags, in order.
    tags: labels for --only. resources: what it needs from a machine. timeout: seconds for the whole compare.
    """

    name: str
    target: str
    backends: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    resources: Resources = field(default_factory=Resources)
    timeout: float = DEFAULT_TIMEOUT

    def compare_args(self, out_dir: Path) -> list[str]:
        """The `multiexport compare` arguments (after the program) that run this task into `out_dir`."""
        return ["compare", self.target, "--out-dir", str(out_dir), "--backends",
                ",".join(self.backends) if self.backends else "all", *self.args]

    def fingerprint(self) -> str:
        """What a finished row was computed from: a resumed sweep re-uses a row only if this is unchanged."""
        text = "\x00".join([self.target, *self.backends, "|", *self.args, "|", repr(self.resources), repr(self.timeout)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, validated spec.

    path: the file it was read from; directory: where its relative target paths and modules resolve, and
    where each compare runs (`[sweep].root`, relative to the spec; default: the spec's folder). name: the sweep's name. tasks: every target, globs expanded, in the file's order.
    sha256: of the file's bytes.
    """

    path: Path
    directory: Path
    name: str
    tasks: tuple[SweepTask, ...]
    sha256: str


def load_spec(path: str | Path, check_args: Callable[[Sequence[str]], str | None] | None = None) -> SweepSpec:
    """Read and validate a sweep spec.

    Args:
        path: the TOML file.
        check_args: given a task's compare arguments, why `multiexport compare` would refuse them (None: it
            would not). The command line passes its own parser's verdict, so a typo in a flag is refused
            before the first compare starts; without it a bad flag fails its rows one by one.
    Returns:
        the spec, every target expanded to tasks.
    Raises:
        UsageError: one line naming the file and the target at fault.
    """
    import tomllib


    path = Path(path)
    # bounded: a FIFO or device refused without blocking, at most SPEC_LIMIT bytes
    data = read_bytes(path, "Sweep spec", SPEC_LIMIT, UsageError, "expected a TOML file")
    where = f"Sweep spec '{path}'"
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{where} | not TOML ({exc}), expected a TOML file") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise UsageError(f"{where} | nested too deep for a TOML reader, expected a spec nested at most "
                         f"{SPEC_DEPTH} levels") from None
    except ValueError as exc:  # an integer of thousands of digits (Python's int conversion limit)
        raise UsageError(f"{where} | holds a value TOML cannot read here ({exc}), expected a sweep spec") from None
    if nesting(doc, SPEC_DEPTH) > SPEC_DEPTH:
        raise UsageError(f"{where} | nested deeper than {SPEC_DEPTH} levels, expected a sweep spec (a few deep)")
    _keys(doc, {"sweep", "target"}, where)
    sweep = doc.get("sweep", {})
    _table(sweep, f"{where} [sweep]")
    _keys(sweep, {"name", "backends", "args", "timeout", "root"}, f"{where} [sweep]")
    name = _string(sweep.get("name", path.stem), f"{where} [sweep].name")
    backends = _backends(sweep.get("backends", "all"), f"{where} [sweep].backends")
    args = _strings(sweep.get("args", []), f"{where} [sweep].args")
    timeout = _positive(sweep.get("timeout", DEFAULT_TIMEOUT), f"{where} [sweep].timeout")
    targets = doc.get("target", [])
    if not isinstance(targets, list) or not targets:
        raise UsageError(f"{where} | no [[target]] tables, expected at least one target")
    directory = (path.resolve().parent / _string(sweep.get("root", "."), f"{where} [sweep].root")).resolve()
    if not directory.is_dir():
        raise UsageError(f"{where} [sweep].root | {directory} is not a directory, expected the folder targets "
                         "resolve against (relative to the spec)")
    tasks: list[SweepTask] = []
    for i, entry in enumerate(targets):
        tasks += _expand(entry, f"{where} target {i + 1}", directory, backends, args, timeout)
    seen: dict[str, str] = {}
    for task in tasks:
        if task.name in seen:
            raise UsageError(f"{where} | name {task.name!r} is given to both {seen[task.name]!r} and {task.target!r}, "
                             "expected one name per target (set `name`)")
        seen[task.name] = task.target
    verdicts: _Verdicts = {}
    for task in tasks:
        check_compare_args(task, where, check_args, verdicts)
    return SweepSpec(path, directory, name, tuple(tasks), hashlib.sha256(data).hexdigest())


def select(tasks: Sequence[SweepTask], only: str = "", shard: str = "") -> list[SweepTask]:
    """The tasks a run takes: those named or tagged by `only` (comma-separated; empty: all), then shard
    `i/n`'s share of them (every n-th, starting at the i-th, in the spec's order: n shards cover each once)."""
    chosen = list(tasks)
    if only:
        wanted = [w for w in only.split(",") if w]
        known = {t.name for t in tasks} | {tag for t in tasks for tag in t.tags}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise UsageError(f"Option '--only' | got {', '.join(unknown)}, expected target names or tags of the spec "
                             f"({', '.join(sorted(known))})")
        chosen = [t for t in tasks if t.name in wanted or set(t.tags) & set(wanted)]
    if shard:
        index, count = parse_shard(shard)
        chosen = chosen[index - 1::count]
    return chosen


def parse_shard(text: str) -> tuple[int, int]:
    """`i/n` as (i, n), 1 <= i <= n."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"Option '--shard' | got {text!r}, expected I/N, e.g. 2/4") from None
    if not 1 <= i <= n:
        raise UsageError(f"Option '--shard' | got {text!r}, expected 1 <= I <= N")
    return i, n


def check_compare_args(task: SweepTask, where: str, check_args: Callable[[Sequence[str]], str | None] | None = None,
                       cache: _Verdicts | None = None) -> None:
    """Refuse flags the sweep sets itself, and (with `check_args`) flags `multiexport compare` would refuse.
    cache: verdicts by (backends, args), shared over the tasks of one spec."""
    for arg in task.args:
        if arg.split("=", 1)[0] in _OWNED_FLAGS:
            raise UsageError(f"{where} target {task.name!r} | args has {arg!r}, expected it left to the sweep "
                             "(set `backends`; each row's directory and the gate are the sweep's)")
    # The TARGET cannot change how compare parses the rest (it never starts with '-'), so one parse per
    # distinct backends and args serves every target: 20 000 targets are listed in seconds, not minutes
    why = _verdict(check_args, (task.backends, task.args), {} if cache is None else cache) if check_args else None
    if why:
        raise UsageError(f"{where} target {task.name!r} | args {list(task.args)!r}: {why}, "
                         "expected flags `multiexport compare` accepts")


def _verdict(check_args: Callable[[Sequence[str]], str | None], key: tuple[tuple[str, ...], tuple[str, ...]],
             cache: _Verdicts) -> str | None:
    if key not in cache:
        probe = SweepTask(name="probe", target="probe.py:target", backends=key[0], args=key[1])
        cache[key] = check_args(probe.compare_args(Path("out")))
    return cache[key]


def _expand(entry: Any, where: str, directory: Path, backends: tuple[str, ...], args: tuple[str, ...],
            timeout: float) -> list[SweepTask]:
    _table(entry, where)
    _keys(entry, {"target", "name", "tags", "backends", "args", "resources", "timeout"}, where)
    if "target" not in entry:
        raise UsageError(f"{where} | no `target`, expected file.py:attr or package.module:attr")
    target = _string(entry["target"], f"{where}.target")
    if target.startswith("-"):  # passed to compare as its TARGET: it must never be read as a flag
        raise UsageError(f"{where}.target | got {target!r}, which starts with '-', expected file.py:attr or "
                         "package.module:attr (a path starting with '-': write ./-name.py)")
    own = SweepTask(name="-", target=target,
                    backends=_backends(entry["backends"], f"{where}.backends") if "backends" in entry else backends,
                    args=args + _strings(entry.get("args", []), f"{where}.args"),
                    tags=_strings(entry.get("tags", []), f"{where}.tags"),
                    resources=_resources(entry.get("resources", {}), f"{where}.resources"),
                    timeout=_positive(entry.get("timeout", timeout), f"{where}.timeout"))
    targets = _glob_targets(target, directory, where)
    if "name" in entry:
        if len(targets) != 1:
            raise UsageError(f"{where} | `name` given to a glob matching {len(targets)} targets, expected a name "
                             "only for a single target")
        names = [_string(entry["name"], f"{where}.name")]
    else:
        names = [_default_name(t) for t in targets]
    out = []
    for name, expanded in zip(names, targets):
        if not valid_name(name):
            raise UsageError(f"{where} | name {name!r} is not a plain file name, expected letters, digits and '_', "
                             "'.', '-' inside (not at either end), not ending in .log (set `name`)")
        out.append(dataclasses.replace(own, name=name, target=expanded))
    return out


def _glob_targets(target: str, directory: Path, where: str) -> list[str]:
    """`target` with globs expanded: in a file path against the spec's directory, in an attr against the
    module's `__all__` (importing the module, which a compare does anyway)."""
    head, sep, attr = target.rpartition(":") if ":" in target else (target, "", "")
    is_file = head.endswith(".py") or "/" in head
    heads = [head]
    if is_file and _GLOB & set(head):
        # a package's __init__.py or a private _helpers.py is no model
        found = sorted(f for f in glob.glob(head, root_dir=directory) if not Path(f).name.startswith("_"))
        if not found:
            raise UsageError(f"{where} | target {target!r} matches no file under {directory}, expected a glob that "
                             "matches at least one .py file")
        heads = found
    if not (attr and _GLOB & set(attr)):
        return [f"{h}{sep}{attr}" for h in heads]
    out = []
    for h in heads:
        names = _public_names(h, is_file, directory, where)
        matched = [n for n in names if fnmatch.fnmatchcase(n, attr)]
        if not matched:
            raise UsageError(f"{where} | target {h}:{attr} matches none of the module's __all__, expected a glob that "
                             "matches at least one name")
        out += [f"{h}:{n}" for n in matched]
    return out


def _public_names(head: str, is_file: bool, directory: Path, where: str) -> list[str]:
    try:
        if is_file:
            spec = importlib.util.spec_from_file_location(f"_multiexport_sweep_{Path(head).stem}", directory / head)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {head}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, str(directory))
            try:
                module = importlib.import_module(head)
            finally:
                sys.path.remove(str(directory))
    except Exception as exc:
        raise UsageError(f"{where} | module {head!r} could not be imported to expand its glob "
                         f"({type(exc).__name__}: {exc}), expected an importable module") from None
    names = getattr(module, "__all__", None)
    if not isinstance(names, (list, tuple)):
        raise UsageError(f"{where} | module {head!r} has no __all__, expected one to expand an attr glob against")
    return [str(n) for n in names]


def _default_name(target: str) -> str:
    head, _, attr = target.rpartition(":") if ":" in target else (target, "", "target")
    if head.endswith(".py") or "/" in head:
        stem = Path(head).stem
        return stem if attr in ("", "target") else f"{stem}.{attr}"
    return attr or head.rsplit(".", 1)[-1]


def _resources(value: Any, where: str) -> Resources:
    _table(value, where)
    _keys(value, {"cpus", "gpus", "memory_gib", "arch"}, where)
    numbers = {k: value[k] for k in ("cpus", "gpus", "memory_gib") if k in value}
    for k, v in numbers.items():
        if not _number(v) or v < 0 or 0 < v < 0.01:
            raise UsageError(f"{where}.{k} | got {_short(v)}, expected 0 or a finite number >= 0.01 (at most {_MAX_NUMBER:g})")
    arch = value.get("arch")
    if arch is not None:
        arch = _string(arch, f"{where}.arch")
    return Resources(**{k: float(v) for k, v in numbers.items()}, arch=arch)


def _backends(value: Any, where: str) -> tuple[str, ...]:
    if value == "all":
        return ()
    chosen = _strings(value, where)
    unknown = [b for b in chosen if b not in names()]
    if unknown or not chosen:
        raise UsageError(f"{where} | got {list(chosen)!r}, expected \"all\" or backends of {', '.join(names())}")
    return chosen


def _short(value: Any) -> str:
    """repr, cut short (a 4000-digit integer is not printed whole; str() of one past 4300 digits raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _MAX_NUMBER:
        return f"an integer of {int(math.log10(abs(value))) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise UsageError(f"{where} | unknown key(s) {', '.join(unknown)}, expected some of {', '.join(sorted(allowed))}")


def _table(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise UsageError(f"{where} | got {type(value).__name__}, expected a table")


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where} | got {value!r}, expected a non-empty string")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where} | got {value!r}, expected a list of strings")
    return tuple(value)


def _number(value: Any) -> bool:
    """A finite number TOML can hold that is a real figure: a huge integer is refused before float() overflows."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= _MAX_NUMBER and math.isfinite(value)


def _positive(value: Any, where: str) -> float:
    if not _number(value) or not value > 0:
        raise UsageError(f"{where} | got {_short(value)}, expected a number of seconds > 0 (at most {_MAX_NUMBER:g})")
    return float(value)
