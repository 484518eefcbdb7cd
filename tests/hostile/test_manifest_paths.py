"""A manifest is user input (issue 16, items 2, 13 and 15): every path it names stays inside the artifact,
file names never come from leaf names, and every malformed field is one line, exit 2, from the command line.

tests/exporting/test_manifest.py checks Manifest.read field by field in-process and tests/files/test_paths.py
checks `inside`; here the same hostile manifests go through the commands a user runs on them.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from multiexport import ArtifactError, load
from multiexport.files.npz import save_npz

from .conftest import assert_one_line, edit_manifest, refresh_inventory


def _role(artifact, suffix: str) -> tuple[str, str]:
    files = json.loads((artifact / "manifest.json").read_text())["files"]
    return next((role, name) for role, name in files.items() if name.endswith(suffix))


# -- item 2: manifest-controlled paths ------------------------------------------------------------------------

def test_an_alias_that_is_a_path_is_refused_by_every_command(artifact, sandbox):
    def edit(m):
        m["inputs"][1]["alias"] = "../../../pwned_in"
        m["outputs"][0]["alias"] = "../../../pwned_out"

    edit_manifest(artifact, edit)
    sandbox.rebase()
    with pytest.raises(ArtifactError, match=r"got alias '../../../pwned_in', expected an identifier"):
        load(artifact)
    for command in ("run", "native"):
        proc = sandbox.main(command, artifact)
        assert_one_line(proc, 2, "manifest.json", "alias '../../../pwned_in'", "expected an identifier")
    sandbox.assert_untouched()
    assert not list(sandbox.root.parent.glob("pwned*")) and not list(sandbox.root.parent.parent.glob("pwned*"))


@pytest.mark.subprocess
def test_the_iree_native_runner_names_its_files_by_index_never_by_alias(sandbox):
    """A real IREE artifact whose aliases are rewritten to other identifiers: the native run still works, so the
    files it writes cannot be named after aliases (which a manifest controls)."""
    pytest.importorskip("iree.runtime")
    from multiexport import export
    from multiexport.examples import seed
    from multiexport.native.run import run

    art = sandbox.root / "iree"
    export(seed(), art, "iree")

    def edit(m):
        for leaf in m["inputs"] + m["outputs"]:
            leaf["alias"] = "zz" + leaf["alias"]

    edit_manifest(art, edit)
    sandbox.rebase()
    result = run(art, {"foo.bar": np.arange(10, dtype=np.int32), "foo.baz": np.arange(10, dtype=np.int32)})
    assert int(result.outputs["out"]) == 45
    sandbox.assert_untouched()
    assert not sandbox.tmp_left()


def test_an_example_inputs_path_outside_the_artifact_is_refused_not_used(artifact, sandbox):
    outside = sandbox.user / "elsewhere.npz"
    save_npz(outside, {"foo.bar": np.zeros(10, np.int32), "foo.baz": np.full(10, 1000, np.int32)})
    edit_manifest(artifact, lambda m: m["files"].update(example_inputs=str(outside)))
    sandbox.rebase()
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, "example_inputs", str(outside), "leaves the directory")
    assert "10000" not in proc.stdout
    sandbox.assert_untouched()


def test_a_model_path_with_dot_dot_is_refused_even_when_the_file_is_there(artifact, sandbox):
    role, name = _role(artifact, ".jax_exported")
    shutil.move(artifact / name, sandbox.user / "m.bin")
    edit_manifest(artifact, lambda m: m["files"].update({role: "../user/m.bin"}))
    refresh_inventory(artifact)
    sandbox.rebase()
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, "'../user/m.bin' leaves the directory")
    sandbox.assert_untouched()


def test_a_model_file_that_is_a_symlink_out_of_the_artifact_is_refused(artifact, sandbox):
    _, name = _role(artifact, ".jax_exported")
    shutil.move(artifact / name, sandbox.user / "m.bin")
    os.symlink(sandbox.user / "m.bin", artifact / name)
    sandbox.rebase()
    with pytest.raises(ArtifactError, match=r"outside it \(a symlink\?\)"):
        load(artifact)
    sandbox.assert_untouched()


def test_export_over_an_artifact_whose_inventory_names_a_file_outside_deletes_nothing_outside(artifact, sandbox):
    from multiexport import export
    from multiexport.examples import seed

    victim = sandbox.root / "victim.txt"
    victim.write_text("precious")
    edit_manifest(artifact, lambda m: m["inventory"].update({"../victim.txt": 8}))
    sandbox.rebase()
    try:
        export(seed(), artifact, "xla")
    except ArtifactError:
        pass  # refusing it is fine too
    assert victim.read_text() == "precious"
    sandbox.assert_untouched("art")


# -- items 13 and 15: a malformed manifest is one line from the command line ---------------------------------

@pytest.mark.parametrize("label, edit, fragment", [
    ("list", lambda m: [], "got list, expected a JSON object"),
    ("null", lambda m: None, "got NoneType, expected a JSON object"),
    ("inputs str", lambda m: m.update(inputs="x"), "manifest.inputs | got str 'x', expected a list"),
    ("files list", lambda m: m.update(files=[]), "manifest.files | got list, expected an object"),
    ("backend int", lambda m: m.update(backend=3), "manifest.backend | got int '3', expected a string"),
    ("no outputs", lambda m: m.pop("outputs") and None, "manifest | has no 'outputs', expected one"),
    ("shape '10'", lambda m: m["inputs"][1].update(shape="10"), "inputs[1].shape | got str '10', expected a list"),
    ("shape {}", lambda m: m["inputs"][1].update(shape={}), "inputs[1].shape | got dict, expected a list"),
    ("dtype", lambda m: m["inputs"][1].update(dtype="object"), "expected a numeric or bool dtype"),
    ("param", lambda m: m["inputs"][1].update(param=-3), "got param -3"),
    ("schema", lambda m: m.update(schema="multiexport.manifest/99"), "expected 'multiexport.manifest/2'"),
])
def test_a_malformed_manifest_is_one_line_exit_2(artifact, sandbox, label, edit, fragment):
    path = artifact / "manifest.json"
    data = json.loads(path.read_text())
    new = edit(data)
    path.write_text(json.dumps(data if new is None and label not in ("null",) else new))
    sandbox.rebase()
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, "manifest.json", fragment)
    sandbox.assert_untouched()


def test_an_unknown_backend_in_a_manifest_is_a_user_mistake_not_a_backend_failure(artifact, sandbox):
    edit_manifest(artifact, lambda m: m.update(backend="tensorrt"))
    proc = sandbox.main("run", artifact)
    assert_one_line(proc, 2, "names backend 'tensorrt', expected one of")


def test_run_device_gpu_without_a_gpu_says_so_and_never_claims_the_gpu(sandbox):
    import jax

    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has a GPU: the message under test is for machines without one")
    art = sandbox.root / "gpu-art"
    from multiexport import export
    from multiexport.examples import seed

    export(seed(), art, "xla", platforms=["cpu", "cuda"])
    proc = sandbox.main("run", art, "--device", "gpu")
    assert_one_line(proc, 3, "gpu")
    assert "gpu" not in proc.stdout.lower()
