"""`tbgen update` and `tbgen check --drift` as users run them, on generated projects (nothing built here)."""

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from conftest import commit_all, new_project, replace_once, run_tbgen, snapshot

from triton_backend_gen import versions
from triton_backend_gen.commands import update as updating
from triton_backend_gen.commands.doctor import check_release_change
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold.record import RECORD_FILE, Record, pack, read_record
from triton_backend_gen.scaffold.update import DELETED_BY_YOU, NO_LONGER_GENERATED


def release_of(project: Path) -> str:
    return tomllib.loads((project / "tbgen.toml").read_text())["project"]["triton_version"]


def test_a_conflicting_edit_is_marked_listed_and_exits_1_and_nothing_else_is_lost(tmp_path):
    project = new_project(tmp_path, "cpp-backend")
    cmake = project / "CMakeLists.txt"
    replace_once(cmake, 'set(TRITON_CORE_REPO_TAG "r24.10"', 'set(TRITON_CORE_REPO_TAG "my-fork-24.10"')
    source = project / "src" / "compute.cc"
    replace_once(source, "difference[i] = a[i] - b[i];", "difference[i] = a[i] - b[i];  // mine")
    commit_all(project)
    result = run_tbgen("update", "--triton-version", "26.02", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "conflict" in result.stdout and "CMakeLists.txt" in result.stdout and "grep -n" in result.stdout
    text = cmake.read_text()
    assert "<<<<<<< yours\n" in text and 'set(TRITON_CORE_REPO_TAG "my-fork-24.10"' in text
    assert 'set(TRITON_CORE_REPO_TAG "r26.02"' in text and ">>>>>>> tbgen update" in text
    assert 'set(TRITON_BACKEND_REPO_TAG "r26.02"' in text  # merged around the conflict
    assert "// mine" in source.read_text()
    assert "tritonserver:26.02-py3" in (project / "Dockerfile").read_text()
    assert release_of(project) == "26.02"


def test_a_dirty_work_tree_is_refused_unless_forced(tmp_path):
    project = new_project(tmp_path, "python-backend")
    commit_all(project)
    (project / "reference.py").write_text((project / "reference.py").read_text() + "# uncommitted\n")
    before = snapshot(project)
    refused = run_tbgen("update", cwd=project)
    assert refused.returncode == 2 and "uncommitted" in refused.stderr and "reference.py" in refused.stderr
    assert "--force" in refused.stderr
    assert snapshot(project) == before
    forced = run_tbgen("update", "--force", cwd=project)
    assert forced.returncode == 0, forced.stderr
    # without --triton-version: the default release ($TBGEN_TRITON_VERSION, set by tests/conftest.py; else the
    # newest)
    assert release_of(project) == versions.default_release().container
    assert (project / "reference.py").read_text().endswith("# uncommitted\n")


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    project = new_project(tmp_path, "decoupled-backend")
    (project / "README.md").write_text((project / "README.md").read_text() + "\nMy notes.\n")
    before = snapshot(project)
    result = run_tbgen("update", "--dry-run", "--project", str(project))
    assert result.returncode == 0, result.stderr
    assert snapshot(project) == before
    for line in ("Would update", "CMakeLists.txt", "replaced", "README.md", "merged"):
        assert line in result.stdout


def test_settings_are_merged_into_an_edited_config_and_the_template_version_must_be_the_shipped_one(tmp_path):
    project = new_project(tmp_path, "python-backend")
    config = project / "model_repository" / "add_sub" / "config.pbtxt"
    replace_once(config, "instance_group {", "# two groups of mine\ninstance_group {")
    unknown = run_tbgen("update", "--template-version", "9.9", "--project", str(project))
    assert unknown.returncode == 2 and "ships python-backend" in unknown.stderr
    result = run_tbgen(
        "update", "--triton-version", "24.10", "--set", "max_batch_size=4", "--project", str(project)
    )
    assert result.returncode == 0, result.stderr
    assert "max_batch_size: 4" in config.read_text() and "# two groups of mine" in config.read_text()
    assert tomllib.loads((project / "tbgen.toml").read_text())["answers"]["max_batch_size"] == 4
    assert read_record(project).recipe.given["max_batch_size"] == "4"


def test_deleted_files_stay_deleted_new_template_files_are_added_added_models_are_replayed(tmp_path):
    project = new_project(tmp_path, "python-backend")
    added = run_tbgen("add", "model", "router", "--pattern", "bls", "--project", str(project))
    assert added.returncode == 0, added.stderr
    (project / "Dockerfile").unlink()
    # a file the record does not know, absent from the project: tbgen's templates now write it
    record = read_record(project)
    del record.files[".dockerignore"]
    (project / RECORD_FILE).write_bytes(pack(Record(record.recipe, record.files)))
    (project / ".dockerignore").unlink()
    result = run_tbgen("update", "--triton-version", "26.02", "--project", str(project))
    assert result.returncode == 0, result.stderr
    assert not (project / "Dockerfile").exists() and DELETED_BY_YOU in result.stdout
    assert (project / ".dockerignore").is_file() and "added" in result.stdout
    assert NO_LONGER_GENERATED not in result.stdout  # the router and its callees are rendered again
    assert [m.name for m in load_project(project).models] == ["add_sub", "router", "add_sub_2"]
    assert "model_repository/router/config.pbtxt" in read_record(project).files


def test_drift_tells_fresh_edited_and_behind_projects_apart(tmp_path):
    fresh = new_project(
        tmp_path, "cpp-backend", f"triton_version={versions.newest().container}", name="fresh"
    )
    result = run_tbgen("check", "--drift", str(fresh))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "as tbgen wrote it" in result.stdout and "up to date" in result.stdout

    replace_once(fresh / "src" / "compute.cc", "difference[i] = a[i] - b[i];", "difference[i] = b[i] - a[i];")
    (fresh / "README.md").unlink()
    result = run_tbgen("check", "--drift", str(fresh))
    assert result.returncode == 0, result.stdout + result.stderr  # edits are no failure
    assert "edited by you: src/compute.cc" in result.stdout and "deleted by you: README.md" in result.stdout

    behind = new_project(tmp_path, "cpp-backend", name="behind")  # 24.10
    result = run_tbgen("check", "--drift", str(behind))
    target = versions.update_target(versions.resolve("24.10")).container  # $TBGEN_TRITON_VERSION's, here
    assert result.returncode == 1 and f"the release tbgen targets is {target}" in result.stdout

    # a project generated by an older template: its record says so, and today's renders differ
    record = read_record(fresh)
    record.files["CMakeLists.txt"] = type(record.files["CMakeLists.txt"])(b"# older template\n")
    old_recipe = type(record.recipe)(**{**record.recipe.__dict__, "template_version": "0.1.0"})
    (fresh / RECORD_FILE).write_bytes(pack(Record(old_recipe, record.files)))
    result = run_tbgen("check", "--drift", str(fresh))
    assert result.returncode == 1 and "0.1.0 generated it" in result.stdout and "update due" in result.stdout

    assert run_tbgen("check", "--drift", "--docker", str(fresh)).returncode == 2


def test_a_project_without_a_record_is_updated_from_its_answers(tmp_path):
    project = new_project(tmp_path, "cpp-backend", "dtype=INT32", "dims=4")
    (project / RECORD_FILE).unlink()
    replace_once(project / "src" / "compute.cc", "void\nCompute(", "// mine\nvoid\nCompute(")
    result = run_tbgen("update", "--project", str(project))
    assert result.returncode == 0, result.stderr
    assert "no generation record" in result.stdout
    assert "// mine" in (project / "src" / "compute.cc").read_text()
    assert "INT32" in (project / "model_repository" / "add_sub" / "config.pbtxt").read_text()
    assert release_of(project) == versions.default_release().container
    assert read_record(project).recipe.given["dtype"] == "INT32"


def test_doctor_explains_the_release_change(tmp_path):
    project = new_project(tmp_path, "cpp-backend")
    assert check_release_change(load_project(project)) == []
    assert run_tbgen("update", "--project", str(project)).returncode == 0
    found = {d.name: d.found for d in check_release_change(load_project(project))}
    new = versions.default_release().container
    assert found[f"24.10 -> {new}: CMake minimum"] == "3.18 -> 3.31.8"
    assert found[f"24.10 -> {new}: Python of the stub"] == "3.10 -> 3.12"
    assert "backend API" not in " ".join(found)  # 1.19 in both


@pytest.mark.parametrize("point", ["render", "plan"])
def test_sigint_before_writing_leaves_the_project_as_it_was(tmp_path, monkeypatch, point):
    """In-process: SIGINT while tbgen's side is rendered, or while the merge is planned."""
    project = new_project(tmp_path, "cpp-backend")
    replace_once(
        project / "src" / "compute.cc",
        "difference[i] = a[i] - b[i];",
        "difference[i] = a[i] - b[i];  // mine",
    )
    before = snapshot(project)
    name = "render_recipe" if point == "render" else "plan_update"
    real = getattr(updating, name)

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(updating, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        plan = updating.plan_project_update(load_project(project))
        updating.update_project(plan)
    assert snapshot(project) == before


def test_sigint_at_any_moment_leaves_the_project_as_it_was_or_updated(tmp_path):
    """A real `tbgen update` process interrupted at moments spread over its run: each run ends with the
    project byte-for-byte as it was or wholly updated (the signal came after the update), never in between."""
    first = new_project(tmp_path, "cpp-backend", name="first")
    replace_once(
        first / "CMakeLists.txt",
        "src/compute.cc src/tensors.h)",
        "src/compute.cc src/tensors.h src/extra.cc)",
    )
    before = snapshot(first)
    start = time.monotonic()
    complete = run_tbgen("update", "--project", str(first))
    duration = time.monotonic() - start
    assert complete.returncode == 0, complete.stderr
    updated = snapshot(first)
    interrupted = 0
    for step in range(8):
        project = tmp_path / f"p{step}"
        subprocess.run(["cp", "-a", str(first), str(project)], check=True)
        for relative, data in before.items():  # back to the state before the update
            (project / relative).write_bytes(data)
        process = subprocess.Popen(
            [sys.executable, "-m", "triton_backend_gen", "update", "--project", str(project)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(duration * (step + 1) / 8)
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        # 130: tbgen's exit on Ctrl-C; 1: click's "Aborted!" and -SIGINT: Python's, for a signal before
        # tbgen's command starts or after it ends (then the update is whole)
        assert process.returncode in (0, 1, 130, -signal.SIGINT), process.returncode
        state = snapshot(project)
        assert state == updated if process.returncode == 0 else state in (before, updated)
        interrupted += state == before
    assert interrupted >= 1


def test_a_default_release_older_than_the_projects_does_not_move_it_back(tmp_path, monkeypatch):
    project = new_project(tmp_path, "python-backend", "triton_version=26.06")
    commit_all(project)
    monkeypatch.setenv("TBGEN_TRITON_VERSION", "25.10")
    result = run_tbgen("update", "--set", "max_batch_size=4", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert release_of(project) == "26.06"
    drift = run_tbgen("check", "--drift", cwd=project)
    assert "release: 26.06" in drift.stdout and "update due" not in drift.stdout


def test_a_move_to_a_release_without_sources_here_renders_validates_and_says_what_the_build_needs(tmp_path):
    """26.02 -> 26.08, whose Triton sources are not in the cache (no network here): the facts of 26.08 are
    rendered and the project validates; the update says that the build needs the sources and how to get
    them."""
    newest = versions.newest()
    project = new_project(tmp_path, "cpp-backend", "triton_version=26.02")
    replace_once(
        project / "src" / "compute.cc", "difference[i] = a[i] - b[i];", "difference[i] = b[i] - a[i];"
    )
    commit_all(project)
    result = run_tbgen("update", "--triton-version", newest.container, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert release_of(project) == newest.container
    cmake = (project / "CMakeLists.txt").read_text()
    assert cmake.count(f'_REPO_TAG "{newest.branch}"') == 3
    assert "difference[i] = b[i] - a[i];" in (project / "src" / "compute.cc").read_text()
    output = " ".join(result.stdout.split())
    assert f"Triton {newest.branch} sources are not in tbgen's cache" in output
    assert f"`tbgen deps fetch --triton-version {newest.container}`" in output
    assert "CUDA" in output  # the release-change table: 13.1.1 -> 13.4.1
    validated = run_tbgen("validate", cwd=project)
    assert validated.returncode == 0, validated.stdout + validated.stderr
