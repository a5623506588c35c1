"""`tbgen remove model`: it takes back what `tbgen add model` added (files, tbgen.toml entries, the generation
record's part), so that drift and update do not see them again; it refuses, with nothing changed, what would
break the project or lose the user's work. And the one place that edits tbgen.toml's [[models]] entries."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from triton_backend_gen.cli import app
from triton_backend_gen.commands.update import drift, plan_project_update
from triton_backend_gen.errors import ScaffoldError
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold import model_entries, read_record, render_new_project
from triton_backend_gen.scaffold.record import RECORD_FILE

runner = CliRunner()


def tbgen(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


def new(tmp_path: Path, *added: list[str]) -> Path:
    """A python-backend project (model add_sub) grown by `tbgen add model` with each of ``added``."""
    project = render_new_project("python-backend", tmp_path / "p", {"triton_version": "24.10"})
    for args in added:
        tbgen("add", "model", *args, "--project", str(project))
    return project


def names(project: Path) -> list[str]:
    return [m["name"] for m in tomllib.loads((project / "tbgen.toml").read_text())["models"]]


def assert_as_generated(project: Path) -> None:
    """Drift finds nothing deleted, edited or rendered otherwise; an update to the same release changes
    nothing."""
    loaded = load_project(project)
    found = drift(loaded)
    assert (found.deleted, found.edited, found.template_changed) == ([], [], [])
    assert plan_project_update(loaded, triton_version="24.10").changes == []


# ---- removing what add model added -----------------------------------------------------------------------


def test_remove_model_takes_back_what_add_model_added(tmp_path):
    project = new(tmp_path)
    toml_before, record_before = (project / "tbgen.toml").read_text(), read_record(project)
    tbgen("add", "model", "extra", "--project", str(project))
    assert (project / "references" / "extra.py").is_file()

    output = tbgen("remove", "model", "extra", "--project", str(project))
    for path in (
        "model_repository/extra/config.pbtxt",
        "model_repository/extra/1/model.py",
        "references/extra.py",
    ):
        assert f"Removed {project / path}" in output
        assert not (project / path).exists()
    assert not (project / "model_repository" / "extra").exists() and not (project / "references").exists()
    assert (project / "tbgen.toml").read_text() == toml_before  # the entry and nothing else
    record = read_record(project)
    assert record.files == record_before.files and record.recipe == record_before.recipe
    assert_as_generated(project)
    output = tbgen("check", "--drift", str(project), code=1)  # 1: its release, 24.10, is behind
    assert "Every generated file is as tbgen wrote it" in output and "deleted by you" not in output


def test_a_composed_model_goes_with_the_models_it_added_but_one_another_model_calls_stays(tmp_path):
    project = new(
        tmp_path,
        ["solo"],
        ["router", "--pattern", "bls", "--set", "callees=add_sub,a,b"],
        ["fan", "--pattern", "bls-async", "--set", "callees=a,solo"],
    )
    tbgen(
        "remove", "model", "fan", "--project", str(project)
    )  # a came with router, solo with its own addition
    assert names(project) == ["add_sub", "solo", "router", "a", "b"]
    assert_as_generated(project)
    tbgen("remove", "model", "solo", "--project", str(project))  # added before router, which does not call it
    assert_as_generated(project)

    output = tbgen("remove", "model", "router", "--project", str(project))
    assert names(project) == ["add_sub"]
    assert f"Removed {project / 'references' / 'a.py'}" in output and "router, a, b" in output
    assert read_record(project).recipe.additions == ()
    assert_as_generated(project)


def test_a_callee_an_addition_created_stays_while_another_model_calls_it(tmp_path):
    project = new(
        tmp_path,
        ["router", "--pattern", "bls", "--set", "callees=add_sub,a,b"],
        ["fan", "--pattern", "bls-async", "--set", "callees=a,b"],
    )
    output = tbgen("remove", "model", "router", "--project", str(project))
    assert "Kept a: fan call(s) it" in output and "Kept b: fan call(s) it" in output
    assert names(project) == ["add_sub", "a", "b", "fan"]
    assert (project / "references" / "a.py").is_file()
    loaded = load_project(project)
    assert drift(loaded).deleted == []  # an update renders a and b as fan's callees now
    assert {c.path for c in plan_project_update(loaded, triton_version="24.10").changes} <= {"tbgen.toml"}


# ---- what it refuses ---------------------------------------------------------------------------------------


def test_a_model_others_call_is_refused_naming_its_callers(tmp_path):
    project = new(
        tmp_path,
        ["solo"],
        ["router", "--pattern", "bls", "--set", "callees=add_sub,solo"],
        ["fan", "--pattern", "bls-async", "--set", "callees=add_sub,solo"],
    )
    before = snapshot(project)
    output = tbgen("remove", "model", "solo", "--project", str(project), code=2)
    assert "Model 'solo' is called by router, fan" in output and "Remove router, fan first" in output
    assert snapshot(project) == before


def test_the_last_model_and_the_models_of_tbgen_new_are_refused(tmp_path):
    project = new(tmp_path)
    before = snapshot(project)
    assert "'add_sub' is p's only model" in " ".join(
        tbgen("remove", "model", "add_sub", "--project", str(project), "--force", code=2).split()
    )
    assert "has no model 'nope'" in tbgen("remove", "model", "nope", "--project", str(project), code=2)
    tbgen("add", "model", "extra", "--project", str(project))
    grown = snapshot(project)
    output = tbgen("remove", "model", "add_sub", "--project", str(project), "--force", code=2)
    assert "came with p from `tbgen new`" in output and "removes the models `tbgen add model` added" in output
    assert snapshot(project) == grown
    tbgen("remove", "model", "extra", "--project", str(project))
    assert snapshot(project) == before


def test_edits_and_files_of_yours_are_named_and_removed_only_with_force(tmp_path):
    project = new(tmp_path, ["extra"])
    model = project / "model_repository" / "extra"
    (model / "1" / "model.py").write_text((model / "1" / "model.py").read_text() + "# mine\n")
    (model / "python-env.tar.gz").write_bytes(b"packed")
    (model / "2").mkdir()
    (project / "tbgen.toml").write_text(
        (project / "tbgen.toml")
        .read_text()
        .replace('reference = "references/extra.py"', 'reference = "references/extra.py"  # mine')
    )
    before = snapshot(project)
    output = tbgen("remove", "model", "extra", "--project", str(project), code=2)
    named = [
        "model_repository/extra/1/model.py (edited)",
        "model_repository/extra/2/ (an empty directory",
        "model_repository/extra/python-env.tar.gz (not generated by tbgen)",
        "the [[models]] entry of extra in tbgen.toml (edited)",
        "--force",
    ]
    assert all(name in output for name in named), output
    assert snapshot(project) == before
    output = tbgen("remove", "model", "extra", "--project", str(project), "--force")
    assert f"Removed {model / 'python-env.tar.gz'}" in output and not model.exists()
    assert names(project) == ["add_sub"]
    assert_as_generated(project)


def test_a_project_without_a_record_needs_force_and_keeps_its_reference(tmp_path):
    project = new(tmp_path, ["extra"])
    shutil.rmtree(project / ".tbgen")
    before = snapshot(project)
    output = tbgen("remove", "model", "extra", "--project", str(project), code=2)
    assert "has no generation record" in output and "tbgen remove model extra --force" in output
    assert snapshot(project) == before
    output = tbgen("remove", "model", "extra", "--project", str(project), "--force")
    assert "tbgen.toml lists extra no more" in output and names(project) == ["add_sub"]
    assert not (project / "references" / "extra.py").exists() and (project / "reference.py").is_file()
    assert not (project / RECORD_FILE).exists()


def test_nothing_changes_when_writing_fails(tmp_path, monkeypatch):
    project = new(tmp_path, ["extra"])
    before = snapshot(project)

    def fail(path, file):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("triton_backend_gen.scaffold.remove.replace_file", fail)
    output = tbgen("remove", "model", "extra", "--project", str(project), code=1)
    assert "the project is as it was" in output
    assert snapshot(project) == before and not list(project.glob(".tbgen-*"))


# ---- tbgen.toml's [[models]] entries -----------------------------------------------------------------------


TOML = """# head
[project]
name = "p"

[[models]]
name = "a"

[[models.inputs]]
name = "X"

[models.parameters]
tag = "t"

# the answers
[answers]
x = 1
"""


@pytest.mark.parametrize("text", [TOML, TOML.split("# the answers")[0].rstrip("\n") + "\n"])
def test_entries_are_added_after_the_last_entry_and_removed_back_to_the_same_text(text):
    entry = model_entries.entry("b", reference="references/b.py")
    grown = model_entries.add_entries(text, [entry, model_entries.entry("c", reference="references/c.py")])
    data = tomllib.loads(grown)
    assert [m["name"] for m in data["models"]] == ["a", "b", "c"]
    assert data["models"][0]["inputs"] == [{"name": "X"}] and data["models"][0]["parameters"] == {"tag": "t"}
    if "answers" in data:
        assert grown.index('name = "c"') < grown.index("# the answers\n[answers]")
    assert model_entries.remove_entries(grown, ["b", "c"]) == text
    assert model_entries.remove_entries(model_entries.remove_entries(grown, ["c"]), ["b"]) == text
    first = model_entries.add_entries(text, [entry], first=True)
    assert [m["name"] for m in tomllib.loads(first)["models"]] == ["b", "a"]
    assert model_entries.remove_entries(first, ["b"]) == text
    assert (
        model_entries.entry_text(grown, "a").endswith('tag = "t"')
        and model_entries.entry_text(grown, "z") is None
    )


def test_an_edit_that_would_garble_the_entries_is_refused():
    with pytest.raises(ScaffoldError, match="would list"):
        model_entries.checked(TOML, ["a", "b"], "tbgen.toml")
