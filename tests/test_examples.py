"""The built-in examples: the seed needs only JAX (flax is an extra), the flax examples load on first use.

Without flax is tested for real: a directory first on PYTHONPATH holds a `flax` package whose import fails
as an absent one does (ModuleNotFoundError naming flax), in the CLI and every worker it starts.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import multiexport.examples as examples

from .conftest import run_cli

FLAX_MODELS = Path(examples.__file__).parent / "flax_models.py"


def _no_flax(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "no-flax" / "flax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'flax'\", name='flax')\n")
    import os

    return {"PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "TMPDIR": str(tmp_path)}


def test_the_lazy_names_are_exactly_what_flax_models_defines():
    tree = ast.parse(FLAX_MODELS.read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.target.id for t in tree.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    assert examples.FLAX_EXAMPLES == {n for n in defined if not n.startswith("_")}
    assert examples.mlp().name == "mlp"  # resolved through the module's __getattr__


def test_the_seed_compares_without_flax(tmp_path):
    env = _no_flax(tmp_path)
    probe = run_cli("signature", env=env)  # the default TARGET, the seed
    assert probe.returncode == 0, probe.stderr
    assert "foo.bar" in probe.stdout and "foo.baz" in probe.stdout
    out = tmp_path / "out"
    proc = run_cli("compare", "--backends", "xla", "--no-bench", "--out-dir", out, env=env)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["backends"]["xla"]["status"] == "ok"
    assert [leaf["name"] for leaf in results["signature"]["inputs"]] == ["foo.bar", "foo.baz"]


def test_a_flax_example_without_flax_is_one_line_saying_what_to_install(tmp_path):
    proc = run_cli("signature", "multiexport.examples:mlp", env=_no_flax(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Example 'mlp' | needs flax, which is not installed: pip install 'multiexport[flax]'" in proc.stderr
    assert "Traceback" not in proc.stderr
