"""The Python API is the engine the CLI calls (issue 30): nothing shadows it, a TARGET string measures as the
CLI does, backends register from outside, and the config and result types are exported."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil

import pytest

import multiexport
from multiexport.measure.bench import BenchConfig

API = ("as_target", "compare", "describe", "export", "load", "register_backend", "signature", "target_spec")


def test_no_subpackage_shadows_a_function_of_the_api():
    """Importing every module of the package (as any caller may) leaves each API name a function."""
    for info in pkgutil.walk_packages(multiexport.__path__, "multiexport."):
        if info.name.startswith("multiexport.backends") or info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    for name in API:
        assert inspect.isfunction(getattr(multiexport, name)), (name, getattr(multiexport, name))
        assert not importlib.util.find_spec(f"multiexport.{name}"), f"a module multiexport.{name} would shadow it"


def test_the_config_and_result_types_are_exported_and_documented():
    for name in ("CompareConfig", "BenchConfig", "ExportOptions", "RunOptions", "Results", "Runner", "Artifact",
                 "Signature", "Target", "Status"):
        assert inspect.isclass(getattr(multiexport, name)), name
    for name in API:
        doc = inspect.getdoc(getattr(multiexport, name)) or ""
        assert doc, name
    for name in ("compare", "register_backend"):
        assert "Args:" in inspect.getdoc(getattr(multiexport, name))


def test_compare_takes_its_options_by_name_and_refuses_unknown_ones(tmp_path):
    with pytest.raises(TypeError):
        multiexport.compare("multiexport.examples:seed", no_such_option=1, out_dir=tmp_path)  # type: ignore[call-arg]
    with pytest.raises(multiexport.UsageError, match="Option 'trials'"):
        multiexport.compare("multiexport.examples:seed", trials=0, out_dir=tmp_path)
    with pytest.raises(multiexport.TargetError, match="example arguments with a TARGET string"):
        multiexport.compare("multiexport.examples:seed", 1.0, out_dir=tmp_path)


def test_a_target_string_is_measured_as_the_cli_does_and_an_object_in_process(tmp_path):
    """A TARGET string: exports in workers and the reference timed in a worker, in paired rounds (the CLI's
    measurement). A Target object cannot be sent to a worker: its exports and reference run here."""
    bench = BenchConfig(warmup_iters=1, warmup_time=0.01, min_iters=5, bench_time=0.05)
    by_string = multiexport.compare("multiexport.examples:seed", backends=["xla"], out_dir=tmp_path / "s",
                                    bench=bench, trials=1)
    assert by_string.pairing is not None and by_string.pairing.mode == "paired"
    assert by_string.reference.bench is not None and by_string.reference.bench.process != "parent"
    assert by_string.backends["xla"].status is multiexport.Status.OK
    # its timeline starts with the target build and is contiguous to the end; results.json and the report keep it
    from multiexport.api import BUILD_STEP
    from multiexport.results import load_results

    steps = load_results(tmp_path / "s" / "results.json").timeline
    assert steps[0].what == BUILD_STEP and steps[0].at_s < 1.0
    assert any(s.what.startswith("export with xla") for s in steps) and all(s.seconds >= 0 for s in steps)
    for before, after in zip(steps, steps[1:]):
        assert after.at_s == pytest.approx(before.at_s + before.seconds, abs=2e-3)
    assert "## Where the time went" in (tmp_path / "s" / "report.md").read_text()

    from multiexport.examples import seed

    by_object = multiexport.compare(seed(), backends=["xla"], out_dir=tmp_path / "o", bench=bench, trials=1)
    assert by_object.reference.bench is not None and by_object.reference.bench.process == "parent"
    assert by_object.backends["xla"].status is multiexport.Status.OK


def test_a_backend_registered_from_outside_is_selectable():
    from multiexport.exporting.registry import names, unregister

    multiexport.register_backend("xla_again", "multiexport.backends.xla:XlaBackend")
    try:
        assert "xla_again" in names()
        assert multiexport.CompareConfig(backends=("xla_again",)).backends == ("xla_again",)
    finally:
        unregister("xla_again")
    with pytest.raises(multiexport.BackendUnavailable, match="is built in"):
        multiexport.register_backend("xla", "multiexport.backends.xla:XlaBackend")


def test_a_closed_runner_releases_its_runtime_and_refuses_calls(tmp_path):
    from multiexport.examples import seed

    target = seed()
    multiexport.export(target, tmp_path / "xla", backend="xla")
    feed = multiexport.signature(target).example_feed()
    with multiexport.load(tmp_path / "xla") as runner:
        assert set(runner(feed)) == {leaf.name for leaf in runner.manifest.outputs}
        held = set(vars(runner)) - {"manifest", "directory", "options"}
        assert held  # the runtime's handles (the XLA runner's executable)
    assert set(vars(runner)) == {"manifest", "directory", "options", "_closed"}  # every handle dropped
    with pytest.raises(multiexport.RunError, match="closed runner"):
        runner(feed)
    runner.close()  # twice is harmless


# One calling convention (issue 47, item 8): a function with its example arguments, a Target, or a TARGET
# string, alike, for every verb; each returns an object with the next verbs on it.

def _mlp(params, x):
    return {"y": x @ params["w"] + params["b"]}


def _mlp_args():
    import numpy as np

    rng = np.random.default_rng(0)
    return ({"w": rng.normal(size=(4, 3)).astype(np.float32), "b": rng.normal(size=3).astype(np.float32)},
            rng.normal(size=(2, 4)).astype(np.float32))


def _three_forms():
    params, x = _mlp_args()
    return {"function": (_mlp, params, x), "target": (multiexport.Target(_mlp, args=(params, x)),),
            "string": ("multiexport.examples:seed",)}


@pytest.mark.parametrize("form", ["function", "target", "string"])
def test_signature_takes_every_form_and_returns_a_signature_with_the_next_verbs(form, tmp_path):
    sig = multiexport.signature(*_three_forms()[form])
    assert isinstance(sig, multiexport.Signature) and isinstance(sig, multiexport.TargetSignature)
    names = {"function": ["params.b", "params.w", "x"], "target": ["params.b", "params.w", "x"],
             "string": ["foo.bar", "foo.baz"]}[form]
    assert [leaf.name for leaf in sig.inputs] == names
    exported = sig.export(out_dir=tmp_path / "a", backend="xla")
    assert isinstance(exported, multiexport.Exported) and exported.manifest.backend == "xla"
    assert [leaf.name for leaf in exported.manifest.inputs] == names
    assert [row["name"] for row in sig.describe()["inputs"]] == names


@pytest.mark.parametrize("form", ["function", "target", "string"])
def test_export_takes_every_form_and_the_artifact_runs_from_disk(form, tmp_path):
    import numpy as np

    exported = multiexport.export(*_three_forms()[form], backend="xla", out_dir=tmp_path / "a")
    assert isinstance(exported, multiexport.Artifact) and exported.directory == tmp_path / "a"
    outputs = exported.run()  # the artifact's own example inputs
    if form != "string":
        params, x = _mlp_args()
        np.testing.assert_allclose(outputs["out.y"], x @ params["w"] + params["b"], rtol=1e-5)
        zeros = {"params.w": params["w"], "params.b": params["b"], "x": np.zeros_like(x)}
        np.testing.assert_allclose(exported.run(zeros)["out.y"], np.broadcast_to(params["b"], (2, 3)), rtol=1e-6)
    with multiexport.load(exported) as runner:  # load takes the Artifact itself too
        assert set(runner(dict(np.load(tmp_path / "a" / "example_inputs.npz")))) == set(outputs)


def test_the_call_of_the_release_before_still_works(tmp_path):
    target = multiexport.Target(_mlp, args=_mlp_args())
    assert multiexport.export(target, tmp_path / "a").manifest.backend == "xla"  # export(target, out_dir)
    assert multiexport.export(target, tmp_path / "b", "onnx").manifest.backend == "onnx"  # (target, out_dir, backend)
    assert multiexport.export(target, tmp_path / "c", backend="xla").backend == "xla"


def test_an_ambiguous_export_call_is_a_type_error_that_says_what_to_write(tmp_path):
    params, x = _mlp_args()
    target = multiexport.Target(_mlp, args=(params, x))
    with pytest.raises(TypeError, match="missing out_dir.*give out_dir= and backend= by keyword"):
        multiexport.export(_mlp, params, x, tmp_path / "a")  # a path among a function's example arguments
    with pytest.raises(TypeError, match="multiple values for 'out_dir'"):
        multiexport.export(target, tmp_path / "a", out_dir=tmp_path / "b")
    with pytest.raises(TypeError, match="multiple values for 'backend'"):
        multiexport.export(target, tmp_path / "a", "onnx", backend="xla")
    with pytest.raises(TypeError, match="at most out_dir and backend"):
        multiexport.export(target, tmp_path / "a", "xla", "extra")
    with pytest.raises(multiexport.TargetError, match="example arguments with a TARGET string"):
        multiexport.signature("multiexport.examples:seed", x)
    with pytest.raises(multiexport.TargetError, match="extra example arguments"):
        multiexport.signature(target, x)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_compare_takes_a_function_with_its_arguments_and_an_export_compares_itself(tmp_path):
    params, x = _mlp_args()
    results = multiexport.compare(_mlp, params, x, backends=["xla"], out_dir=tmp_path / "c", bench=None, trials=1)
    assert results.backends["xla"].status is multiexport.Status.OK
    exported = multiexport.export(_mlp, params, x, backend="onnx@fp16", out_dir=tmp_path / "a")
    again = exported.compare(out_dir=tmp_path / "again", bench=None, trials=1)
    assert list(again.backends) == ["onnx@fp16"]  # the same format at the same precision
    assert (tmp_path / "again" / "results.json").is_file()
