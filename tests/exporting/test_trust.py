"""The trust gate of the backend contract (issue 28): `Backend.load` passes `check_untrusted` before the
backend's own loading code runs, unless the caller trusts the artifact; every format that declares it
carries code implements the check."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiexport import ArtifactError
from multiexport.exporting import Backend, RunOptions
from multiexport.exporting.registry import backend_class, names


class _Gate(ArtifactError):
    pass


def _gated(base: type[Backend], calls: list[str]) -> Backend:
    class Gated(base):  # type: ignore[valid-type, misc]
        carries_code = True

        def _check_untrusted_impl(self, manifest, directory: Path) -> None:
            calls.append("check")
            raise _Gate(f"Artifact '{directory}' | refused by the gate")

        def _load_impl(self, manifest, directory, options):
            calls.append("load")
            return super()._load_impl(manifest, directory, options)

    return Gated()


@pytest.fixture(scope="module")
def seed_xla(tmp_path_factory) -> Path:
    from multiexport import export
    from multiexport.examples import seed

    out = tmp_path_factory.mktemp("trust") / "xla"
    export(seed(), out, "xla")
    return out


def test_load_passes_the_gate_before_the_backend_reads_anything(seed_xla):
    calls: list[str] = []
    backend = _gated(backend_class("xla"), calls)
    with pytest.raises(_Gate):
        backend.load(seed_xla)
    assert calls == ["check"]
    backend.load(seed_xla, RunOptions(trust_artifact=True))
    assert calls == ["check", "load"]


def test_a_format_without_code_passes_the_gate_as_is(seed_xla):
    backend_class("xla")().check_untrusted(seed_xla)


@pytest.mark.parametrize("name", names())
def test_every_format_that_carries_code_implements_the_check(name):
    cls = backend_class(name)
    if cls.carries_code:
        assert cls._check_untrusted_impl is not Backend._check_untrusted_impl, name
