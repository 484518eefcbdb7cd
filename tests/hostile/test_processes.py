"""Every process multiexport starts dies with it, under every signal, and nothing it made outlives it
(issue 28, "orphans, mixing, hangs"): real signals to real processes, real concurrent compares.

Processes are found through /proc: every descendant of the command under test, collected while it runs
(native consumers run with an environment of their own, so by parent, not by environment).
"""

from __future__ import annotations

import os
import shutil
import signal
import textwrap
import time
from pathlib import Path

import pytest

from ..run.test_signals import _alive, _finish, _start
from .conftest import assert_one_line

pytestmark = pytest.mark.subprocess

HOSTILE = textwrap.dedent("""
    import ctypes, dataclasses, os, sys, time
    from pathlib import Path
    from multiexport.examples import seed

    IN_WORKER = sys.argv[0].endswith(os.path.join("run", "worker.py"))  # python -m multiexport.run.worker

    def _hang(tag):
        with open(os.environ["HOSTILE_PID_FILE"] + ".tmp", "w") as f:
            f.write(f"{tag} {os.getpid()}")
        os.replace(os.environ["HOSTILE_PID_FILE"] + ".tmp", os.environ["HOSTILE_PID_FILE"])
        if os.environ.get("HOSTILE_HOLD_GIL"):
            ctypes.PyDLL(None).sleep(60)  # a C call that keeps the GIL: no Python thread of this process runs
        time.sleep(3600)

    def factory_hangs():
        if not IN_WORKER:
            _hang("factory")
        return seed()

    def _hangs_once_staged(fn):
        def traced(*args, **kwargs):
            staging = os.environ.get("HOSTILE_STAGING_IN")
            if staging and any(Path(staging).glob(".*.partial")):  # the export has claimed its directory
                _hang("export")
            return fn(*args, **kwargs)
        return traced

    def factory_moves_cwd():
        os.makedirs("elsewhere", exist_ok=True)
        os.chdir("elsewhere")
        return seed()

    def export_hangs():
        target = seed()
        return dataclasses.replace(target, fn=_hangs_once_staged(target.fn))
""")


@pytest.fixture
def hostile(sandbox) -> Path:
    path = sandbox.root / "hostile.py"
    path.write_text(HOSTILE)
    sandbox.rebase()
    return path


def _children() -> dict[int, int]:
    """pid -> parent pid of every process now."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                found[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                continue
    return found


def _descendants(root: int) -> set[int]:
    parents = _children()
    out, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - out
        out |= frontier
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class Watched:
    """A command under test and every process it started (collected on each `poll`)."""

    def __init__(self, proc):
        self.proc, self.seen = proc, set()

    def poll(self) -> set[int]:
        if self.proc.poll() is None:
            self.seen |= _descendants(self.proc.pid)
        return self.seen

    def wait_for(self, ready, what: str, timeout: float = 180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            value = ready()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"the command ended ({self.proc.returncode}) before {what}: "
                                     f"{self.proc.stderr.read()}")
            time.sleep(0.1)
        raise AssertionError(f"never saw {what}")

    def survivors(self, within: float = 10) -> list[str]:
        """Processes it started that are still alive `within` seconds after it ended (PR_SET_PDEATHSIG kills
        them at once; a minute-long C call keeps a worker alive otherwise)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and any(_alive(p) for p in self.seen):
            time.sleep(0.1)
        return [f"{p} {_comm(p)}" for p in self.seen if _alive(p)]

    def kill_survivors(self) -> None:
        """The command (when a check failed while it ran) and everything it started: nothing outlives a test."""
        if self.proc.poll() is None:
            self.poll()
            self.proc.kill()
            self.proc.communicate()
        for pid in self.seen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _pid_file(sandbox) -> Path:
    return sandbox.root.parent / "hang.pid"


def _hanging(pid_file: Path, tag: str):
    def ready():
        try:
            got, pid = pid_file.read_text().split()
        except (OSError, ValueError):
            return None
        return int(pid) if got == tag else None
    return ready


def _start_in(sandbox, args, cwd=None, **env):
    return Watched(_start(args, {"TMPDIR": str(sandbox.tmp), "HOSTILE_PID_FILE": str(_pid_file(sandbox)),
                                 **{k: str(v) for k, v in env.items()}}, **({"cwd": cwd} if cwd else {})))


def _hidden(directory: Path) -> list[str]:
    """What an export leaves beside an artifact: staging directories, swapped-out artifacts, locks."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and p.name != ".multiexport-run")


def _later_command(sandbox) -> None:
    """Any later multiexport command (here the cheapest): it removes what killed runs left in $TMPDIR."""
    assert sandbox.cli("backends").returncode == 0


# -- native consumers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_native_kills_the_consumer_and_removes_its_temporary(sandbox, artifact, signum):
    """`native --iters N` left pjrt_run at 100 % CPU with ppid 1, and multiexport-native-* in $TMPDIR."""
    run = _start_in(sandbox, ["native", artifact, "--iters", "1000000000"])
    try:
        run.wait_for(lambda: [p for p in run.seen if _comm(p) == "pjrt_run"], "pjrt_run")
        run.proc.send_signal(signum)
        _, err = _finish(run.proc)
        assert run.proc.returncode == 128 + signum, err
        assert "Traceback" not in err
        assert not run.survivors(), "the native consumer outlived multiexport"
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


def test_a_sigkill_to_native_kills_the_consumer_and_the_next_command_removes_its_temporary(sandbox, artifact):
    run = _start_in(sandbox, ["native", artifact, "--iters", "1000000000"])
    try:
        run.wait_for(lambda: [p for p in run.seen if _comm(p) == "pjrt_run"], "pjrt_run")
        run.proc.kill()
        _finish(run.proc)
        assert not run.survivors(), "the native consumer outlived a kill -9 of multiexport"
        assert [n for n in sandbox.tmp_left() if n.startswith("multiexport-native-")], sandbox.tmp_left()
        _later_command(sandbox)
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_a_signal_to_native_kills_iree_benchmark_module_too(sandbox, seed_iree, signum):
    """IREE's consumer is a third-party binary (iree-benchmark-module for --iters), not a program of ours:
    it must die with multiexport as pjrt_run does, and a kill -9's temporary goes with the next command."""
    art = sandbox.root / "art"
    shutil.copytree(seed_iree, art)
    sandbox.rebase()
    run = _start_in(sandbox, ["native", art, "--iters", "1000000000"])
    try:
        # /proc/PID/comm holds the first 15 characters of the name
        run.wait_for(lambda: [p for p in run.seen if _comm(p) == "iree-benchmark-module"[:15]], "iree-benchmark-module")
        run.proc.send_signal(signum)
        _, err = _finish(run.proc)
        assert run.proc.returncode == (-signum if signum == signal.SIGKILL else 128 + signum), err
        assert not run.survivors(), "iree-benchmark-module outlived multiexport"
        if signum == signal.SIGKILL:
            _later_command(sandbox)
        else:
            assert "Traceback" not in err
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


# -- export and the target's build -------------------------------------------------------------------------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_export_exits_128_plus_n_and_leaves_no_staging_or_lock(sandbox, hostile, signum):
    out = sandbox.root / "arts" / "seed"
    run = _start_in(sandbox, ["export", f"{hostile}:export_hangs", "--backend", "xla", "--out-dir", out],
                    HOSTILE_STAGING_IN=out.parent)
    try:
        run.wait_for(_hanging(_pid_file(sandbox), "export"), "the export in its staging directory")
        assert _hidden(out.parent), "the test expects the staging directory and the lock to exist now"
        run.proc.send_signal(signum)
        _, err = _finish(run.proc)
        assert run.proc.returncode == 128 + signum, err
        assert "Traceback" not in err
        assert _hidden(out.parent) == [] and not out.exists()
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_compare_builds_the_target_stops_its_workers_and_removes_the_cache(sandbox, hostile, signum):
    """The paired workers start before the target is built, and the factory cache is made for it (a temporary
    one: with MULTIEXPORT_BUILD_CACHE=off, the kept one is not this command's to remove)."""
    out = sandbox.root / "o"
    run = _start_in(sandbox, ["compare", f"{hostile}:factory_hangs", "--backends", "xla", "--out-dir", out],
                    MULTIEXPORT_BUILD_CACHE="off")
    try:
        run.wait_for(_hanging(_pid_file(sandbox), "factory"), "the factory running")
        run.wait_for(lambda: len(run.poll()) >= 2, "the early paired workers")
        assert any(n.startswith("multiexport-factory-cache-") for n in sandbox.tmp_left()), sandbox.tmp_left()
        run.proc.send_signal(signum)
        _, err = _finish(run.proc)
        assert run.proc.returncode == 128 + signum, err
        assert "Traceback" not in err
        assert not run.survivors(), "a paired worker outlived the compare"
        assert sandbox.tmp_left() == []
        assert not out.exists()
    finally:
        run.kill_survivors()


def _reading_stdin(pid: int) -> bool:
    """The process is blocked reading its stdin (a paired worker waiting for its first request)."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().startswith("0 0x0 ")
    except OSError:
        return False


def test_a_sigkill_after_the_paired_workers_started_leaves_nothing_after_the_next_command(sandbox, hostile):
    """kill -9 of compare: its paired workers died at once (before: they ended on their stdin's end, leaving
    multiexport-paired-* with the feeds, and the factory cache); the next command removes the temporaries."""
    out = sandbox.root / "o"
    run = _start_in(sandbox, ["compare", f"{hostile}:factory_hangs", "--backends", "xla", "--out-dir", out],
                    MULTIEXPORT_BUILD_CACHE="off")  # the temporary factory cache, which a kill -9 leaves
    try:
        run.wait_for(_hanging(_pid_file(sandbox), "factory"), "the factory running")
        workers = run.wait_for(lambda: [p for p in run.poll() if _comm(p).startswith("python")], "paired workers")
        run.wait_for(lambda: all(_reading_stdin(p) for p in workers), "the paired workers waiting for requests")
        run.proc.kill()
        _finish(run.proc)
        assert not run.survivors(), "a paired worker outlived a kill -9 of the compare"
        _later_command(sandbox)
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


def test_a_sigkill_during_an_export_kills_the_worker_at_once_and_the_next_run_removes_its_staging(sandbox, hostile):
    """The export worker holds the GIL in a minute-long C call: its parent-watch thread cannot run, so it
    outlived the compare (and wrote into --out once the call returned). Now it dies with the compare; what
    it left in --out (its staging directory and lock) is removed by the next compare into that directory."""
    out = sandbox.root / "o"
    run = _start_in(sandbox, ["compare", f"{hostile}:export_hangs", "--backends", "xla", "--no-bench", "--out-dir", out],
                    HOSTILE_STAGING_IN=out, HOSTILE_HOLD_GIL=1)
    try:
        run.wait_for(_hanging(_pid_file(sandbox), "export"), "the export worker in its staging directory")
        run.proc.kill()
        _finish(run.proc)
        assert not run.survivors(), "the export worker outlived a kill -9 of the compare"
        assert not (out / "xla").exists()
        assert _hidden(out), "the test expects the killed export's staging directory and lock"
        again = sandbox.cli("compare", "multiexport.examples:seed", "--backends", "xla", "--no-bench", "--out-dir", out)
        assert again.returncode == 0, again.stderr
        assert _hidden(out) == []
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


def test_ctrl_c_during_an_export_leaves_no_staging_or_lock_in_out(sandbox, hostile):
    out = sandbox.root / "o"
    run = _start_in(sandbox, ["compare", f"{hostile}:export_hangs", "--backends", "xla", "--no-bench", "--out-dir", out],
                    HOSTILE_STAGING_IN=out)
    try:
        run.wait_for(_hanging(_pid_file(sandbox), "export"), "the export worker in its staging directory")
        run.proc.send_signal(signal.SIGINT)
        _, err = _finish(run.proc)
        assert run.proc.returncode == 130, err
        assert not run.survivors()
        assert _hidden(out) == [], "the killed export's staging directory or lock is left in --out"
        assert sandbox.tmp_left() == []
    finally:
        run.kill_survivors()


# -- one compare per output directory ------------------------------------------------------------------------

@pytest.mark.parametrize("given", [True, False], ids=["--out", "default-out"])
def test_a_second_compare_into_the_same_out_is_refused_naming_the_first(sandbox, hostile, given):
    """With --out, and without: both then default to ./multiexport-out/<target name> (two CI jobs in one
    checkout), so the lock must hold there too."""
    out = sandbox.root / "o" if given else sandbox.root / "multiexport-out" / "seed"
    where = ["--out-dir", out] if given else []
    first = _start_in(sandbox, ["compare", f"{hostile}:export_hangs", "--backends", "xla", "--no-bench", *where],
                      cwd=sandbox.root, HOSTILE_STAGING_IN=out)
    try:
        first.wait_for(_hanging(_pid_file(sandbox), "export"), "the first compare's export")
        before = sorted(p.name for p in out.iterdir())
        second = sandbox.cli("compare", "multiexport.examples:seed", "--backends", "xla", "--no-bench", *where,
                             cwd=sandbox.root)
        assert_one_line(second, 2, str(out), f"pid {first.proc.pid}")
        assert sorted(p.name for p in out.iterdir()) == before, "the refused compare changed the directory"
        first.proc.send_signal(signal.SIGTERM)
        _finish(first.proc)
        assert first.proc.returncode == 128 + signal.SIGTERM
    finally:
        first.kill_survivors()


def test_a_lock_left_by_a_dead_compare_is_taken_over(sandbox):
    out = sandbox.root / "o"
    out.mkdir()
    (out / ".multiexport-run").write_text('{"state": "running", "pid": 999999999}\n')
    (out / ".multiexport-lock").write_text("999999999\n")  # its holder is gone: the kernel's lock went with it
    done = sandbox.cli("compare", "multiexport.examples:seed", "--backends", "xla", "--no-bench", "--out-dir", out)
    assert done.returncode == 0, done.stderr
    assert not (out / ".multiexport-lock").exists()


def test_a_link_planted_at_the_export_lock_creates_nothing_where_it_points(sandbox):
    out = sandbox.root / "arts" / "seed"
    out.parent.mkdir()
    victim = sandbox.user / "created-by-multiexport"
    (out.parent / ".seed.multiexport-lock").symlink_to(victim)
    sandbox.rebase()
    done = sandbox.main("export", "multiexport.examples:seed", "--backend", "xla", "--out-dir", out)
    assert_one_line(done, 2, ".seed.multiexport-lock", "symbolic link")
    assert not victim.exists()
    sandbox.assert_untouched()


# -- hangs -----------------------------------------------------------------------------------------------------

def test_a_paired_worker_hanging_in_prepare_is_stopped_at_the_timeout_given(sandbox):
    """The paired worker's load and prepare waited a hard-coded 900 s whatever --timeout said."""
    import json

    from ..fault_backends import ALL

    target = sandbox.root / "with_hang.py"
    target.write_text(textwrap.dedent(f"""
        from multiexport.exporting.registry import register
        from multiexport.examples import seed
        register("xla_hang", {ALL['xla_hang']!r})
        target = seed
    """))
    out = sandbox.root / "o"
    done = _start_in(sandbox, ["compare", f"{target}:target", "--backends", "xla,xla_hang", "--timeout", "20",
                               "--bench-time", "0.05", "--rounds", "2", "--out-dir", out])
    try:
        _, err = _finish(done.proc, timeout=200)  # before: 900 s at the prepare alone
        assert done.proc.returncode == 3, err
        row = json.loads((out / "results.json").read_text())["backends"]["xla_hang"]
        assert row["status"] == "timeout" and "20 s" in row["reason"], row
        assert not done.survivors()
    finally:
        done.kill_survivors()


# -- the working directory ---------------------------------------------------------------------------------

@pytest.mark.parametrize("out", [["--out-dir", "o"], []], ids=["relative-out", "default-out"])
def test_a_factory_that_changes_the_working_directory_moves_neither_out_nor_the_target(sandbox, hostile, out):
    """The factory's os.chdir moved a relative --out (and the default one) into its own directory, and the
    export workers, started there, could not find the relative TARGET file."""
    done = sandbox.cli("compare", "hostile.py:factory_moves_cwd", "--backends", "xla", "--no-bench", *out,
                       cwd=sandbox.root)
    assert done.returncode == 0, done.stderr
    where = sandbox.root / ("o" if out else "multiexport-out/seed")
    assert (where / "results.json").is_file() and (where / "xla" / "manifest.json").is_file()
    assert not [p for p in (sandbox.root / "elsewhere").rglob("*") if p.is_file()]  # its workers' own chdir only
