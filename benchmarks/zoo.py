"""The benchmark model zoo: each entry is a TARGET that `multiexport compare` can load by name.

Every model is built from seeded random weights (no downloads). Entries cover the cases users hit:
the seed dataclass, an MLP, a CNN, a transformer block, a dataclass with static fields + int token
indices + a mask (dict outputs), a bf16 model and a symbolic batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ZooModel:
    name: str
    spec: str  # TARGET string
    what: str
    val_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    batch_sizes: tuple[int, ...] = ()
    quick: bool = False  # part of the CI-sized run


ZOO: tuple[ZooModel, ...] = (
    ZooModel("seed", "multiexport.examples:seed", "flax.struct dataclass, one unused leaf", quick=True),
    ZooModel("mlp", "multiexport.examples:mlp", "flax.linen MLP, fn(params, batch)", quick=True),
    ZooModel("cnn", "multiexport.examples:cnn", "flax.linen CNN, 2 convs + mean pool + dense"),
    ZooModel("transformer", "multiexport.examples:transformer", "pre-norm attention + MLP block"),
    ZooModel("embedding", "multiexport.examples:embedding",
             "dataclass with a static field, int32 token ids, bool mask, dict outputs",
             val_ranges={"batch.tokens": (0, 50)}, quick=True),
    ZooModel("mlp_bf16", "multiexport.examples:mlp_bf16", "the MLP in bfloat16", quick=True),
    ZooModel("mlp_dynamic", "multiexport.examples:mlp_dynamic", "the MLP with a symbolic batch b",
             batch_sizes=(1, 8, 64), quick=True),
)


def select(quick: bool, names: list[str] | None = None) -> list[ZooModel]:
    chosen = [m for m in ZOO if (m.quick or not quick)]
    if names:
        unknown = set(names) - {m.name for m in ZOO}
        if unknown:
            raise SystemExit(f"unknown zoo model(s): {', '.join(sorted(unknown))}; known: {', '.join(m.name for m in ZOO)}")
        chosen = [m for m in ZOO if m.name in names]
    return chosen


# The paired zoo gate: `python -m benchmarks.zoo --baseline-ref REF ...`. A fresh clone has no baseline
# artifacts, so the commit REF's own code exports them (its tree unpacked into the output directory, run
# with the same venv and that tree first on sys.path), and the current code's zoo times them beside its own
# artifacts in the same interleaved rounds: latency is then judged on paired ratios (report.regression), while
# status, parity and large slowdowns stay gated cross-run against the committed zoo file (--baseline).
# Both sides are run by the current code's runners: the pair sees what changed in the artifacts (the export
# code, the model definitions, the pinned versions), never a runner's own slowdown (cross-run sees that).
# So when none of EXPORT_INPUTS differ between REF and this tree, the artifacts would be the same ones and
# the export is skipped (`--build-baseline changed`, the default): that gate would be A/A by construction.
AUTO_REF = "auto"  # HEAD~1: the change under test (a merge commit's first parent: the branch it joins)
EXPORT_INPUTS = ("multiexport/exporting", "multiexport/leaves", "multiexport/examples", "backends",
                 "benchmarks/zoo.py", "pyproject.toml", "constraints.txt")


def resolve_ref(repo, ref: str) -> tuple[str | None, str]:
    """(the commit to build the baseline from, one line saying which and why), or (None, why not): a clone
    without history (shallow) or without git cannot name an earlier commit."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        if git("rev-parse", "--is-shallow-repository") == "true":
            return None, "a shallow clone (no history)"
        head = git("rev-parse", "HEAD")
        if ref == AUTO_REF:
            commit, how = git("rev-parse", "--verify", "HEAD~1^{commit}"), "HEAD~1 (--baseline-ref auto)"
        else:
            commit, how = git("rev-parse", "--verify", f"{ref}^{{commit}}"), f"--baseline-ref {ref}"
    except (OSError, subprocess.CalledProcessError) as exc:
        why = exc.stderr.strip().splitlines()[-1] if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else exc
        return None, f"git cannot name {ref!r}: {why}"
    return commit, f"{commit[:12]}, {how}" + (" (the same commit as HEAD: an A/A gate)" if commit == head else "")


def export_inputs_changed(repo, commit: str) -> bool:
    """Whether anything that makes the zoo's artifacts differs between `commit` and this tree (uncommitted
    changes included)."""
    import subprocess

    proc = subprocess.run(["git", "-C", str(repo), "diff", "--quiet", commit, "--", *EXPORT_INPUTS],
                          capture_output=True)
    return proc.returncode != 0


def build_baseline(repo, commit: str, models: list[ZooModel], backends: list[str], out, log) -> dict[str, str]:
    """Export every model with the code of `commit`: its tree unpacked into OUT/baseline-ref/src, each model a
    `multiexport compare --no-bench` by that code into OUT/baseline-ref/MODEL (artifacts as a compare writes
    them). Returns model -> why it has no baseline (its latency is then gated cross-run only)."""
    import io
    import os
    import shutil
    import subprocess
    import sys
    import tarfile

    src = out / "baseline-ref" / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    tree = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tree.stdout)) as tar:
        tar.extractall(src, filter="data")  # nothing outside src: tarfile's data filter refuses it
    # the editable install maps multiexport.backends to the checkout's backends/: the commit's own come first
    if (src / "backends").is_dir() and not (src / "multiexport" / "backends").exists():
        (src / "multiexport" / "backends").symlink_to("../backends")
    env = {**os.environ, "PYTHONPATH": str(src)}
    env.pop("MULTIEXPORT_PLANTED_SLOWDOWN", None)  # a benchmark's planted slowdown is the new code's only
    failed = {}
    for model in models:
        dest = (out / "baseline-ref" / model.name).resolve()
        # `--out`, not `--out-dir`: REF's own CLI runs here, and commits before the rename know only `--out`
        # (today's CLI still takes it, with a deprecation line on stderr).
        cmd = [sys.executable, "-m", "multiexport", "compare", model.spec, "--backends", ",".join(backends),
               "--out", str(dest), "--no-bench", "--trials", "1",
               *[a for leaf, (lo, hi) in model.val_ranges.items() for a in ("--val-range", f"{leaf}={lo}:{hi}")],
               *(["--batch-sizes", ",".join(map(str, model.batch_sizes))] if model.batch_sizes else [])]
        log(f"[zoo] {model.name}: baseline artifacts exported by {commit[:12]}'s code")
        proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=1800)
        if not any((dest / b / "manifest.json").is_file() for b in backends):
            failed[model.name] = f"{commit[:12]}'s code exported no artifact (exit {proc.returncode}): " + \
                " ".join(proc.stderr.split())[-300:]
            log(f"[zoo] {model.name}: {failed[model.name]}")
    shutil.rmtree(src, ignore_errors=True)  # the artifacts are self-contained; the new code runs them
    return failed


def main(argv=None) -> int:
    """The quick zoo gated paired against a commit's own artifacts (see the comment above AUTO_REF)."""
    import argparse
    import json
    import sys
    import time
    from pathlib import Path

    from multiexport.comparison import compare
    from multiexport.exporting.registry import default_names as backend_names
    from multiexport.files import write_text_atomic
    from multiexport.leaves.factory_cache import FactoryCache
    from multiexport.measure.bench import BenchConfig
    from multiexport.report.regression import publish
    from multiexport.results import Results
    from multiexport.sweeps.gate import diff_many

    from .__main__ import ZOO_SCHEMA, matrix

    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=main.__doc__)
    parser.add_argument("--baseline-ref", default=AUTO_REF,
                        help=f"the commit whose code exports the baseline artifacts (default {AUTO_REF}: HEAD~1)")
    parser.add_argument("--build-baseline", choices=("changed", "always"), default="changed",
                        help="changed (default): only when the export inputs differ from REF's; always: even then")
    parser.add_argument("--quick", action="store_true", help="the CI-sized run: fewer models, short timings")
    parser.add_argument("--models", help="comma-separated zoo models (default: all, or the quick set)")
    parser.add_argument("--backends", default="all")
    parser.add_argument("--out", type=Path, default=Path("multiexport-out/zoo-paired"))
    parser.add_argument("--baseline", type=Path, help="a committed zoo-results.json: status, parity and latency "
                        "cross-run (at --max-slowdown) against it too")
    parser.add_argument("--max-slowdown", type=float, default=2.5, help="the cross-run latency threshold")
    parser.add_argument("--paired-slowdown", type=float, help="the paired threshold (default: the calibrated one)")
    parser.add_argument("--max-parity-drift", type=float, default=10.0)
    parser.add_argument("--junit", type=Path)
    args = parser.parse_args(argv)
    repo, t0 = Path(__file__).resolve().parent.parent, time.perf_counter()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    models = select(args.quick, args.models.split(",") if args.models else None)
    backends = backend_names() if args.backends == "all" else args.backends.split(",")
    base = json.loads(args.baseline.read_text()) if args.baseline else None
    commit, how = resolve_ref(repo, args.baseline_ref)
    if commit is None:
        log(f"[zoo] paired gate skipped: {how}; latency is judged cross-run against --baseline only")
    elif args.build_baseline == "changed" and not export_inputs_changed(repo, commit):
        log(f"[zoo] paired gate skipped: nothing that makes the artifacts ({', '.join(EXPORT_INPUTS)}) differs from "
            f"{commit[:12]}: its artifacts would be these; latency is judged cross-run against --baseline only")
        commit, how = None, f"{how}: skipped, export inputs unchanged"
    no_baseline = build_baseline(repo, commit, models, backends, args.out, log) if commit else {}
    built = time.perf_counter() - t0
    bench = (BenchConfig(warmup_iters=10, warmup_time=0.05, min_iters=200, bench_time=0.3) if args.quick
             else BenchConfig(warmup_iters=20, warmup_time=0.2, min_iters=200, bench_time=2.0))
    combined: dict = {"schema": ZOO_SCHEMA, "models": {},
                      "baseline_ref": {"commit": commit, "how": how, "failed": no_baseline, "build_s": round(built, 1)}}
    with FactoryCache() as cache:
        for model in models:
            log(f"[zoo] {model.name}: {model.what}")
            paired = args.out / "baseline-ref" / model.name
            res = compare(cache.load(model.spec), backends=tuple(backends), out_dir=args.out / model.name,
                          trials=1 if args.quick else 2, val_ranges=model.val_ranges,
                          batch_sizes=tuple(model.batch_sizes) or None, bench=bench, target_spec=model.spec,
                          timeout=900, baseline_artifacts=paired if commit and model.name not in no_baseline else None,
                          progress=lambda msg: log(f"[zoo]   {msg}"))
            combined["models"][model.name] = res.to_json()
    combined["baseline_ref"]["total_s"] = round(time.perf_counter() - t0, 1)
    write_text_atomic(args.out / "zoo-results.json", json.dumps(combined, indent=1) + "\n")
    write_text_atomic(args.out / "zoo-matrix.md", matrix(combined))
    current = {name: Results.from_json(res, f"current {name}") for name, res in combined["models"].items()}
    # without a committed file, status and parity are judged against the commit's own compares
    against = ({name: Results.from_json(res, f"baseline {name}", legacy=True) for name, res in base["models"].items()}
               if base is not None else {m: Results.from_json(json.loads((args.out / "baseline-ref" / m / "results.json")
                                                                         .read_text()), f"baseline-ref {m}")
                                         for m in current if (args.out / "baseline-ref" / m / "results.json").is_file()})
    d = diff_many(against, current, args.max_slowdown, args.max_parity_drift, args.paired_slowdown)
    log(f"[zoo] baseline {how}: built in {built:.0f} s; zoo and gate in {time.perf_counter() - t0 - built:.0f} s")
    print(publish(d, args.junit))
    return d.exit_code


if __name__ == "__main__":
    import sys

    sys.exit(main())
