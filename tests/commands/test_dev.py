"""tbgen dev's decisions: what a save asks for, and how a python model's load failure is told."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import new_project, project_of, run_tbgen

from triton_backend_gen.commands.dev import plan_turn, python_error_reason, watched_paths_filter


@pytest.fixture(scope="module")
def cpp_project(tmp_path_factory) -> Path:
    return new_project(tmp_path_factory.mktemp("cpp"), "cpp-backend")


@pytest.fixture(scope="module")
def bls_project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bls") / "proj"
    result = run_tbgen(
        "new",
        str(root),
        "-t",
        "python-backend",
        "--pattern",
        "bls",
        "--set",
        "callees=left,right",
        "--no-input",
    )
    assert result.returncode == 0, result.stderr
    return root


def test_a_cpp_source_asks_for_a_build_and_nothing_else(cpp_project):
    project = project_of(cpp_project)
    turn = plan_turn(project, ["add_sub"], [cpp_project / "src" / "compute.cc"])
    assert turn.build and not turn.reload and not turn.check and not turn.restart


def test_reference_py_asks_for_checks_of_every_model_without_a_reload(cpp_project):
    project = project_of(cpp_project)
    turn = plan_turn(project, ["add_sub"], [cpp_project / "reference.py"])
    assert turn.check == {"add_sub"} and not turn.reload and not turn.build


def test_a_model_file_reloads_that_model_and_checks_the_models_that_call_it(bls_project):
    project = project_of(bls_project)
    served = [m.name for m in project.models]
    callee = next(m for m in project.models if not m.calls)
    callers = {m.name for m in project.models if callee.name in m.calls}
    assert callers, "the BLS project has a model that calls another"
    turn = plan_turn(project, served, [callee.directory / "1" / "compute.py"])
    assert turn.reload == {callee.name}
    assert turn.check == {callee.name} | callers
    assert not turn.build


def test_tbgen_toml_restarts_and_other_files_ask_for_nothing(cpp_project):
    project = project_of(cpp_project)
    assert plan_turn(project, ["add_sub"], [cpp_project / "tbgen.toml"]).restart
    ignored = [cpp_project / "README.md", cpp_project / "model_repository" / "notes.txt"]
    assert plan_turn(project, ["add_sub"], ignored).empty


def test_a_batching_strategy_starts_the_session_over_and_its_library_is_no_save(tmp_path):
    root = new_project(tmp_path, "python-backend", "batch_strategy=single")
    project = project_of(root)
    turn = plan_turn(project, ["add_sub"], [root / "batching" / "add_sub" / "decision.h"])
    assert "batching strategy changed" in turn.restart
    keep = watched_paths_filter(project)
    assert not keep(None, str(root / "model_repository" / "add_sub" / "batchstrategy.so"))
    assert keep(None, str(root / "batching" / "add_sub" / "decision.h"))


def test_a_syntax_error_is_told_with_a_path_an_editor_opens(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "compute.py").write_text("x = (\n")
    reason = (
        "load failed for model 'm': version 1 is at UNAVAILABLE state: Internal: SyntaxError: '(' was never "
        f"closed (compute.py, line 1)\n\nAt:\n  {tmp_path}/1/model.py(19): <module>\n  <frozen x>(1): y\n;"
    )
    told = python_error_reason(reason, tmp_path)
    assert told.endswith(f"at {tmp_path / '1' / 'compute.py'}:1")
    assert "At:" not in told and "<frozen" not in told


def test_an_exception_names_the_users_frame_before_the_generated_one(tmp_path):
    reason = (
        "Internal: ZeroDivisionError: division by zero\n\nAt:\n"
        f"  {tmp_path}/1/model.py(60): execute\n  {tmp_path}/1/compute.py(25): compute\n"
    )
    assert python_error_reason(reason, tmp_path).endswith(f"at {tmp_path}/1/compute.py:25")
