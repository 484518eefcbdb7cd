"""`multiexport native DIR --bundle OUT`: a relocatable folder that runs with nothing of this machine's Python.

Each format with a native consumer exports the seed and a symbolic-batch case from the shared registry, is
bundled, and the bundle is copied to a fresh directory (its path holds a space) while the original is deleted.
The copy runs through its run.sh under `env -i` (nothing inherited: no PATH to the venv, no LD_LIBRARY_PATH), on
inputs a deployer drops into artifact/inputs/, and must write what `multiexport run` gives bit for bit (the same
rule as test_consumers.py). The loader's own log (LD_DEBUG=libs) proves that no library came from the venv, the
checkout, the build cache or the bundle's first place. The refusals and the in-place ELF search-path rewrite are
checked on their own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.native.build import NativeBuildError, cache_root, find_compiler
from multiexport.native.bundle import CONSUMERS, bundle
from multiexport.native.loader import rewrite_search_path

from ..cases import case, feed_for
from ..conftest import REPO
from .test_consumers import _assert_same, _plugin_or_skip, _read

CASES = [("seed", {}), ("symbolic_batch", {"static_sizes": {"b": (1, 7)}})]  # XLA needs refined modules for PJRT


def _forbidden(made: Path) -> list[str]:
    """Where no library of a deployed bundle may come from."""
    return [str(p) for p in {Path(sys.prefix), Path(sys.prefix).resolve(), REPO, cache_root(), made}]


@pytest.fixture(scope="module", params=sorted(CONSUMERS))
def deployed(request, tmp_path_factory):
    """Each case of one backend: exported, bundled, copied elsewhere (the bundle's first place deleted), with the
    feeds to run and `multiexport run`'s outputs for them from one fresh process."""
    backend = get_backend(request.param)
    if not backend.available().ok:
        pytest.skip(f"{backend.name} unavailable: {backend.available().reason}")
    plugin = _plugin_or_skip(backend.name)
    root = tmp_path_factory.mktemp(f"bundle-{backend.name}")
    done, jobs = {}, []
    for name, options in CASES:
        c = case(name)
        target = c.make()
        sig = build_signature(target)
        options = options if backend.name == "xla" else {}
        artifact = backend.export(target.fn, sig, root / "artifacts" / name, ExportOptions(**{**c.options, **options}))
        feeds = []
        for batch in c.batch_sizes or (None,):
            stem = root / f"{name}-{batch}"
            save_npz(f"{stem}.in.npz", feed_for(sig, batch))
            feeds.append((f"{stem}.in.npz", f"{stem}.out.npz"))
        jobs.append({"artifact": str(artifact.directory), "feeds": [list(f) for f in feeds]})
        made = root / "made" / name
        try:
            written = bundle(artifact.directory, made)
        except NativeBuildError as exc:
            pytest.skip(f"{backend.name}: its consumer cannot be built here: {exc}")
        assert written.directory == made and (made / "run.sh").is_file()
        deployed_dir = root / "deployed here" / name
        shutil.copytree(made, deployed_dir, symlinks=True)
        shutil.rmtree(made)
        done[name] = (deployed_dir, sig, feeds, written)
    (root / "jobs.json").write_text(json.dumps(jobs))
    subprocess.run([sys.executable, "-m", "tests.run_many", str(root / "jobs.json")], cwd=REPO, check=True, timeout=900)
    return backend.name, plugin, done, root


@pytest.mark.subprocess
@pytest.mark.parametrize("name", [n for n, _ in CASES])
def test_deployed_bundle_runs_under_env_i_bit_exact_with_nothing_from_the_venv(deployed, name, tmp_path):
    backend, plugin, done, root = deployed
    directory, sig, feeds, written = done[name]
    manifest = json.loads((directory / "artifact" / "manifest.json").read_text())
    native = manifest["native"]
    for feed_path, out_path in feeds:
        assert not Path(out_path).with_suffix(".error.txt").exists(), Path(out_path).with_suffix(".error.txt").read_text()
        feed = load_npz(feed_path)
        for entry in native["args"]:  # what a deployer does: their own .npy files in place of the example's
            if entry.get("kind") == "leaf":
                value = np.asarray(feed[entry["leaf"]], order="C")
                target = directory / "artifact" / "inputs" / entry["file"]
                value.tofile(target) if entry.get("encoding") == "raw" else np.save(target, value, allow_pickle=False)
        shutil.rmtree(directory / "artifact" / "outputs", ignore_errors=True)
        logs = tmp_path / f"ld-{Path(feed_path).stem}"
        logs.mkdir()
        # env -i: nothing inherited; the loader's log variables are its own and set for run.sh alone.
        proc = subprocess.run(["env", "-i", "LD_DEBUG=libs", f"LD_DEBUG_OUTPUT={logs}/ld", str(directory / "run.sh")],
                              cwd=tmp_path, env={}, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = {r["leaf"]: _read(directory / "artifact" / "outputs" / r["file"], r)
               for r in native["results"] if r["kind"] == "leaf"}
        _assert_same(backend, plugin, got, load_npz(out_path), sig, f"{backend}/{name}/{feed_path} bundled")
        log = "\n".join(p.read_text(errors="replace") for p in sorted(logs.iterdir()))
        inits = sorted({line.split("calling init:", 1)[1].strip() for line in log.splitlines() if "calling init:" in line})
        assert inits, "the loader logged nothing: LD_DEBUG did not reach the program"
        for forbidden in _forbidden(root / "made"):
            assert forbidden not in log, f"the loader looked in or loaded from {forbidden}"
        for path in inits:  # every object the program initialised: the bundle's or the system's own
            resolved = (directory / "artifact" / path).resolve()  # relative: dlopened from run.sh's directory
            assert directory in resolved.parents or str(resolved).startswith(("/lib", "/usr/lib")), path
        assert any((directory / "artifact" / p).resolve().parent == directory / "lib" for p in inits) \
            or backend == "iree", inits
    ldd = [subprocess.run(["ldd", str(p)], env={}, capture_output=True, text=True).stdout
           for p in sorted((directory / "bin").iterdir()) + sorted((directory / "lib").iterdir())]
    for forbidden in _forbidden(root / "made"):
        assert not any(forbidden in out for out in ldd), forbidden
    assert not any("not found" in out for out in ldd[:len(list((directory / 'bin').iterdir()))])
    record = json.loads((directory / "bundle.json").read_text())
    assert not any(k.startswith(("libc.so", "libm.so", "libpthread", "ld-linux")) for k in written.files)
    assert "libc.so.6" in record["system_libraries"] and record["requires"]["GLIBC"]
    size = subprocess.run(["du", "-sh", str(directory)], capture_output=True, text=True).stdout.split()[0]
    print(f"{backend}/{name}: du -sh {size}; largest {written.largest(2)}; requires {record['requires']}")


@pytest.mark.subprocess
def test_bundle_holds_the_runtime_each_consumer_loads(deployed):
    """What the loader cannot see from the program: the PJRT plugin, OpenVINO's device plugin and frontend, TF's
    libraries with their search path kept inside lib/, IREE's own tools."""
    backend, _, done, _ = deployed
    directory, _, _, written = done["seed"]
    libs = {p.name for p in (directory / "lib").iterdir()}
    run_sh = (directory / "run.sh").read_text().splitlines()
    assert run_sh[0] == "#!/bin/sh" and len(run_sh) == 2 and run_sh[1].startswith('cd "$(dirname "$0")/artifact" && ')
    if backend == "xla":
        assert any(n.endswith(".so") and "pjrt" in n for n in libs), libs
    elif backend == "openvino":
        assert "libopenvino_intel_cpu_plugin.so" in libs and any(n.startswith("libopenvino_c.so") for n in libs)
        assert any(n.startswith("libopenvino_onnx_frontend") for n in libs), libs
    elif backend == "savedmodel":
        assert {"libtensorflow_cc.so.2", "libtensorflow_framework.so.2"} <= libs
        runpath = subprocess.run(["readelf", "-d", str(directory / "lib" / "libtensorflow_cc.so.2")],
                                 capture_output=True, text=True).stdout
        assert "[$ORIGIN]" in runpath and "_solib" not in runpath, runpath
    elif backend == "iree":
        assert {"iree-run-module", "iree-benchmark-module"} <= {p.name for p in (directory / "bin").iterdir()}
    elif backend == "onnx":  # dlopened by file name through the program's DT_RPATH, so no ldd shows it
        assert any(n.startswith("libonnxruntime.so.1") for n in libs), libs
    elif backend == "litert":
        assert "libLiteRt.so" in libs, libs
    for rel in written.files:
        assert not Path(rel).is_absolute() and ".." not in Path(rel).parts


@pytest.mark.subprocess
def test_bundle_refuses_a_used_out_an_out_inside_the_artifact_an_untrusted_artifact_and_an_outside_load(
        tmp_path, tmp_path_factory, monkeypatch):
    from multiexport import ArtifactError, UsageError

    backend = get_backend("iree")  # the smallest bundle; the refusals come before any runtime is involved
    if not backend.available().ok:
        pytest.skip(f"iree unavailable: {backend.available().reason}")
    target = case("seed").make()
    art = backend.export(target.fn, build_signature(target), tmp_path / "art", ExportOptions()).directory
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"--bundle' \| .*used' exists and is not an empty directory"):
        bundle(art, used)
    assert [p.name for p in used.iterdir()] == ["notes.txt"] and (used / "notes.txt").read_text() == "mine"
    with pytest.raises(UsageError, match=r"is inside the artifact"):
        bundle(art, art / "deploy")
    assert not (art / "deploy").exists()
    # the CLI: one line, exit 2, and an empty OUT is taken
    proc = subprocess.run([sys.executable, "-m", "multiexport", "native", str(art), "--bundle", str(used)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.run([sys.executable, "-m", "multiexport", "native", str(art), "--bundle", str(empty)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "wrote bundle" in proc.stdout and (empty / "run.sh").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no staging directory left beside OUT

    # The proof: a program that dlopens a library from outside the bundle (as an undeclared plugin would) is refused
    # after its run, and OUT never appears.
    far = tmp_path / "outside"
    far.mkdir()
    cc = find_compiler("c")
    (far / "far.c").write_text("int far(void) { return 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", str(far / "far.c"), "-o", str(far / "libfar.so")], check=True)
    (far / "prog.c").write_text('#include <dlfcn.h>\nint main(void) { return dlopen(FAR, RTLD_NOW) ? 0 : 1; }\n')
    subprocess.run([cc, f'-DFAR="{far}/libfar.so"', str(far / "prog.c"), "-ldl", "-o", str(far / "prog")], check=True)
    from multiexport.backends.iree import IreeBackend
    from multiexport.backends.iree.native import IreeConsumer
    from multiexport.exporting.native_consumer import Program

    class Sneaky(IreeConsumer):  # IREE's checks, with a program of its own that dlopens from outside
        def bundle_programs(self, request):
            return [Program(far / "prog", far / "prog")]

        def bundle_argv(self, request):
            return []

    with monkeypatch.context() as patch:
        patch.setattr(IreeBackend, "native_consumer", lambda self: Sneaky())
        with pytest.raises(ArtifactError, match=rf"loaded {far}/libfar.so from outside the bundle"):
            bundle(art, tmp_path / "sneaky")
    assert not (tmp_path / "sneaky").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "outside"])

    from ..hostile.conftest import build_evil_savedmodels

    if not get_backend("savedmodel").available().ok:
        pytest.skip("savedmodel unavailable: the trust gate's refusal is checked on a hostile SavedModel")
    evil = build_evil_savedmodels(tmp_path_factory, "bundle-evil", ["serving"])
    with pytest.raises(ArtifactError, match=r"WriteFile.*--trust-artifact"):
        bundle(evil / "serving", tmp_path / "evil-bundle")
    assert not (tmp_path / "evil-bundle").exists() and not list(evil.glob("PWNED*"))


def test_search_path_rewritten_in_place_and_refused_without_room(tmp_path):
    """The in-place rewrite on a real library: a RUNPATH naming a far directory becomes $ORIGIN, the library still
    loads and finds its neighbour through it; a string too short to hold the new one is refused, file unchanged."""
    try:
        cc = find_compiler("c")
    except NativeBuildError as exc:
        pytest.skip(str(exc))
    (tmp_path / "dep.c").write_text("int dep(void) { return 41; }\n")
    (tmp_path / "top.c").write_text("int dep(void);\nint top(void) { return dep() + 1; }\n")
    far = "/nonexistent/far/away/lib/directory"
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "dep.c"), "-o", str(tmp_path / "libdep.so")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "top.c"), f"-L{tmp_path}", "-ldep", f"-Wl,-rpath,{far}",
                    "-o", str(tmp_path / "libtop.so")], check=True)
    assert "not found" in subprocess.run(["ldd", str(tmp_path / "libtop.so")], env={}, capture_output=True,
                                         text=True).stdout
    assert rewrite_search_path(tmp_path / "libtop.so", "$ORIGIN") == far
    assert "Library runpath: [$ORIGIN]" in subprocess.run(["readelf", "-d", str(tmp_path / "libtop.so")],
                                                          capture_output=True, text=True).stdout
    out = subprocess.run(["ldd", str(tmp_path / "libtop.so")], env={}, capture_output=True, text=True).stdout
    assert f"libdep.so => {tmp_path}/libdep.so" in out, out
    check = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).top())"
    assert subprocess.run([sys.executable, "-c", check, str(tmp_path / "libtop.so")], capture_output=True,
                          text=True, check=True).stdout.strip() == "42"
    assert rewrite_search_path(tmp_path / "libtop.so", "$ORIGIN") is None  # already right: untouched

    from multiexport import ArtifactError

    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "top.c"), f"-L{tmp_path}", "-ldep", "-Wl,-rpath,/x",
                    "-o", str(tmp_path / "libshort.so")], check=True)
    before = (tmp_path / "libshort.so").read_bytes()
    with pytest.raises(ArtifactError, match=r"search path '/x' is shorter than '\$ORIGIN'"):
        rewrite_search_path(tmp_path / "libshort.so", "$ORIGIN")
    assert (tmp_path / "libshort.so").read_bytes() == before
