"""Projects generated before the user's code had files of its own (template 0.2.0: the logic inside the one
big source between markers) update to today's layout: the user's logic moves into their new file, nothing
is lost, and what cannot be moved stays where it was, kept by the merge and named.

layout_0_2_0/<template>.tar.gz are the generation records of `tbgen new proj -t <template> --no-input
--triton-version 24.10` made by the tbgen before the change: a record holds every file as generated, so
the project is restored from it. tests/update/test_update_build.py builds and serves a moved project."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold.layout import is_generated
from triton_backend_gen.scaffold.record import RECORD_FILE, unpack, write_file
from triton_backend_gen.scaffold.update import CONFLICT, MERGED, MOVED, REPLACED

FIXTURES = Path(__file__).parent / "layout_0_2_0"


def restore_old_project(tmp_path: Path, template: str) -> Path:
    """The project as the old tbgen generated it, with its record."""
    data = (FIXTURES / f"{template}.tar.gz").read_bytes()
    record = unpack(data, FIXTURES / f"{template}.tar.gz")
    assert record.recipe.template_version == "0.2.0"
    root = tmp_path / record.recipe.project_name
    for relative, file in record.files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        write_file(root / relative, file)
    (root / RECORD_FILE).parent.mkdir(exist_ok=True)
    (root / RECORD_FILE).write_bytes(data)
    return root


def plan(root: Path):
    from triton_backend_gen.commands import update

    return update.plan_project_update(load_project(root), triton_version="24.10")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}"
    path.write_text(text.replace(old, new))


def actions(changes) -> dict[str, str]:
    return {c.path: c.action for c in changes}


def test_an_unedited_old_project_takes_the_new_layout_whole(tmp_path):
    root = restore_old_project(tmp_path, "cpp-backend")
    changes = plan(root).changes
    assert actions(changes)["src/proj.cc"] == REPLACED
    assert actions(changes)["src/compute.cc"] == "added"
    assert actions(changes)["src/tensors.h"] == "added"


def test_edited_cpp_logic_moves_to_compute_cc(tmp_path):
    root = restore_old_project(tmp_path, "cpp-backend")
    edit(root / "src/proj.cc", "    sum[i] = a[i] + b[i];", "    sum[i] = 2 * a[i] + b[i];  // mine")
    changes = {c.path: c for c in plan(root).changes}
    moved, plumbing = changes["src/compute.cc"], changes["src/proj.cc"]
    assert moved.action == MOVED and moved.note == "from src/proj.cc"
    assert "sum[i] = 2 * a[i] + b[i];  // mine" in moved.result.data.decode()
    assert not is_generated(moved.result.data.decode())
    # the plumbing is replaced whole: the user's edit was only in the block that moved
    assert plumbing.action == REPLACED and "moved to src/compute.cc" in plumbing.note
    assert "// mine" not in plumbing.result.data.decode()


def test_an_edit_outside_the_logic_stays_in_the_plumbing_and_is_named(tmp_path):
    root = restore_old_project(tmp_path, "cpp-backend")
    edit(root / "src/proj.cc", "    sum[i] = a[i] + b[i];", "    sum[i] = a[i] + b[i] + 1;  // mine")
    edit(root / "src/proj.cc", "#include <vector>\n", "#include <vector>\n#include <map>  // mine too\n")
    changes = {c.path: c for c in plan(root).changes}
    assert changes["src/compute.cc"].action == MOVED
    plumbing = changes["src/proj.cc"]
    assert plumbing.action in (MERGED, CONFLICT)
    assert "#include <map>  // mine too" in plumbing.result.data.decode()
    assert "your edit of a generated file, kept; your code belongs in src/compute.cc" in plumbing.note


def test_an_edit_of_new_generated_plumbing_is_kept_and_named(tmp_path):
    """In today's layout too: the plumbing edited by hand keeps the edit through an update whose plumbing
    differs (here another answer: request parameters, which the plumbing reads), and the note says where
    such code belongs."""
    from triton_backend_gen.commands import update
    from triton_backend_gen.scaffold import render_new_project

    root = render_new_project("cpp-backend", tmp_path / "proj", {"triton_version": "24.10"})
    edit(root / "src/proj.cc", "#include <vector>\n", "#include <vector>\n#include <map>  // mine\n")
    (root / "src/compute.cc").write_text((root / "src/compute.cc").read_text() + "// my compute\n")
    planned = update.plan_project_update(
        load_project(root), triton_version="26.02", settings={"request_parameters": "true"}
    )
    # tbgen's side changed the plumbing too, so the update must merge it with the user's edit
    assert planned.base.files["src/proj.cc"] != planned.new.files["src/proj.cc"]
    by_path = {c.path: c for c in planned.changes}
    assert "src/compute.cc" not in by_path  # the user's file: tbgen has nothing new in it
    plumbing = by_path["src/proj.cc"]
    assert plumbing.action == MERGED
    merged = plumbing.result.data.decode()
    assert "#include <map>  // mine" in merged  # the user's edit, kept
    assert "ReadRequestParameters(" in merged  # tbgen's change, merged around it
    assert plumbing.note == "your edit of a generated file, kept; your code belongs in src/compute.cc"


@pytest.mark.parametrize(
    ("template", "source", "old", "new"),
    [
        (
            "python-backend",
            "model_repository/add_sub/1/model.py",
            "OUTPUT0: in0 + in1,",
            "OUTPUT0: in0 + in1 + 1,  # mine",
        ),
        (
            "decoupled-backend",
            "src/proj.cc",
            "job.stream->Send(job.in[i],",
            "job.stream->Send(job.in[i] + 1,  // mine\n",
        ),
    ],
)
def test_no_edit_is_lost_in_the_other_templates(tmp_path, template, source, old, new):
    """Where the logic moves, it is in the user's new file; where it cannot (no markers around it), the old
    file's merge keeps it and names the user's file."""
    root = restore_old_project(tmp_path, template)
    edit(root / source, old, new)
    changes = {c.path: c for c in plan(root).changes}
    kept = [c for c in changes.values() if c.result is not None and new.strip() in c.result.data.decode()]
    if source in changes and changes[source].result is not None and not kept:
        raise AssertionError(f"{source} is rewritten and the edit is in no file the update writes")
    assert all(c.action in (MOVED, MERGED, CONFLICT) for c in kept)
    if kept and kept[0].path == source:  # not moved: the merge kept it in the plumbing and says where it goes
        assert "your code belongs in" in kept[0].note


def test_drift_tells_edited_plumbing_from_the_users_files(tmp_path):
    from triton_backend_gen.commands import update
    from triton_backend_gen.scaffold import render_new_project

    root = render_new_project("cpp-backend", tmp_path / "proj", {"triton_version": "24.10"})
    for name in ("src/proj.cc", "src/compute.cc"):
        (root / name).write_text((root / name).read_text() + "// mine\n")
    found = update.drift(load_project(root))
    assert found.edited == ["src/compute.cc", "src/proj.cc"]
    assert found.plumbing == ["src/proj.cc"]


def test_a_file_of_the_users_own_at_the_new_path_is_merged_not_replaced(tmp_path):
    """A 0.2.0 project whose user wrote a src/compute.cc of their own: the logic block does not land there;
    their file is merged like any file tbgen now adds over one of the user's (nothing of theirs is lost)."""
    root = restore_old_project(tmp_path, "cpp-backend")
    edit(root / "src/proj.cc", "    sum[i] = a[i] + b[i];", "    sum[i] = 2 * a[i] + b[i];  // mine")
    (root / "src/compute.cc").write_text("// a helper of mine\nint Helper() { return 1; }\n")
    changes = {c.path: c for c in plan(root).changes}
    assert changes["src/compute.cc"].action != MOVED
    assert "int Helper() { return 1; }" in changes["src/compute.cc"].result.data.decode()
    assert "// mine" in changes["src/proj.cc"].result.data.decode()  # kept where it was


def test_a_readme_or_cmakelists_mentioning_tbgen_is_not_plumbing(render_template):
    root = render_template("cpp-backend")
    for name in ("README.md", "CMakeLists.txt"):
        assert not is_generated((root / name).read_text()), name
    assert is_generated((root / "src" / "my_backend.cc").read_text())
