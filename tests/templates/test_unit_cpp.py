"""The unit tests every C++ project gets (tests/unit/): the user's src/compute.cc against reference.py with no
server, in a GoogleTest target built with the backend. toolchain.unit_cpp builds and runs it (`tbgen test
--unit`, `tbgen dev`), and the project's own `ctest --test-dir build` runs it too; a wrong computation fails
naming the model, the case, the output and its first differing element; a compile error is a BuildError
that begins with the compiler's `path:line:col: error:`.

One project per template is generated and built once for the module (in one worker); a test that edits its
src/compute.cc puts it back before it ends."""

from __future__ import annotations

import re
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import new_project, triton_sources_or_skip

from triton_backend_gen.errors import BuildError
from triton_backend_gen.project import load_project
from triton_backend_gen.toolchain.cmake import cmake_executable
from triton_backend_gen.toolchain.unit_cpp import run_cpp_unit_tests

pytestmark = pytest.mark.xdist_group("unit_cpp")  # the module's built projects serve all its tests

TEMPLATES = ("cpp-backend", "decoupled-backend")
# What each template's default example runs: its model and the labels of its cases, in order.
CASES = {
    "cpp-backend": (
        "add_sub",
        [f"compute(batch {b}, seed {s}) matches reference.compute" for b in (1, 8) for s in (0, 1, 2)],
    ),
    "decoupled-backend": (
        "repeat_int32",
        [f"StreamResponses({what}) streams reference.responses" for what in ("seed 0", "seed 1", "seed 2")]
        + ["StreamResponses(no_response_inputs) streams reference.responses"],
    ),
}
# A line of each example's src/compute.cc, that line computing one more than it should, and where the
# first case then differs first: its output and element.
BROKEN = {
    "cpp-backend": ("sum[i] = a[i] + b[i];", "sum[i] = a[i] + b[i] + 1;", "OUTPUT0", "[0, 0]"),
    "decoupled-backend": ("out.OUT[0] = in.IN[i];", "out.OUT[0] = in.IN[i] + 1;", "OUT", "[0]"),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """template -> (its default project, the results of its first unit test run, which built it)."""
    triton_sources_or_skip("r24.10")
    root, projects = tmp_path_factory.mktemp("unit-cpp"), {}

    def project(template: str) -> tuple[Path, list]:
        if template not in projects:
            path = new_project(root, template, name=template.split("-")[0])
            projects[template] = (path, unit_results(path))
        return projects[template]

    return project


def unit_results(project: Path) -> list:
    """The unit test results of every model of ``project`` (building what is out of date first)."""
    loaded = load_project(project)
    return run_cpp_unit_tests(loaded, [m.name for m in loaded.models])


@contextmanager
def edited(path: Path, old: str, new: str):
    """``path`` with ``old`` replaced by ``new`` for the block, then as it was."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    try:
        yield
    finally:
        path.write_text(text)


@pytest.mark.slow
@pytest.mark.cpp
@pytest.mark.parametrize("template", TEMPLATES)
def test_the_examples_unit_tests_pass(built, template):
    project, results = built(template)
    model, labels = CASES[template]
    assert [r.name for r in results] == [f"{model}: {label}" for label in labels]
    failed = [r for r in results if not r.passed]
    assert not failed, failed[0].detail
    # Each says what it compared: the outputs, or the responses of the stream.
    assert all(r.detail for r in results)
    if template == "decoupled-backend":
        assert results[0].detail.startswith("4 responses match, in order, the final flag alone after them")
        assert results[-1].detail.startswith("0 responses")


@pytest.mark.slow
@pytest.mark.cpp
@pytest.mark.parametrize("template", TEMPLATES)
def test_ctest_runs_them_in_the_build_directory(built, template):
    project, _ = built(template)
    model = CASES[template][0]
    ctest = Path(cmake_executable()).with_name("ctest")
    done = subprocess.run(
        [str(ctest) if ctest.is_file() else "ctest", "--test-dir", "build", "--output-on-failure"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The case file is written first (a CTest fixture), then the GoogleTest binary reads it.
    assert re.search(rf"1/2 Test #1: {model}\.cases \.+ +Passed", done.stdout), done.stdout
    assert re.search(rf"2/2 Test #2: {model}\.unit \.+ +Passed", done.stdout), done.stdout
    assert (project / "build" / "unit_cases" / f"{model}.cases").is_file()


@pytest.mark.slow
@pytest.mark.cpp
@pytest.mark.parametrize("template", TEMPLATES)
def test_a_wrong_computation_fails_naming_its_first_difference(built, template):
    project, _ = built(template)
    model, labels = CASES[template]
    old, new, output, element = BROKEN[template]
    cache = project / "build" / "CMakeCache.txt"
    configured_at = cache.stat().st_mtime
    with edited(project / "src" / "compute.cc", old, new):
        results = unit_results(project)
    # It stops at the first failure: the first case, which names the model, the case and the output.
    assert len(results) == 1 and not results[0].passed
    assert results[0].name == f"{model}: {labels[0]}"
    detail = results[0].detail
    assert detail.startswith(f"{model}, {labels[0].split(')')[0]}): "), detail
    first = re.search(rf"output '{output}': element {re.escape(element)}: got (\S+), expected (\S+)", detail)
    assert first, detail
    assert float(first[1]) == pytest.approx(float(first[2]) + 1), detail
    assert "OUTPUT1" not in detail  # the difference, not the other output, which is right
    # Only a source changed: the build did not configure again, and the fix passes at once.
    assert cache.stat().st_mtime == configured_at
    assert all(r.passed for r in unit_results(project))


@pytest.mark.slow
@pytest.mark.cpp
@pytest.mark.parametrize("template", TEMPLATES)
def test_a_compile_error_names_its_file_and_line(built, template):
    project, _ = built(template)
    old, _, _, _ = BROKEN[template]
    compute = project / "src" / "compute.cc"
    line = next(i for i, text in enumerate(compute.read_text().splitlines(), 1) if old in text)
    with edited(compute, old, old.replace(";", " +;")), pytest.raises(BuildError) as raised:
        unit_results(project)
    place = re.match(r"(?P<path>[^\s:]+):(?P<line>\d+):(?P<column>\d+): error: ", raised.value.message)
    assert place, raised.value.message
    assert Path(place["path"]).resolve() == compute.resolve()  # a path an editor opens from here
    assert int(place["line"]) == line


def test_a_bls_router_has_no_unit_tests_and_says_why(tmp_path):
    project = new_project(tmp_path, "cpp-backend", "pattern=bls")
    assert not (project / "tests" / "unit").exists()
    assert "unit_tests" not in (project / "CMakeLists.txt").read_text()
    loaded = load_project(project)
    [skipped] = run_cpp_unit_tests(loaded, [m.name for m in loaded.models])
    assert skipped.passed and skipped.detail.startswith("skipped: ") and "BLS router" in skipped.detail
    readme = (project / "README.md").read_text()
    assert "no unit tests" in readme and "Route" in readme
