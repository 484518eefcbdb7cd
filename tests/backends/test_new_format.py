"""A new format is one backend package and one test file: nothing in the core names it.

`IreeTwin` is a format defined here alone: IREE's export under another name, with a native consumer of its own
declared here (`TwinConsumer`, IREE's own run tool driven through the `NativeConsumer` contract). Registered with
`multiexport.register_backend`, it is exported, loaded and run natively through the public API: the core finds its
consumer through `Backend.native_consumer`, its section's consumer id through `native_section.CONSUMERS`.

`SumTwin` is one whose native consumer is a program of ours that the core builds: XLA's export under another name,
with `sum_run` (sum_run.c beside this file, on the shared `common/` helpers) declared by its `Recipe`. The core
compiles it through `native.build` (found by program name through the registry), runs, times and bundles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pytest

import multiexport
from multiexport import examples
from multiexport.backends.iree import IreeBackend
from multiexport.backends.xla import XlaBackend
from multiexport.exporting.native_consumer import Call, NativeConsumer, Recipe
from multiexport.exporting.registry import get_backend

NAME = "iree_twin"
SUM_NAME = "xla_sum"  # sum_run.c refuses an artifact of another backend


@dataclass(frozen=True)
class TwinConsumer(NativeConsumer):
    """iree-run-module on the section's run_args, checked against what the manifest gives as IREE's are."""

    consumer: str = "iree_tools"  # the section's id: the twin writes IREE's section
    program: str = "iree-run-module"
    builds: bool = False  # a tool of the iree-base-runtime wheel, not a program of csrc/
    mkdir_outputs: bool = True

    def check(self, manifest: Any, native: Mapping[str, Any], directory: Path) -> None:
        from multiexport.backends.iree.native import IreeConsumer

        IreeConsumer().check(manifest, native, directory)

    def command(self, manifest: Any, native: Mapping[str, Any], call: Call, program: Path | None
                ) -> tuple[list[str], dict[str, str]]:
        from multiexport.backends.iree.native import iree_tool

        args = [a.replace("=@inputs/", f"=@{call.inputs_dir}/").replace("=@outputs/", f"=@{call.outputs_dir}/")
                for a in native["run_args"]]
        return [str(iree_tool("iree-run-module")), *args], {}


class IreeTwin(IreeBackend):
    """IREE's export and runner under a name no core file knows, with the consumer above."""

    name = NAME
    order = 1000

    def native_consumer(self) -> NativeConsumer:
        return TwinConsumer()


@pytest.fixture
def twin():
    from multiexport.exporting.registry import unregister

    multiexport.register_backend(NAME, f"{__name__}:IreeTwin")
    yield
    unregister(NAME)


def test_a_format_defined_in_a_test_exports_loads_and_runs_natively(twin, tmp_path):
    from multiexport.exporting.native_section import CONSUMERS
    from multiexport.native.run import consumer_of, print_command, run

    if not get_backend(NAME).available().ok:
        pytest.skip(f"iree unavailable: {get_backend(NAME).available().reason}")
    target = examples.seed()
    artifact = multiexport.export(target, tmp_path / "twin", NAME)
    assert artifact.manifest.backend == NAME and artifact.manifest.native["consumer"] == "iree_tools"
    assert CONSUMERS[NAME] == "iree_tools" and consumer_of(NAME) == "iree-run-module"
    feed = multiexport.signature(target).example_feed()
    python = multiexport.load(artifact.directory)(feed)
    native = run(artifact.directory, feed)
    assert native.outputs.keys() == python.keys()
    for name, value in python.items():
        np.testing.assert_allclose(native.outputs[name], np.asarray(value), rtol=1e-6, atol=1e-6)
    assert "iree-run-module" in print_command(artifact.directory)


@dataclass(frozen=True)
class SumConsumer(NativeConsumer):
    """sum_run: our own program (`builds`), from its recipe alone; it reads XLA's section, so it takes its id."""

    consumer: str = "pjrt_c_api"
    program: str = "sum_run"

    def recipe(self) -> Recipe:
        return Recipe("c", Path(__file__).resolve().parent / "sum_run.c", ("-std=c99",))


class SumTwin(XlaBackend):
    """XLA's export and runner under a name no core file knows, run natively by sum_run."""

    name = SUM_NAME
    order = 1001

    def native_consumer(self) -> NativeConsumer:
        return SumConsumer()


@pytest.fixture
def sum_twin(monkeypatch, tmp_path):
    from multiexport.exporting.registry import unregister

    monkeypatch.setenv("MULTIEXPORT_NATIVE_CACHE", str(tmp_path / "cache"))  # built here, from the recipe
    multiexport.register_backend(SUM_NAME, f"{__name__}:SumTwin")
    yield
    unregister(SUM_NAME)


def test_a_format_defined_in_a_test_builds_its_own_program_and_runs_it(sum_twin, tmp_path):
    from multiexport.native.build import build, consumers
    from multiexport.native.run import print_command, run

    target = examples.seed()
    artifact = multiexport.export(target, tmp_path / "sum", SUM_NAME)
    assert artifact.manifest.backend == SUM_NAME
    assert isinstance(consumers()["sum_run"], SumConsumer)
    program = build("sum_run")
    assert program.is_file() and program.is_relative_to(tmp_path / "cache")
    feed = multiexport.signature(target).example_feed()
    python = multiexport.load(artifact.directory)(feed)
    native = run(artifact.directory, feed, iters=5, warmup=1)
    assert native.command[0] == str(program)
    assert native.outputs.keys() == python.keys()
    for name, value in python.items():
        np.testing.assert_array_equal(native.outputs[name], np.asarray(value))
    assert native.timing is not None and native.timing["calls"] == 5 and len(native.samples_ns) == 5
    assert str(program) in print_command(artifact.directory)
    bundled = build("sum_run", bundled=True)  # the relocatable copy, cached beside the ordinary one
    assert bundled != program and bundled.is_file()


def test_a_format_defined_in_a_test_bundles_its_own_program(sum_twin, tmp_path):
    """The bundle holds the relocatable build of the recipe, proven by running it before it appears."""
    import subprocess

    from multiexport.native.bundle import bundle

    artifact = multiexport.export(examples.seed(), tmp_path / "sum", SUM_NAME)
    made = bundle(artifact.directory, tmp_path / "deploy")
    assert "bin/sum_run" in made.files
    proc = subprocess.run([str(made.directory / "run.sh")], env={}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    written = np.load(made.directory / "artifact" / "outputs" / "output0.npy")
    assert written.dtype == np.int32 and int(written) == 45
