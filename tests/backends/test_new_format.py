"""A new format is one backend package and one test file: nothing in the core names it.

`IreeTwin` is a format defined here alone: IREE's export under another name, with a native consumer of its own
declared here (`TwinConsumer`, IREE's own run tool driven through the `NativeConsumer` contract). Registered with
`multiexport.register_backend`, it is exported, loaded and run natively through the public API: the core finds its
consumer through `Backend.native_consumer`, its section's consumer id through `native_section.CONSUMERS`.
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
from multiexport.exporting.native_consumer import Call, NativeConsumer
from multiexport.exporting.registry import get_backend

NAME = "iree_twin"


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
