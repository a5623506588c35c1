"""A project generated at r24.10 by the tbgen before the user's code had files of its own (template 0.2.0,
restored from its record), built, edited (its logic, a second instance group) and updated to r26.06: the
logic moves into the user's file, every edit is kept, everything release-specific says r26.06, and it builds
and passes `tbgen test` (the embedded 2.51 server loads backends of later releases: their backend API is the
same 1.19). Then only the user's files are replaced with another computation (and reference.py), and an
update back to r24.10 touches none of them, and it builds and passes `tbgen test` again."""

import tomllib

import pytest
from conftest import cmake_fits_or_skip, commit_all, replace_once, run_tbgen, triton_sources_or_skip
from test_layout_move import restore_old_project

from triton_backend_gen import versions

pytestmark = pytest.mark.slow

SECOND_GROUP = "\n# a second group of mine\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n"

# template: (the 0.2.0 source, the text of its logic, the user's edit of it, the user's file it moves to,
#            the user's file's text replaced by another computation, and reference.py's likewise)
CASES = {
    "cpp-backend": (
        "src/proj.cc",
        "sum[i] = a[i] + b[i];",
        "sum[i] = b[i] + a[i];  // mine",
        "src/compute.cc",
        ("sum[i] = b[i] + a[i];  // mine", "sum[i] = a[i] * b[i];  // another computation"),
        ("(a + b).astype(DTYPE)", "(a * b).astype(DTYPE)"),
    ),
    "python-backend": (
        "model_repository/add_sub/1/model.py",
        "OUTPUT0: in0 + in1,",
        "OUTPUT0: in1 + in0,",
        "model_repository/add_sub/1/compute.py",
        ("OUTPUT0: in1 + in0,", "OUTPUT0: in0 * in1,"),
        ("(a + b).astype(DTYPE)", "(a * b).astype(DTYPE)"),
    ),
}


@pytest.mark.parametrize("template", sorted(CASES))
def test_an_old_project_moves_to_the_new_layout_and_26_06_then_back_untouched(tmp_path, template):
    old, new = versions.resolve("24.10"), versions.resolve("26.06")
    source, logic, mine, user_file, replacement, reference_change = CASES[template]
    project = restore_old_project(tmp_path, template)  # 24.10, template 0.2.0
    cpp = template == "cpp-backend"
    if cpp:
        for release in (old, new):
            triton_sources_or_skip(release.branch)
            cmake_fits_or_skip(release)
        built = run_tbgen("build", cwd=project)  # a build tree of the old release, reused after the update
        assert built.returncode == 0, built.stdout + built.stderr
    replace_once(project / source, logic, mine)
    model_name = tomllib.loads((project / "tbgen.toml").read_text())["models"][0]["name"]
    config = project / "model_repository" / model_name / "config.pbtxt"
    config.write_text(config.read_text() + SECOND_GROUP)
    commit_all(project)

    updated = run_tbgen("update", "--triton-version", new.container, cwd=project)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert mine in (project / user_file).read_text(), f"{user_file} lacks the moved logic"
    assert mine not in (project / source).read_text()
    assert SECOND_GROUP in config.read_text()
    assert tomllib.loads((project / "tbgen.toml").read_text())["project"]["triton_version"] == new.container
    assert f"tritonserver:{new.container}-py3" in (project / "Dockerfile").read_text()
    if cpp:
        cmake = (project / "CMakeLists.txt").read_text()
        assert cmake.count(f'_REPO_TAG "{new.branch}"') == 3 and '"r24.10"' not in cmake
        assert f"cmake_minimum_required(VERSION {new.min_cmake})" in cmake
    assert [p for p in project.rglob("*") if p.suffix in (".rej", ".orig", ".tbgen-new")] == []
    build_and_test(project, cpp, new.branch)

    # Only the user's files change: another computation, and its reference.
    replace_once(project / user_file, *replacement)
    replace_once(project / "reference.py", *reference_change)
    commit_all(project)
    users = {p: p.read_bytes() for p in (project / user_file, project / "reference.py")}
    users |= {p: p.read_bytes() for p in (project / "tests").glob("*.py")}
    back = run_tbgen("update", "--triton-version", "24.10", cwd=project)
    assert back.returncode == 0, back.stdout + back.stderr
    assert {p: p.read_bytes() for p in users} == users, "the update touched a file of the user's"
    build_and_test(project, cpp, "r24.10")


def build_and_test(project, cpp: bool, branch: str) -> None:
    if cpp:
        built = run_tbgen("build", cwd=project)
        assert built.returncode == 0, built.stdout + built.stderr
        assert branch in (project / "build" / "CMakeCache.txt").read_text()
    tested = run_tbgen("test", cwd=project)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert " 0 failed" in tested.stdout
