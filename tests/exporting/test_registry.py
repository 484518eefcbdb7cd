from pathlib import Path

import pytest

from multiexport import BackendUnavailable, UsageError
from multiexport.exporting import Backend
from multiexport.exporting.registry import backend_class, builtin, display, get_backend, names

TESTS = Path(__file__).parents[1] / "backends"


def test_every_registered_backend_has_its_own_test_module():
    for name in names():
        module = f"test_{name.replace('-', '_')}.py"  # a module name has no dash
        assert (TESTS / module).is_file(), f"backend '{name}' has no tests/backends/{module}"


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
    with pytest.raises(UsageError, match=r"Option 'onnx.opsett' \| unknown, expected one of: route, opset"):
        onnx.resolve_options({"opsett": 21})
    with pytest.raises(UsageError, match=r"Option 'onnx.opset' \| got 'x', expected a int"):
        onnx.resolve_options({"opset": "x"})
    with pytest.raises(UsageError, match=r"Option 'onnx.opset' \| got 3, expected >= 17"):
        onnx.resolve_options({"opset": 3})
    with pytest.raises(UsageError, match=r"Option 'xla.anything' \| unknown, expected one of: none"):
        get_backend("xla").resolve_options({"anything": 1})


def test_every_backend_declares_its_distributions_and_its_extra_installs_them():
    """The backend owns its install facts: each distribution it names is in pyproject.toml's extra for it
    (the core's dependencies for XLA), and a compare's environment records their versions from there."""
    import re
    import tomllib

    from multiexport.environment import distributions, environment
    from multiexport.exporting.registry import backend_class, builtin

    from ..conftest import REPO

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}

    for name in builtin():
        cls = backend_class(name)
        assert cls.distributions, name
        listed = names(project["optional-dependencies"][cls.extra]) if cls.extra else names(project["dependencies"])
        # the SavedModel and LiteRT backends take TensorFlow as tensorflow-cpu (the extra) or tensorflow (GPU)
        assert set(cls.distributions) - {"tensorflow"} <= listed, (name, cls.distributions, listed)
        assert set(cls.distributions) <= set(distributions())
    recorded = environment()["versions"]
    assert {"openvino", "ai-edge-litert"} & set(recorded)  # the two runtimes the hand-kept list had missed
