"""The unit tests of a C++ project: its computation (src/compute.cc) against reference.py, with no server.

The C++ templates generate them in ``tests/unit/`` (docs/templates.md): a GoogleTest target,
``<backend>_unit_tests``, that links src/compute.cc with the tests only, and ``write_cases.py``, which writes
a model's case file (the requests of ``reference.make_inputs`` and what reference.py answers them) for the
target to read. Here the target is built incrementally in the project's build directory (configured first
by ``tbgen build``'s stage when it is not yet: never again when only sources changed), each model's case file
is written when its reference.py or the writer changed, and the binary runs with a JSON report, one
UnitResult per GoogleTest test, stopping at the first failure. `ctest --test-dir build` runs the same tests
(the writer as a CTest fixture) without tbgen.

Projects without ``tests/unit/`` (a BLS router's Route and a framework's PreProcess/PostProcess run only
around the models they call; a project generated before the unit tests existed) have none: [].
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from triton_backend_gen.errors import BuildError
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.toolchain.build import build_project
from triton_backend_gen.toolchain.cmake import (
    LOG_NAME,
    build_command,
    first_error_line,
    openable,
    run_build_process,
)
from triton_backend_gen.toolchain.unit_result import UnitResult

UNIT_DIR = Path("tests") / "unit"
WRITER = UNIT_DIR / "write_cases.py"
CASES_DIR = "unit_cases"  # under the build directory: <model>.cases, and each run's <model>.json report
UNIT_LOG = "tbgen-unit-build.log"
WRITER_TIMEOUT_S = 300
RUN_TIMEOUT_S = 600
_RUN_LINE = re.compile(r"^\[ RUN      \] (\S+)", re.MULTILINE)
_FAILURE_PLACE = re.compile(r"^\S+:\d+$")  # GoogleTest's "file:line" before a failure's message


def unit_target(project: Project) -> str:
    """The CMake target (and the binary in the build directory) of the project's unit tests."""
    return f"{project.backend}_unit_tests"


def _skipped(why: str) -> UnitResult:
    """A skip, said: nothing of the project's to unit-test here."""
    return UnitResult("unit tests", True, f"skipped: {why}", 0.0)


def has_unit_tests(project: Project) -> bool:
    return (project.root / UNIT_DIR / "main.cc").is_file() and (project.root / WRITER).is_file()


def run_cpp_unit_tests(project: Project, models: list[str]) -> list[UnitResult]:
    """Build the unit test target and run the tests of each of ``models`` that the project's C++ library
    serves (others are not the library's: a python model beside it), in order; stops at the first failure.
    BuildError (its message the compiler's first error, ``path:line:col: error: ...``) when it does not
    compile."""
    if not has_unit_tests(project):
        path = project.project_option()
        return [
            _skipped(
                f"{project.name} has no {UNIT_DIR}/: a BLS router or a framework backend has none (its "
                "answer comes from another model or the framework's; its README says why), and a project "
                f"generated before tbgen had them gets them from `tbgen update{path}`"
            )
        ]
    entries = [entry for entry in map(project.model, models) if entry.backend is None and not entry.pattern]
    if not entries:
        return [_skipped(f"{', '.join(models)}: no C++ code of their own to unit-test (composed or python)")]
    binary = build_unit_tests(project)
    results: list[UnitResult] = []
    for entry in entries:
        results += _run_model(project, binary, entry)
        if not results[-1].passed:
            break
    return results


# ---- Building -------------------------------------------------------------------------------------------


def build_unit_tests(project: Project) -> Path:
    """The unit test binary, brought up to date: the target alone in a configured build directory (the build
    tool re-runs CMake itself when a CMakeLists.txt changed), the project's or else its sanitizer build's
    (`tbgen build --sanitize`: the tests then run sanitized); with neither, the project's is configured and
    built by `tbgen build`'s stage first."""
    build_dir = next((d for d in (project.build_dir, project.sanitize_build_dir) if _configured(d)), None)
    if build_dir is None:
        build_dir = project.build_dir
        started = time.time()
        try:
            build_project(project)
        except BuildError as err:
            log = build_dir / LOG_NAME
            if not log.is_file() or log.stat().st_mtime < started:
                raise  # it failed before CMake ran (no nvcc, ...): its own message says why
            raise _compile_error(project, build_dir, log, err.message, err.hint) from err
    _build_target(project, build_dir)
    binary = build_dir / unit_target(project)
    if not binary.is_file():
        raise BuildError(
            f"The unit tests built, but {binary} is not there.", f"See the log: {build_dir / UNIT_LOG}"
        )
    return binary


def _configured(build_dir: Path) -> bool:
    """A CMake cache and the build system it generated (whoever configured it)."""
    generated = (build_dir / "build.ninja").is_file() or (build_dir / "Makefile").is_file()
    return (build_dir / "CMakeCache.txt").is_file() and generated


def _build_target(project: Project, build_dir: Path) -> None:
    """``cmake --build --target <unit target>``, its output in <build_dir>/tbgen-unit-build.log."""
    log = build_dir / UNIT_LOG
    command = build_command(build_dir, target=unit_target(project))
    # As cmake_build: ccache stores paths under the project relative to it, so copies share entries.
    env = {"CCACHE_BASEDIR": str(project.root.resolve()), **os.environ}
    with log.open("w") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        returncode = run_build_process(command, out, env)
    if returncode == 0:
        return
    text = log.read_text(errors="replace")
    if f"unknown target '{unit_target(project)}'" in text or "No rule to make target" in text:
        path = project.path_argument()
        raise BuildError(
            f"{build_dir} has no unit test target {unit_target(project)}: it was configured with "
            "-DBUILD_UNIT_TESTS=OFF, or without googletest.",
            f"Configure it again: `tbgen build --clean{path}`.",
        )
    raise _compile_error(project, build_dir, log, f"exit status {returncode}")


def _compile_error(project: Project, build_dir: Path, log: Path, fallback: str, hint: str = "") -> BuildError:
    """BuildError whose message begins with the first error of ``log`` (``path:line:col: error: ...``, the
    path made openable from here), then names the log."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    first = first_error_line(text)
    first = openable(first, build_dir, project.root) if first else fallback
    return BuildError(
        f"{first}\nFull log: {log}",
        hint or "Fix the first error above; the log has the complete compiler output.",
    )


# ---- Running --------------------------------------------------------------------------------------------


def _run_model(project: Project, binary: Path, entry: ModelEntry) -> list[UnitResult]:
    """The tests of one model: its case file (written when stale), then the binary on it."""
    started = time.monotonic()
    reference = entry.reference or project.reference_file
    cases = binary.parent / CASES_DIR / f"{entry.name}.cases"
    problem = _write_cases(project, entry.name, reference, cases)
    if problem:
        name = f"{entry.name}: cases from {_shown(reference, project)}"
        return [UnitResult(name, False, problem, time.monotonic() - started)]
    report = cases.with_suffix(".json")
    report.unlink(missing_ok=True)
    # Environment variables rather than flags: a googletest without one of them ignores it.
    env = {**os.environ, "GTEST_OUTPUT": f"json:{report}", "GTEST_FAIL_FAST": "1", "GTEST_COLOR": "no"}
    try:
        done = subprocess.run(
            [str(binary), str(cases)],
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:  # its output is bytes, whatever text= says
        output = (err.stdout or b"").decode(errors="replace")
        return [_stopped(entry.name, output, f"did not finish in {RUN_TIMEOUT_S} s", started)]
    return _results(entry.name, done, report, started)


def _write_cases(project: Project, model: str, reference: Path, cases: Path) -> str:
    """Writes the case file of ``model`` with this Python unless it is newer than its reference.py and the
    writer; "" or why it could not (the writer's error)."""
    writer = project.root / WRITER
    if cases.is_file() and cases.stat().st_mtime > max(_mtime(reference), _mtime(writer)):
        return ""
    command = [sys.executable, str(writer), str(cases), "--reference", str(reference), "--model", model]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=WRITER_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"tests/unit/write_cases.py did not finish in {WRITER_TIMEOUT_S} s"
    if done.returncode == 0:
        return ""
    return "tests/unit/write_cases.py failed:\n" + _tail(done.stderr or done.stdout)


def _mtime(path: Path) -> float:
    return path.stat().st_mtime if path.exists() else float("inf")


def _results(model: str, done: subprocess.CompletedProcess, report: Path, started: float) -> list[UnitResult]:
    """One UnitResult per test the binary ran, up to the first failure; a crash or an error outside the tests
    is a failure of its own."""
    if done.returncode < 0 or not report.is_file():  # a crash, a sanitizer's report, an unreadable case file
        code = -done.returncode
        how = f"crashed ({signal.Signals(code).name})" if code in signal.valid_signals() else "stopped"
        return [_stopped(model, done.stdout + done.stderr, f"{how}, exit status {done.returncode},", started)]
    results = []
    for test in _tests(json.loads(report.read_text())):
        label = test.get("label") or test.get("name", "?")
        seconds = _seconds(test.get("time", "0s"))
        failures = test.get("failures") or []
        if failures:
            detail = "\n".join(_message(failure.get("failure", "")) for failure in failures)
            return [*results, UnitResult(f"{model}: {label}", False, detail, seconds)]
        results.append(UnitResult(f"{model}: {label}", True, test.get("summary", "passed"), seconds))
    if done.returncode != 0:
        detail = f"exit status {done.returncode} after its tests passed:\n" + _after_tests(done)
        results.append(UnitResult(f"{model}: unit tests", False, detail, 0.0))
    return results


def _tests(report: dict) -> list[dict]:
    """The tests that ran, in order (GoogleTest's fail-fast marks those after a failure SKIPPED)."""
    return [
        test
        for suite in report.get("testsuites", [])
        for test in suite.get("testsuite", [])
        if test.get("result") != "SKIPPED"
    ]


def _stopped(model: str, output: str, what: str, started: float) -> UnitResult:
    """A run that ended inside a test (a crash, a sanitizer's report, a hang): that test, named from
    GoogleTest's last RUN line (<model>.<test>), and the output from that line on."""
    running = list(_RUN_LINE.finditer(output or ""))
    test = running[-1][1].split(".", 1)[-1] if running else "unit tests"
    shown = output[running[-1].start() :] if running else output
    detail = f"the unit tests {what}{f' in {test}' if running else ''}:\n{_head(shown)}"
    return UnitResult(f"{model}: {test}", False, detail, time.monotonic() - started)


def _message(failure: str) -> str:
    """A GoogleTest failure without its "file:line" and "Failed" lines (the file is the test's main.cc)."""
    lines = failure.splitlines()
    while lines and (_FAILURE_PLACE.match(lines[0]) or lines[0] == "Failed"):
        lines.pop(0)
    return "\n".join(lines)


def _seconds(text: str) -> float:
    try:
        return float(text.rstrip("s"))
    except ValueError:
        return 0.0


def _head(text: str, lines: int = 30) -> str:
    return "\n".join((text or "").strip().splitlines()[:lines])


def _after_tests(done: subprocess.CompletedProcess) -> str:
    """What a test process that failed after its tests passed said: a sanitizer's report from its start (at
    exit LeakSanitizer reports what the code under test lost), else the end of its output."""
    report = (done.stderr or "").find("ERROR: ")
    if report >= 0:
        return "\n".join(done.stderr[report:].splitlines()[:20])
    return _tail(done.stderr + done.stdout)


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _shown(path: Path, project: Project) -> str:
    return str(path.relative_to(project.root)) if path.is_relative_to(project.root) else str(path)
