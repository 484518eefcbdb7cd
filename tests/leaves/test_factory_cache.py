"""The TARGET's factory is built once: export workers read the programs the parent's load compiled, and no timed
worker ever sees a JAX compilation cache (a cold start must cost what it costs in a fresh process)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ..conftest import REPO, run_cli

SPEC = "benchmarks.real_models:eqx_mlp"  # equinox's MLP: its weights are drawn eagerly, one XLA compile per op


def _export_worker_after_a_recorded_load(tmp_path, record: bool) -> dict:
    """A fresh parent that loads SPEC (recording, or not) and then runs one real export worker; its export.json."""
    worker = [sys.executable, "-m", "multiexport.run.worker", "export", SPEC, "xla", str(tmp_path / "xla"),
              str(tmp_path / "work")]
    script = textwrap.dedent(f"""
        import contextlib, subprocess
        from multiexport.leaves.factory_cache import FactoryCache
        from multiexport.leaves import load_target
        with {"FactoryCache()" if record else "contextlib.nullcontext()"} as cache:
            (cache.load if cache else load_target)({SPEC!r})
            print(subprocess.run({worker!r}).returncode)
    """)
    (tmp_path / "work").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "0", proc.stderr[-2000:]
    return json.loads((tmp_path / "work" / "export.json").read_text())["target_load"]


@pytest.mark.subprocess
def test_an_export_worker_builds_the_target_from_the_programs_the_parents_load_compiled(tmp_path):
    recorded = _export_worker_after_a_recorded_load(tmp_path / "a", record=True)
    assert recorded["factory_cache"] is True
    assert recorded["cache_hits"] >= 3 and recorded["cache_misses"] == 0  # every eager init op: read, none compiled
    fresh = _export_worker_after_a_recorded_load(tmp_path / "b", record=False)
    assert fresh["factory_cache"] is False and fresh["cache_hits"] == 0


def _build_in_a_fresh_process(env: dict[str, str]) -> dict:
    """A fresh process builds SPEC through a FactoryCache: JAX's cache hits and misses meanwhile, and the cache."""
    script = textwrap.dedent(f"""
        import json, jax
        from multiexport.leaves.factory_cache import FactoryCache
        counts = {{"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}}
        def count(event, **_):
            if event in counts:
                counts[event] += 1
        jax.monitoring.register_event_listener(count)
        with FactoryCache() as cache:
            cache.load({SPEC!r})
            max_size = jax.config.jax_compilation_cache_max_size  # while open (close restores the caller's)
        print(json.dumps({{"hits": counts["/jax/compilation_cache/cache_hits"], "kept": cache.kept,
                          "misses": counts["/jax/compilation_cache/cache_misses"], "path": cache.path,
                          "max_size": max_size}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.subprocess
def test_the_next_command_builds_the_target_from_the_programs_the_last_one_kept(tmp_path):
    from multiexport.leaves.factory_cache import MAX_BYTES

    kept = tmp_path / "kept"
    first = _build_in_a_fresh_process({"MULTIEXPORT_BUILD_CACHE": str(kept)})
    assert first["kept"] and first["path"] == str(kept) and first["misses"] >= 3  # every eager init op compiled
    assert first["max_size"] == MAX_BYTES  # bounded: jax evicts the least recently used, under its file lock
    programs = sorted(p.name for p in kept.glob("*-cache"))
    assert len(programs) >= 3
    second = _build_in_a_fresh_process({"MULTIEXPORT_BUILD_CACHE": str(kept)})
    assert second["hits"] >= 3 and second["misses"] == 0  # built from the kept programs: no compile at all
    off = _build_in_a_fresh_process({"MULTIEXPORT_BUILD_CACHE": "off"})  # a temporary of its own, removed
    assert not off["kept"] and off["hits"] == 0 and off["misses"] >= 3 and not os.path.exists(off["path"])
    assert sorted(p.name for p in kept.glob("*-cache")) == programs


def test_the_kept_cache_follows_the_users_cache_home_unless_turned_off(monkeypatch, tmp_path):
    from multiexport.leaves.factory_cache import KEPT_ENV, kept_directory

    monkeypatch.delenv(KEPT_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kept_directory() == tmp_path / "multiexport" / "build"
    monkeypatch.setenv(KEPT_ENV, "off")
    assert kept_directory() is None


@pytest.mark.subprocess
def test_no_timed_worker_reads_or_writes_the_users_jax_compilation_cache(tmp_path):
    """A user's JAX_COMPILATION_CACHE_DIR, set to write every compile: a compare leaves it empty, so neither
    the reference's nor the xla runner's cold-start compile could have been a hit from an earlier run there."""
    users = tmp_path / "users-jax-cache"
    users.mkdir()
    env = {"JAX_COMPILATION_CACHE_DIR": str(users), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    proc = run_cli("compare", "--backends", "xla", "--trials", "1", "--bench-time", "0.05", "--out-dir", tmp_path / "out",
                   env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["backends"]["xla"]["status"] == "ok" and results["pairing"]["mode"] == "paired"
    assert list(users.iterdir()) == []
    probe = subprocess.run([sys.executable, "-c", "import jax, jax.numpy as jnp; jax.jit(jnp.sin)(1.0)"], env={
        **os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and list(users.iterdir()), "the environment above does write a cache"


# A function whose compile takes long enough to be kept (KEEP_MIN_COMPILE_S): twelve matmuls with what XLA fuses
# around them, ~0.5 s here (ten times the threshold); its weights (none) are far under KEEP_LIMIT_BYTES.
_SLOW_COMPILE = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np

    def f(x):
        for i in range(12):
            x = jnp.tanh(x @ x.T * (1.0 + i / 12)) + x
        return {"y": x}
""")


# JAX bounds (and locks) a cache with filelock; without it a FactoryCache is a temporary, which keeps nothing
needs_filelock = pytest.mark.skipif(importlib.util.find_spec("filelock") is None, reason="filelock is not installed")


def _compile_in_a_fresh_process(kept, weights: int | None) -> dict:
    """A fresh process with a FactoryCache kept in `kept` (weights None: no FactoryCache at all) that calls
    keep_compiles(weights), then compiles _SLOW_COMPILE's f: what keep_compiles said, JAX's cache reads."""
    script = _SLOW_COMPILE + textwrap.dedent(f"""
        import contextlib, json
        from multiexport.leaves.factory_cache import FactoryCache, keep_compiles
        counts = {{"/jax/compilation_cache/cache_hits": 0, "/jax/compilation_cache/cache_misses": 0}}
        def count(event, **_):
            if event in counts:
                counts[event] += 1
        jax.monitoring.register_event_listener(count)
        with (FactoryCache() if {weights is not None} else contextlib.nullcontext()):
            kept = keep_compiles({weights or 0})
            jax.block_until_ready(jax.jit(f)(np.ones((16, 16), np.float32)))
        print(json.dumps({{"kept": kept, "hits": counts["/jax/compilation_cache/cache_hits"],
                          "misses": counts["/jax/compilation_cache/cache_misses"]}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "MULTIEXPORT_BUILD_CACHE": str(kept)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@needs_filelock
@pytest.mark.subprocess
def test_the_compares_own_compiles_are_kept_for_the_next_run_for_small_weights_only(tmp_path):
    from multiexport.leaves.factory_cache import KEEP_LIMIT_BYTES

    kept = tmp_path / "kept"
    too_large = _compile_in_a_fresh_process(kept, KEEP_LIMIT_BYTES + 1)  # baked weights that large: nothing kept
    assert too_large["kept"] is False and too_large["hits"] == 0 and not list(kept.glob("*-cache"))
    no_cache = _compile_in_a_fresh_process(kept, None)  # no FactoryCache in this process: nothing to keep in
    assert no_cache["kept"] is False and no_cache["hits"] == 0 and not list(kept.glob("*-cache"))
    first = _compile_in_a_fresh_process(kept, 1024)
    assert first["kept"] is True and first["misses"] == 1 and len(list(kept.glob("*-cache"))) == 1
    second = _compile_in_a_fresh_process(kept, 1024)  # the next process reads it: no compile
    assert second["hits"] == 1 and second["misses"] == 0


@needs_filelock
@pytest.mark.subprocess
def test_a_compares_kept_reference_programs_never_make_the_references_cold_start_a_hit(tmp_path):
    """Two compares of one target sharing a kept cache: the first keeps its reference's programs (its factory
    compiles nothing, so whatever is kept is the compare's own), the second's reference worker, which reads the
    kept cache while its factory runs, compiles its cold start anew (no read then)."""
    (tmp_path / "slow_compile.py").write_text(_SLOW_COMPILE + textwrap.dedent("""
        from multiexport import Target

        def target():
            return Target(f, (np.linspace(-1, 1, 256, dtype=np.float32).reshape(16, 16),), name="slow_compile")
    """))
    spec = f"{tmp_path / 'slow_compile.py'}:target"
    kept = tmp_path / "kept"
    for run in ("first", "second"):
        proc = run_cli("compare", spec, "--backends", "xla", "--trials", "1", "--bench-time", "0.05",
                       "--out-dir", tmp_path / run, env={"MULTIEXPORT_BUILD_CACHE": str(kept)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        if run == "first":
            assert list(kept.glob("*-cache")), "the compare kept none of its own compiles"
    results = json.loads((tmp_path / "second" / "results.json").read_text())
    assert results["pairing"]["mode"] == "paired" and results["backends"]["xla"]["status"] == "ok"
    read = results["reference"]["bench"]["extra"]["target_build_cache"]
    assert read["dir"] == str(kept) and read["cold_start_reads"] == 0


@needs_filelock
@pytest.mark.subprocess
def test_a_python_callers_own_jax_cache_gets_nothing_of_a_compares_and_is_its_own_again_after(tmp_path):
    """A Python caller whose process had opened its own JAX cache (JAX_COMPILATION_CACHE_DIR, every compile written)
    before a compare: nothing the FactoryCache records or keeps goes there, and after `close` its settings are its
    own again (what it compiles next is written to its own cache); `off_here` reads no cache at all meanwhile."""
    users, kept = tmp_path / "users", tmp_path / "kept"
    script = _SLOW_COMPILE + textwrap.dedent(f"""
        import json
        from multiexport.leaves.factory_cache import FactoryCache, keep_compiles, off_here
        counts = {{"/jax/compilation_cache/cache_hits": 0}}
        def count(event, **_):
            if event in counts:
                counts[event] += 1
        jax.monitoring.register_event_listener(count)
        x = np.ones((16, 16), np.float32)
        jax.block_until_ready(jax.jit(jnp.sin)(x))  # the caller's own cache opened, one program written
        before = {{k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir",
                                                       "jax_persistent_cache_min_compile_time_secs")}}
        with FactoryCache() as cache:
            cache.load({SPEC!r})
            kept = keep_compiles(0)
            jax.block_until_ready(jax.jit(f)(x))
        after = {{k: getattr(jax.config, k) for k in before}}
        jax.block_until_ready(jax.jit(jnp.cos)(x))  # the caller's cache again
        hits_before = counts["/jax/compilation_cache/cache_hits"]
        with off_here():
            jax.block_until_ready(jax.jit(jnp.sin)(x + 1))  # in the caller's cache: not read meanwhile
        print(json.dumps({{"kept": kept, "same": before == after, "hits_meanwhile":
                          counts["/jax/compilation_cache/cache_hits"] - hits_before,
                          "dir_after": jax.config.jax_compilation_cache_dir}}))
    """)
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(users), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1", "MULTIEXPORT_BUILD_CACHE": str(kept)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = json.loads(proc.stdout.splitlines()[-1])
    assert said["kept"] is True and said["same"] is True and said["dir_after"] == str(users)
    assert said["hits_meanwhile"] == 0
    # the caller's: sin and cos (sin at x + 1 is the same program, read outside off_here only); the factory's
    # programs and the kept f: in kept, none in the caller's
    assert len(list(users.glob("*-cache"))) == 2, sorted(p.name for p in users.iterdir())
    assert len(list(kept.glob("*-cache"))) >= 4  # eqx_mlp's eager init ops, and f
