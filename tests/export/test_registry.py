from pathlib import Path

import pytest

from multiexport import BackendUnavailable, UsageError
from multiexport.export import Backend
from multiexport.export.registry import backend_class, builtin, display, get_backend, names

TESTS = Path(__file__).parents[1] / "backends"


def test_every_registered_backend_has_its_own_test_module():
    for name in names():
        assert (TESTS / f"test_{name}.py").is_file(), f"backend '{name}' has no tests/backends/test_{name}.py"


def test_builtin_backends_are_found_by_scanning_the_package_in_their_order():
    found = builtin()
    assert list(found)[:4] == ["xla", "savedmodel", "onnx", "iree"]
    for name in found:
        cls = backend_class(name)
        assert get_backend(name).name == name and cls.summary and cls.color.startswith("#")
        assert display(name) == {"summary": cls.summary, "color": cls.color}


def test_unknown_backend_is_a_typed_error():
    with pytest.raises(BackendUnavailable, match=r"Backend 'nope' \| unknown, expected one of xla"):
        get_backend("nope")


def test_unavailable_backend_says_what_to_install():
    class Missing(Backend):
        name = "missing"
        requires = ("surely_not_an_installed_module_x",)
        extra = "missing"

    status = Missing().available()
    assert not status.ok and "multiexport[missing]" in status.reason
    with pytest.raises(BackendUnavailable, match="surely_not_an_installed_module_x"):
        Missing().load("/nonexistent")


def test_backend_options_are_declared_data_validated_by_name_type_and_range():
    onnx = get_backend("onnx")
    assert onnx.resolve_options({}) == {o.name: o.default for o in onnx.options}
    assert onnx.resolve_options({"opset": "19"})["opset"] == 19
    with pytest.raises(UsageError, match=r"Option 'onnx.opsett' \| unknown, expected one of: opset"):
        onnx.resolve_options({"opsett": 21})
    with pytest.raises(UsageError, match=r"Option 'onnx.opset' \| got 'x', expected a int"):
        onnx.resolve_options({"opset": "x"})
    with pytest.raises(UsageError, match=r"Option 'onnx.opset' \| got 3, expected >= 17"):
        onnx.resolve_options({"opset": 3})
    with pytest.raises(UsageError, match=r"Option 'xla.anything' \| unknown, expected one of: none"):
        get_backend("xla").resolve_options({"anything": 1})
