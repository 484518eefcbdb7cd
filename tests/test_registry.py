from pathlib import Path

import pytest

from multiexport import BackendUnavailable
from multiexport.registry import BUILTIN, get_backend, names

TESTS = Path(__file__).parent / "backends"


def test_every_registered_backend_has_its_own_test_module():
    for name in names():
        assert (TESTS / f"test_{name}.py").is_file(), f"backend '{name}' has no tests/backends/test_{name}.py"


def test_builtin_backends_are_registered_and_named():
    assert "xla" in BUILTIN
    for name in BUILTIN:
        assert get_backend(name).name == name


def test_unknown_backend_is_a_typed_error():
    with pytest.raises(BackendUnavailable, match="Backend 'nope' | unknown, expected one of xla"):
        get_backend("nope")


def test_unavailable_backend_says_what_to_install():
    from multiexport.backend import Backend

    class Missing(Backend):
        name = "missing"
        requires = ("surely_not_an_installed_module_x",)
        extra = "missing"

    status = Missing().available()
    assert not status.ok and "multiexport[missing]" in status.reason
    with pytest.raises(BackendUnavailable, match="surely_not_an_installed_module_x"):
        Missing().load("/nonexistent")
