"""`tbgen add batcher`: what it writes into an existing project, and the models it refuses before writing
anything (the strategies themselves are built and proven in tests/templates/test_batching_strategies.py)."""

from __future__ import annotations

import pytest
from conftest import new_project, run_tbgen, snapshot

from triton_backend_gen.errors import UsageError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold.batcher import add_batcher


def test_a_strategy_is_written_and_wired(tmp_path):
    project = new_project(tmp_path, "python-backend", "max_batch_size=4")
    result = run_tbgen(
        "add", "batcher", "add_sub", "--strategy", "tokens", "--input", "INPUT1", "--project", str(project)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MAX_BATCH_ELEMENTS" in result.stdout and f"`tbgen build {project}`" in result.stdout
    loaded = load_project(project)
    assert loaded.models[0].batch_strategy == "tokens"
    assert {p.name for p in (project / "batching" / "add_sub").iterdir()} >= {"batcher.cc", "decision.h"}
    assert (project / "batching" / "CMakeLists.txt").is_file()
    parameters = load_model_config(loaded.models[0].config_file).parameters
    # 16 elements of INPUT1 per row, max(1, 4 // 2) rows
    assert parameters["MAX_BATCH_ELEMENTS"].string_value == "32"
    assert parameters["BATCH_ELEMENTS_INPUT"].string_value == "INPUT1"
    assert "model_repository/*/batchstrategy.so" in (project / ".gitignore").read_text().splitlines()
    validated = run_tbgen("validate", str(project))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    again = run_tbgen("add", "batcher", "add_sub", "--strategy", "volume", "--project", str(project))
    assert again.returncode == 2 and "has a batching strategy already (tokens" in again.stderr


def test_a_custom_rule_gets_its_mirror_in_the_models_reference(tmp_path):
    project = new_project(tmp_path, "python-backend")
    added = add_batcher(load_project(project), "add_sub", "custom", limit=3)
    assert dict(added.parameters) == {"MAX_BATCH_REQUESTS": "3"}
    reference = (project / "reference.py").read_text()
    assert reference.count("def include_request(") == 1
    namespace: dict = {}
    exec(compile(reference, "reference.py", "exec"), namespace)  # noqa: S102 - the generated reference
    batch = type("Batch", (), {"requests": 3})
    assert namespace["include_request"](batch, None, {"MAX_BATCH_REQUESTS": "3"}) is False


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (("sequence=direct",), "sequence_batching"),
        (("max_batch_size=0",), "max_batch_size is 0"),
    ],
)
def test_a_model_that_cannot_take_one_is_refused_and_nothing_written(tmp_path, sets, words):
    project = new_project(tmp_path, "cpp-backend", *sets)
    before = snapshot(project)
    model = load_project(project).models[0].name
    with pytest.raises(UsageError, match=words):
        add_batcher(load_project(project), model, "volume")
    assert snapshot(project) == before


def test_add_model_takes_no_strategy_and_says_which_command_does(tmp_path):
    project = new_project(tmp_path, "python-backend")
    refused = run_tbgen("add", "model", "m2", "--set", "batch_strategy=single", "--project", str(project))
    assert refused.returncode == 2, refused.stderr
    assert f"`tbgen add batcher m2 --strategy single --project {project}`" in refused.stderr
    assert not (project / "model_repository" / "m2").exists()


def test_an_unknown_strategy_and_a_decoupled_project_are_refused(tmp_path):
    project = new_project(tmp_path, "python-backend")
    with pytest.raises(UsageError, match="no batching strategy"):
        add_batcher(load_project(project), "add_sub", "fastest")
    decoupled = new_project(tmp_path, "decoupled-backend", name="dec")
    with pytest.raises(UsageError, match="take no batching strategy yet"):
        add_batcher(load_project(decoupled), load_project(decoupled).models[0].name, "single")


@pytest.mark.slow  # five tbgen runs, each replaying the record
def test_the_record_learns_it_and_remove_model_takes_it_back(tmp_path):
    project = new_project(tmp_path, "python-backend")
    assert run_tbgen("add", "model", "m2", "--project", str(project)).returncode == 0
    given = run_tbgen("add", "batcher", "m2", "--strategy", "volume", "--project", str(project))
    assert given.returncode == 0, given.stderr
    drift = run_tbgen("check", "--drift", str(project))
    assert "Every generated file is as tbgen wrote it." in drift.stdout, drift.stdout
    # tbgen update renders the strategy again (the recipe replays `tbgen add batcher`): nothing of it is lost
    plan = run_tbgen("update", "--dry-run", "--triton-version", "26.06", "--project", str(project))
    assert plan.returncode == 0 and "batching/CMakeLists.txt  replaced" in plan.stdout, plan.stdout
    assert "no longer generated" not in plan.stdout and "conflict" not in plan.stdout, plan.stdout
    (project / "model_repository" / "m2" / "batchstrategy.so").write_bytes(b"built")  # a build's output
    removed = run_tbgen("remove", "model", "m2", "--project", str(project))
    assert removed.returncode == 0, removed.stderr
    assert not (project / "batching" / "m2").exists() and not (project / "model_repository" / "m2").exists()
    assert load_project(project).batched_models == ()


def test_the_flags_a_strategy_does_not_take_are_refused(tmp_path):
    project = new_project(tmp_path, "python-backend")
    with pytest.raises(UsageError, match="single has no limit"):
        add_batcher(load_project(project), "add_sub", "single", limit=4)
    with pytest.raises(UsageError, match="add_sub's inputs are INPUT0, INPUT1") as refused:
        add_batcher(load_project(project), "add_sub", "tokens", elements_input="TEXT")
    assert "--input INPUT0" in refused.value.hint


def test_a_write_that_fails_midway_leaves_the_project_as_it_was(tmp_path, monkeypatch):
    from triton_backend_gen.scaffold import batcher

    project = new_project(tmp_path, "python-backend")
    before = snapshot(project)
    real = batcher.replace_file

    def fail_on_tbgen_toml(path, file):
        if path.name == "tbgen.toml":
            raise OSError(28, "No space left on device", str(path))
        real(path, file)

    monkeypatch.setattr(batcher, "replace_file", fail_on_tbgen_toml)
    with pytest.raises(OSError):
        add_batcher(load_project(project), "add_sub", "custom")
    assert snapshot(project) == before and not (project / "batching").exists()
