"""Every registered backend runs every case of the shared registry: export, then run from disk in a fresh
process (one per backend, for all its artifacts), outputs checked with the parity engine (XLA: bit-exact).

A backend that cannot support a case lists it in KNOWN_UNSUPPORTED in its own test module
(tests/backends/test_NAME.py) as case -> (category, reason); the export must then fail with an
ExportError of exactly that category.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import subprocess
from pathlib import Path

import jax
import pytest

from multiexport import ExportError
from multiexport.exporting import ExportOptions
from multiexport.exporting.registry import get_backend, names
from multiexport.files.npz import load_npz, save_npz
from multiexport.leaves import build_signature
from multiexport.measure.parity import compare_leaf
from multiexport.measure.tolerance import EXACT, default_tolerance

from ..cases import CASES, CASE_IDS, EXTERNAL_BACKENDS, external_backend, feed_for, in_fresh_process
from ..conftest import REPO, reference_outputs

# XLA compiles the very module jax.jit runs, so it must agree bit for bit; other formats get the defaults.
BIT_EXACT = {"xla"}


def known_unsupported(backend_name: str) -> dict[str, tuple[str, str]]:
    try:
        module = importlib.import_module(f"tests.backends.test_{backend_name.replace('-', '_')}")
    except ImportError:
        return {}
    return getattr(module, "KNOWN_UNSUPPORTED", {})


def _x64(case):
    return jax.enable_x64(True) if case.x64 else contextlib.nullcontext()


@pytest.fixture(scope="module", params=[*names(), *EXTERNAL_BACKENDS])
def runs(request, tmp_path_factory):
    """Every case exported by one backend, then run in one fresh process; per case what happened. The external
    backends (the SDK's reference backend) are registered from outside the package for their run only."""
    with external_backend(request.param) if request.param in EXTERNAL_BACKENDS else contextlib.nullcontext():
        return _runs(get_backend(request.param), tmp_path_factory)


def _runs(backend, tmp_path_factory):
    status = backend.available()
    if not status.ok:
        pytest.skip(f"backend {backend.name} unavailable: {status.reason}")
    root = tmp_path_factory.mktemp(backend.name)
    done, jobs = {}, []
    for c in CASES:
        with _x64(c):
            target = c.make()
            sig = build_signature(target)
            try:
                artifact = backend.export(target.fn, sig, root / c.name, ExportOptions(**c.options))
            except ExportError as exc:
                done[c.name] = {"error": exc}
                continue
            feeds = []
            for batch in c.batch_sizes or (None,):
                feed = feed_for(sig, batch)
                stem = root / f"{c.name}-{batch}"
                save_npz(f"{stem}.in.npz", feed)
                feeds.append((batch, f"{stem}.in.npz", reference_outputs(target, sig, feed), f"{stem}.out.npz"))
            jobs.append({"artifact": str(artifact.directory), "feeds": [[inp, out] for _, inp, _, out in feeds]})
            done[c.name] = {"artifact": artifact, "sig": sig, "feeds": feeds}
    (root / "jobs.json").write_text(json.dumps(jobs))
    code = f"import sys; from tests.run_many import main; sys.exit(main({str(root / 'jobs.json')!r}))"
    subprocess.run(in_fresh_process(backend.name, code), cwd=REPO, check=True, timeout=900)
    return backend, done


@pytest.mark.subprocess
@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_export_then_run_from_disk_in_a_fresh_process(runs, c):
    backend, done = runs
    result = done[c.name]
    expected_failure = known_unsupported(backend.name).get(c.name)
    if expected_failure and expected_failure[0] == "size-unsupported":
        assert_sizes_refused(backend, result)
        pytest.xfail(f"{backend.name} runs {c.name} at the sizes it was built for only: {expected_failure[1]}")
    if expected_failure:
        category, reason = expected_failure
        assert "error" in result, f"{backend.name} now supports {c.name}: remove it from KNOWN_UNSUPPORTED"
        assert result["error"].category == category, str(result["error"])
        pytest.xfail(f"{backend.name} does not support {c.name} ({category}): {reason}")
    assert "error" not in result, str(result.get("error"))
    m, sig = result["artifact"].manifest, result["sig"]
    assert [leaf.name for leaf in m.inputs] == [leaf.name for leaf in sig.inputs]
    assert {leaf.name for leaf in m.inputs if leaf.used} == set(c.used)
    assert {leaf.name for leaf in m.inputs if not leaf.used} == set(c.unused)
    assert all(leaf.param is not None for leaf in m.inputs if leaf.used)
    assert [(leaf.name, leaf.dtype) for leaf in m.inputs] == [(leaf.name, leaf.dtype) for leaf in sig.inputs]
    assert "example_inputs" in m.files  # `multiexport run DIR` works on every artifact as it is
    directory = result["artifact"].directory
    assert_manifest_valid(directory)
    assert_facts_typed(backend, directory)
    for batch, _feed, want, out in result["feeds"]:
        error = __import__("pathlib").Path(out).with_suffix(".error.txt")
        assert not error.exists(), error.read_text() if error.exists() else ""
        got = load_npz(out)
        assert list(got) == [leaf.name for leaf in sig.outputs]
        for leaf in sig.outputs:
            assert got[leaf.name].shape == want[leaf.name].shape, (leaf.name, batch)
            tol = EXACT if backend.name in BIT_EXACT else default_tolerance(leaf.dtype)
            verdict = compare_leaf(leaf.name, got[leaf.name], want[leaf.name], leaf.dtype, tol, f"batch={batch}")
            assert verdict.passed, verdict.reasons


def assert_sizes_refused(backend, result) -> None:
    """A format that keeps no symbolic dim (KNOWN_UNSUPPORTED as `size-unsupported`): the driver's static-size
    fallback made one model per size built, and a size it was not built for is refused in one line, not run."""
    from multiexport.exporting.facts import StaticSizesFacts

    assert "error" not in result, str(result.get("error"))
    assert isinstance(backend.facts(result["artifact"].manifest), StaticSizesFacts)
    errors = [Path(out).with_suffix(".error.txt") for _, _, _, out in result["feeds"]]
    assert errors and all("expected one of the sizes it was built for" in e.read_text() for e in errors if e.exists())


def assert_facts_typed(backend, directory) -> None:
    """The manifest's `format` reads back as the backend's typed facts, and every fact the export wrote is a
    declared field of them (the round trip loses nothing); a static-sizes artifact's models likewise."""
    from multiexport.exporting import Manifest
    from multiexport.exporting.facts import StaticSizesFacts
    from multiexport.exporting.static_fallback import models_of

    manifest = Manifest.read(directory)
    facts = backend.facts(manifest, str(directory))
    assert facts.to_json() == manifest.format
    if isinstance(facts, StaticSizesFacts):
        for model in models_of(manifest, directory).values():
            assert_facts_typed(backend, model)
    else:
        assert type(facts) is backend.facts_type


def assert_manifest_valid(directory) -> None:
    """The artifact's manifest.json against the shipped JSON Schema, and every file its native section tells a
    consumer to read exists (example inputs in inputs/, static modules, weights)."""
    from multiexport.exporting.manifest import SCHEMA_PATH
    from multiexport.exporting.native_section import INPUT_DIR

    jsonschema = pytest.importorskip("jsonschema", reason="the test extra brings jsonschema")
    document = json.loads((directory / "manifest.json").read_text())
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).iter_errors(document)]
    assert not problems, problems
    native = document.get("native") or {}
    assert not native or native["inputs_written"] is True, "every registry case has example values"
    bindings = [native, *(native.get("static_modules") or {}).values()]
    for binding in bindings:
        for entry in binding.get("args", []):
            where = directory / INPUT_DIR / entry["file"] if entry.get("kind") == "leaf" else None
            if entry.get("kind") == "weight":
                where = directory / entry["file"]
            assert where is None or where.is_file(), f"native.args names {entry.get('file')}, which was not written"
        if binding is not native:
            assert (directory / binding["program"]).is_file(), binding["program"]
    for key in ("program", "model", "compile_options"):
        if key in native:
            assert (directory / native[key]).is_file(), native[key]


@pytest.mark.parametrize("c", [c for c in CASES if c.unused], ids=lambda c: c.name)
def test_keep_unused_makes_every_leaf_a_parameter_in_leaf_order(c, tmp_path):
    for name in names():
        backend = get_backend(name)
        if not backend.available().ok or c.name in known_unsupported(name):
            continue
        target = c.make()
        sig = build_signature(target)
        m = backend.export(target.fn, sig, tmp_path / name, ExportOptions(keep_unused=True)).manifest
        assert m.keep_unused and all(leaf.used for leaf in m.inputs), name
        assert all(leaf.param is not None for leaf in m.inputs), name
        ref = reference_outputs(target, sig, sig.example_feed())
        got = backend.load(tmp_path / name)(sig.example_feed())
        verdict = compare_leaf("out", got["out"], ref["out"], sig.outputs[0].dtype, default_tolerance(sig.outputs[0].dtype))
        assert verdict.passed, (name, verdict.reasons)
