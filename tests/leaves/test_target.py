import sys
import textwrap

import pytest

from multiexport import Target, TargetError, load_target


def write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_no_target_is_the_seed_example():
    target = load_target(None)
    assert target.name == "seed"
    assert target.fn.__name__ == "sum_baz"


def test_file_target_attr_and_default_attr(tmp_path):
    path = write(tmp_path, "model.py", """
        import numpy as np
        from multiexport import Target
        target = Target(lambda x: x * 2, args=(np.ones(3, np.float32),), name="double")
        def make():
            return Target(lambda x: x + 1, args=(np.ones(2, np.float32),), name="inc")
    """)
    assert load_target(f"{path}:make").name == "inc"
    assert load_target(str(path)).name == "double"
    assert load_target(f"{path}:target").name == "double"


def test_file_target_can_import_its_siblings(tmp_path):
    write(tmp_path, "helper_mod_for_test.py", "SCALE = 3\n")
    path = write(tmp_path, "uses_sibling.py", """
        import numpy as np
        from helper_mod_for_test import SCALE
        from multiexport import Target
        target = Target(lambda x: x * SCALE, args=(np.ones(2, np.float32),))
    """)
    assert callable(load_target(str(path)).fn)


def test_module_target():
    assert load_target("multiexport.examples:mlp").name == "mlp"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing_file.py:t", "does not exist"),
        ("multiexport.no_such_module:t", "not found"),
        ("multiexport.examples:nope", "has no attribute 'nope'"),
        ("multiexport.examples:Foo", "class Foo"),
        ("multiexport.examples:sum_baz", "function that needs arguments"),
    ],
)
def test_bad_targets_say_what_is_wrong(spec, message):
    with pytest.raises(TargetError, match=message) as info:
        load_target(spec)
    assert spec in str(info.value)


def test_broken_files_and_factories(tmp_path):
    broken = write(tmp_path, "broken.py", "raise RuntimeError('boom at import')\n")
    with pytest.raises(TargetError, match="boom at import"):
        load_target(f"{broken}:t")
    path = write(tmp_path, "factories.py", """
        def bad():
            raise ValueError('no weights')
        def wrong():
            return 42
        number = 3
    """)
    with pytest.raises(TargetError, match="no weights"):
        load_target(f"{path}:bad")
    with pytest.raises(TargetError, match="factory returned int"):
        load_target(f"{path}:wrong")
    with pytest.raises(TargetError, match="got int"):
        load_target(f"{path}:number")


def test_target_validates_its_fields():
    with pytest.raises(TargetError, match="expected a callable"):
        Target(fn=3)
    t = Target(lambda x: x, args=[1.0])
    assert t.args == (1.0,) and t.name == "lambda"
    assert Target(lambda x: x, symbolic_batch=True).batch_symbol == "b"


def test_a_target_file_that_calls_sys_exit_is_a_target_error_not_an_exit(tmp_path):
    (tmp_path / "script.py").write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(TargetError, match=r"called sys.exit\(0\), expected a module that defines a Target"):
        load_target(f"{tmp_path / 'script.py'}:target")
    (tmp_path / "factory.py").write_text("import sys\ndef target():\n    sys.exit(3)\n")
    with pytest.raises(TargetError, match=r"the factory called sys.exit\(3\)"):
        load_target(f"{tmp_path / 'factory.py'}:target")


@pytest.mark.parametrize("field, value, message", [
    ("name", 3, "expected a string"),
    ("symbolic_batch", "not valid", "expected an identifier"),
    ("symbolic_batch", 3, "expected a dimension name or True"),
    ("polymorphic_shapes", {"x": 3}, "expected a mapping of leaf pattern"),
    ("batch_leaves", (1,), "expected glob pattern strings"),
])
def test_target_fields_are_validated(field, value, message):
    with pytest.raises(TargetError, match=message):
        Target(lambda x: x, args=(1.0,), **{field: value})


def test_a_module_in_the_working_directory_resolves_from_the_console_script(tmp_path):
    """`python -m multiexport` imports from the working directory and the `multiexport` script did not: the same
    TARGET must resolve from both."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    write(tmp_path / "mypkg", "models.py", """
        import numpy as np
        from multiexport import Target
        def double():
            return Target(lambda x: x * 2, args=(np.ones(3, np.float32),), name="double")
    """)
    script = shutil.which("multiexport", path=str(Path(sys.executable).parent))
    assert script is not None
    proc = subprocess.run([script, "signature", "mypkg.models:double", "--json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert '"name": "double"' in proc.stdout or '"target": "double"' in proc.stdout


def test_what_a_targets_build_imported_is_the_top_level_packages_new_after_it(tmp_path, monkeypatch):
    """The compare plans exports by the frameworks the target's build imported (keras-hub's TensorFlow): the
    packages new after the build, by top-level name, not everything this process ever imported."""
    from multiexport.leaves.target import load_target, top_level_packages

    package = tmp_path / "handoff_probe_framework"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("VALUE = 2.0\n")
    (tmp_path / "probe_model.py").write_text(
        "import numpy as np\nfrom handoff_probe_framework.sub import VALUE\nfrom multiexport import Target\n"
        "target = Target(lambda x: x * VALUE, args=(np.ones(3, np.float32),), name='probe')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = top_level_packages()
    load_target(f"{tmp_path / 'probe_model.py'}:target")
    new = top_level_packages() - before
    assert "handoff_probe_framework" in new and "numpy" not in new and "multiexport" not in new
    for name in [m for m in sys.modules if m.startswith(("handoff_probe_framework", "probe_model"))]:
        monkeypatch.delitem(sys.modules, name)
