"""The unit tests every Python project gets (tests/test_compute.py): each model's own code against
reference.py with no server, run by toolchain.unit_python (`tbgen test --unit`), by `python
tests/test_compute.py` and by the project's own pytest; a wrong computation fails naming the first
difference, an exception the line it came from.

The projects are generated once for the module (tbgen new); a test that edits one works on a copy of it."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import new_project, run_tbgen

from triton_backend_gen.project import load_project
from triton_backend_gen.toolchain.unit_python import run_python_unit_tests

pytestmark = pytest.mark.xdist_group("unit_python")  # the module's projects are generated once, in one worker

VARIANTS = {  # name -> (template, --set answers)
    "default": ("python-backend",),
    "sequence": ("python-backend", "sequence=oldest", "correlation_id=string"),
    "bls": ("python-backend", "pattern=bls"),
    "decoupled": ("decoupled-backend", "language=python"),
    "ensemble": ("python-backend", "pattern=ensemble"),
    "bls-decoupled": ("decoupled-backend", "language=python", "pattern=bls-decoupled"),
    "python-based": ("python-backend", "python_based_backend=yes"),
}
# What each variant's tests call: (model, the function of its compute.py) in tbgen.toml's order.
TESTED = {
    "default": [("add_sub", "compute()")],
    "sequence": [("accumulate", "step()")],
    "bls": [("bls_sync", "route()"), ("add_sub", "compute()"), ("add_sub_2", "compute()")],
    "decoupled": [("repeat_int32", "stream()")],
    # The ensemble has no code of its own (its config.pbtxt wires the steps): only its steps are tested.
    "ensemble": [("add_sub", "compute()"), ("preprocess", "compute()"), ("postprocess", "compute()")],
    "bls-decoupled": [("bls_decoupled", "accumulate()"), ("repeat_int32", "stream()")],
    "python-based": [("add_sub", "compute()")],  # backends/<backend>/compute.py
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The project of a variant, generated on first use."""
    root, projects = tmp_path_factory.mktemp("unit"), {}

    def project(variant: str) -> Path:
        if variant not in projects:
            template, *sets = VARIANTS[variant]
            projects[variant] = new_project(root, template, *sets, name=f"unit-{variant}")
        return projects[variant]

    return project


@pytest.fixture
def copy_of(generated, tmp_path):
    """A copy of a variant's project, to edit."""

    def copy(variant: str) -> Path:
        return Path(shutil.copytree(generated(variant), tmp_path / variant))

    return copy


def unit_results(project: Path, models: list[str] | None = None):
    loaded = load_project(project)
    return run_python_unit_tests(loaded, models or [m.name for m in loaded.models])


def edit(path: Path, old: str, new: str) -> int:
    """Replace ``old`` (once in ``path``) by ``new``; the line number where ``new`` starts."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} in {path}"
    path.write_text(text.replace(old, new))
    return text[: text.index(old)].count("\n") + 1


def load_reference(project: Path):
    spec = importlib.util.spec_from_file_location("unit_reference", project / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version_file(project: Path, model: str, name: str = "compute.py") -> Path:
    return project / "model_repository" / model / "1" / name


# --------------------------------------------------------------------------- the generated tests pass


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_generated_unit_tests_pass(generated, variant):
    results = unit_results(generated(variant))
    assert [r.name.split(": ")[0] for r in results] == [model for model, _ in TESTED[variant]]
    for result, (_, function) in zip(results, TESTED[variant], strict=True):
        assert result.passed, result
        assert result.name.split(": ")[1].startswith(function) and result.seconds < 5


@pytest.mark.parametrize("variant", ["default", "bls", "decoupled"])
def test_the_projects_own_pytest_runs_them_without_a_server(generated, variant):
    project = generated(variant)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--setup-show",
            "tests/test_compute.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(TESTED[variant])} passed" in result.stdout
    # No test of the file asks for the server fixture, and no server was started (tbgen's would log here).
    assert "triton_server" not in result.stdout
    assert not (project / "build" / "tbgen" / "server.log").exists()


def test_run_as_a_script_it_prints_a_line_per_test_and_imports_no_test_framework(generated):
    project = generated("bls")
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "tests/test_compute.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(": ")[0] for line in lines] == [f"PASS  {model}" for model, _ in TESTED["bls"]]
    imported = {
        line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line
    }
    assert {"numpy", "tomllib", "triton_python_backend_utils"} <= imported  # compute.py: loaded from its path
    assert not imported & {"pytest", "_pytest", "tritonclient", "triton_backend_gen", "grpc"}


# --------------------------------------------------------------------------- failures name what differs


def test_a_wrong_computation_fails_naming_the_first_difference(copy_of):
    project = copy_of("default")
    edit(version_file(project, "add_sub"), "OUTPUT1: in0 - in1}", "OUTPUT1: in1 - in0}")
    [result] = unit_results(project)
    reference = load_reference(project)
    inputs = reference.make_inputs(1, seed=0)
    a, b = inputs["INPUT0"][0, 0], inputs["INPUT1"][0, 0]
    assert not result.passed
    assert result.detail == (
        "add_sub, batch 1, seed 0: output OUTPUT1: 16 of 16 elements differ within rtol=1e-06, atol=1e-06; "
        f"first at [0, 0]: got {float(b - a)!r}, expected {float(a - b)!r}"
    )


def test_a_stream_of_another_length_fails_with_both_counts(copy_of):
    project = copy_of("decoupled")
    edit(
        version_file(project, "repeat_int32"),
        'zip(inputs["IN"], inputs["DELAY"])',
        'zip(inputs["IN"][1:], inputs["DELAY"])',
    )
    [result] = unit_results(project)
    assert not result.passed
    assert (
        result.detail
        == "repeat_int32, batch None, seed 0: 3 responses from stream(), 4 from reference.responses()"
    )


def test_a_wrong_step_fails_naming_the_sequence_and_request(copy_of):
    project = copy_of("sequence")
    edit(
        version_file(project, "accumulate"),
        "np.add(state, inputs[SUMMED]",
        "np.subtract(state, inputs[SUMMED]",
    )
    [result] = unit_results(project)
    assert not result.passed
    assert result.detail.startswith("accumulate, sequence 0 (seeds 0..3), request 0: output OUTPUT: 16 of 16")
    assert "first at [0, 0]: got " in result.detail


def test_a_route_to_a_model_not_called_fails(copy_of):
    project = copy_of("bls")
    edit(version_file(project, "bls_sync"), "return selector, inputs", 'return "elsewhere", inputs')
    results = unit_results(project)
    assert [r.passed for r in results] == [False, True, True]
    assert results[0].detail == (
        "bls_sync, batch 1, seed 0: asks model 'elsewhere', not among the models bls_sync calls "
        "['add_sub', 'add_sub_2']"
    )


def test_a_route_that_leaves_out_a_required_input_fails_as_triton_would(copy_of):
    project = copy_of("bls")
    edit(
        version_file(project, "bls_sync"),
        "return selector, inputs",
        'return selector, {"INPUT0": inputs["INPUT0"]}',
    )
    detail = unit_results(project, ["bls_sync"])[0].detail
    assert detail.startswith("bls_sync, batch 1, seed 0: route() sends add_sub INPUT0; its inputs are ")
    assert detail.endswith("(required: INPUT0, INPUT1), so Triton refuses the request")


def test_an_exception_in_compute_names_its_file_and_line(copy_of, monkeypatch):
    project = copy_of("default")
    compute = version_file(project, "add_sub")
    line = edit(compute, "    in1 = inputs[INPUT1]\n", '    raise RuntimeError("no luck")\n')
    [result] = unit_results(project)  # tbgen runs elsewhere: the path is absolute
    assert not result.passed
    assert result.detail == f"RuntimeError: no luck; at {compute}:{line}"
    monkeypatch.chdir(project)  # tbgen runs in the project: the path is relative to it
    [result] = unit_results(project)
    assert result.detail == f"RuntimeError: no luck; at model_repository/add_sub/1/compute.py:{line}"


def test_an_import_error_in_compute_names_its_line(copy_of):
    project = copy_of("decoupled")
    compute = version_file(project, "repeat_int32")
    line = edit(compute, "import numpy as np\n", "import numpy as np\nimport not_installed_anywhere\n") + 1
    [result] = unit_results(project)
    assert not result.passed
    assert result.detail == (
        f"ModuleNotFoundError: No module named 'not_installed_anywhere'; at {compute}:{line}"
    )


def test_a_test_file_that_stops_gives_one_failed_result_with_its_error(copy_of):
    project = copy_of("default")
    edit(
        version_file(project, "add_sub"),
        "    in1 = inputs[INPUT1]\n",
        "    in1 = inputs[INPUT1]\n    os.abort()\n",
    )
    edit(version_file(project, "add_sub"), "import numpy as np\n", "import os\n\nimport numpy as np\n")
    [result] = unit_results(project)
    assert not result.passed and result.name == "unit tests"
    assert result.detail.startswith("tests/test_compute.py crashed (SIGABRT) after 0 results")
    test_file = project / "tests" / "test_compute.py"
    line = edit(test_file, "\nimport numpy as np\n", "\nimport numpy as np\nnot python(\n") + 2
    [result] = unit_results(project)
    assert result.detail.startswith(
        "tests/test_compute.py stopped (exit status 1) after 0 results: SyntaxError"
    )
    assert result.detail.endswith(f"; at {test_file}:{line}")


def test_a_project_without_the_file_skips_saying_how_to_get_it(copy_of, tmp_path, monkeypatch):
    project = copy_of("default")
    (project / "tests" / "test_compute.py").unlink()
    monkeypatch.chdir(tmp_path)
    [result] = unit_results(project)
    assert result.passed  # a skip, said: the project still tests in a server as before
    assert result.detail == (
        "skipped: unit-default has no tests/test_compute.py (a tbgen without unit tests for Python models "
        "generated it); `tbgen update --project default` adds the file."
    )


def test_a_composed_project_tests_each_model_alone_when_asked(generated):
    project = generated("bls")
    [result] = unit_results(project, ["add_sub_2"])
    assert result.passed and result.name == "add_sub_2: compute() against reference.compute()"


# --------------------------------------------------------------------------- native


@pytest.mark.slow
def test_a_native_project_tests_its_extension_once_built(tmp_path, require_pybind11):
    project = new_project(tmp_path, "python-backend", "native=yes", name="nat")
    [result] = unit_results(project)  # never built: the numpy fallback runs, and the result says so
    assert result.passed and "nat_native is not built, so the numpy fallback ran" in result.detail
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout + built.stderr
    [result] = unit_results(project)
    assert result.passed and "not built" not in result.detail, result
    # An edit of the extension's source is built before the tests run, and they test it.
    edit(project / "native" / "src" / "compute.cc", "*out1 = in0 - in1;", "*out1 = in1 - in0;")
    [result] = unit_results(project)
    assert not result.passed
    assert result.detail.startswith("add_sub, batch 1, seed 0: output OUTPUT1: 16 of 16 elements differ")
