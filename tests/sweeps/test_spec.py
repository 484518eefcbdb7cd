"""The sweep spec: every field checked when it is read, globs expanded, --only and --shard selections."""

from __future__ import annotations

from pathlib import Path

import pytest

from multiexport.cli.sweep_commands import compare_refusal
from multiexport.errors import UsageError
from multiexport.sweeps.spec import load_spec, select


def _spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def test_a_spec_gives_each_target_its_backends_args_tags_resources_and_a_name(tmp_path):
    spec = load_spec(_spec(tmp_path, """
[sweep]
name = "nightly"
backends = ["xla", "onnx"]
args = ["--no-bench"]
timeout = 100

[[target]]
target = "multiexport.examples:seed"
tags = ["quick"]

[[target]]
target = "models/net.py:build"
backends = ["litert"]
args = ["--trials", "1"]
resources = { cpus = 2, gpus = 1, memory_gib = 8, arch = "aarch64" }
timeout = 50
"""))
    seed, net = spec.tasks
    assert (spec.name, seed.name, seed.backends, seed.args, seed.tags, seed.timeout) == (
        "nightly", "seed", ("xla", "onnx"), ("--no-bench",), ("quick",), 100.0)
    assert (net.name, net.backends, net.args, net.timeout) == ("net.build", ("litert",), ("--no-bench", "--trials", "1"), 50.0)
    assert (net.resources.cpus, net.resources.gpus, net.resources.memory_gib, net.resources.arch) == (2, 1, 8, "aarch64")
    assert net.compare_args(Path("/o/net")) == ["compare", "models/net.py:build", "--out-dir", "/o/net", "--backends", "litert",
                                                "--no-bench", "--trials", "1"]
    assert seed.fingerprint() != net.fingerprint()


def test_a_file_glob_expands_against_the_spec_s_directory_and_an_attr_glob_against_all(tmp_path):
    (tmp_path / "models").mkdir()
    for name in ("b", "a"):
        (tmp_path / "models" / f"{name}.py").write_text("target = None\n")
    (tmp_path / "zoo.py").write_text("__all__ = ['net_small', 'net_big', 'other']\n")
    spec = load_spec(_spec(tmp_path, '[[target]]\ntarget = "models/*.py"\n\n[[target]]\ntarget = "zoo.py:net_*"\n'))
    assert [(t.name, t.target) for t in spec.tasks] == [
        ("a", "models/a.py"), ("b", "models/b.py"), ("zoo.net_small", "zoo.py:net_small"), ("zoo.net_big", "zoo.py:net_big")]


@pytest.mark.parametrize("text, message", [
    ('[[target]]\ntarget = "m:x"\ncolour = 1\n', "unknown key(s) colour"),
    ('[sweep]\nbackends = ["xla", "tensorrt"]\n[[target]]\ntarget = "m:x"\n', "expected \"all\" or backends of"),
    ('[sweep]\n', "no [[target]] tables"),
    ('[[target]]\ntarget = "m:x"\n[[target]]\ntarget = "n:x"\n', "name 'x' is given to both 'm:x' and 'n:x'"),
    ('[[target]]\ntarget = "m:x"\nargs = ["--out", "elsewhere"]\n', "args has '--out'"),
    ('[[target]]\ntarget = "m:x"\nresources = { gpus = -1 }\n', "resources.gpus | got -1"),
    ('[[target]]\ntarget = "m:x"\nname = "../up"\n', "not a plain file name"),
    ('[[target]]\ntarget = "models/*.py"\n', "matches no file"),
    ('[[target]\n', "not TOML"),
])
def test_a_bad_spec_is_one_line_naming_what_is_wrong(tmp_path, text, message):
    with pytest.raises(UsageError) as info:
        load_spec(_spec(tmp_path, text))
    assert message in str(info.value) and "sweep.toml" in str(info.value) and "\n" not in str(info.value)


def test_a_flag_compare_refuses_is_refused_when_the_spec_is_read(tmp_path):
    path = _spec(tmp_path, '[[target]]\ntarget = "m:x"\nargs = ["--trails", "2"]\n')
    with pytest.raises(UsageError, match=r"target 'x' \| args \['--trails', '2'\]: unrecognized arguments: --trails"):
        load_spec(path, check_args=compare_refusal)
    ok = _spec(tmp_path, '[[target]]\ntarget = "m:x"\nargs = ["--trials", "2"]\n')
    assert load_spec(ok, check_args=compare_refusal).tasks[0].args == ("--trials", "2")


def test_only_takes_names_or_tags_and_the_shards_cover_every_task_once(tmp_path):
    text = "".join(f'[[target]]\ntarget = "m:t{i}"\ntags = ["{"even" if i % 2 == 0 else "odd"}"]\n\n' for i in range(7))
    tasks = load_spec(_spec(tmp_path, text)).tasks
    assert [t.name for t in select(tasks, only="even,t3")] == ["t0", "t2", "t3", "t4", "t6"]
    shards = [[t.name for t in select(tasks, shard=f"{i}/3")] for i in (1, 2, 3)]
    assert shards == [["t0", "t3", "t6"], ["t1", "t4"], ["t2", "t5"]]
    assert sorted(sum(shards, [])) == sorted(t.name for t in tasks)
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(UsageError, match="Option '--shard'"):
            select(tasks, shard=bad)
    with pytest.raises(UsageError, match="Option '--only' | got nope"):
        select(tasks, only="nope")


def test_the_real_model_zoo_s_spec_is_its_registry():
    """benchmarks/real_models/zoo.toml is what `python -m benchmarks.real_models --write-spec` writes now, and
    reads back as one task per registry entry with the entry's target, tags and compare flags."""
    from benchmarks.real_models import REAL_MODELS
    from benchmarks.real_models._run import SPEC, spec_text

    assert SPEC.read_text() == spec_text(REAL_MODELS), "run `python -m benchmarks.real_models --write-spec`"
    spec = load_spec(SPEC, check_args=compare_refusal)
    assert spec.directory == Path(__file__).resolve().parents[2]  # root = "../..": the repository
    assert [(t.name, t.target, t.tags) for t in spec.tasks] == [(m.name, m.target, m.tags) for m in REAL_MODELS]
    assert all(t.args[5:] == tuple(m.compare_flags()) for t, m in zip(spec.tasks, REAL_MODELS))
    assert [t.name for t in select(spec.tasks, only="quick")] == [m.name for m in REAL_MODELS if m.quick]
