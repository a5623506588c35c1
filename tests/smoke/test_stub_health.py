"""A python stub that dies or hangs during the smoke suite: found after the check it happened in, named with
its model and instance, the model's remaining checks not run, the run failed and ended in time with nothing
left running; and the decision to check, on a server of 25.12+, that such an instance turns its model not
ready.

The served tests kill (SIGKILL) or stop (SIGSTOP) a real stub of the embedded 2.51 server, which keeps
answering that the model is ready (server issue #8604) and fails its requests "Stub process '...' is not
healthy." after a second.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import triton_processes_of

from triton_backend_gen import versions
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.stub_watch import Stub, StubTrouble
from triton_backend_gen.scaffold import render_new_project
from triton_backend_gen.smoke.run import SmokeCheck, run_smoke
from triton_backend_gen.smoke.stub_health import (
    ISSUE_8604,
    ServedRelease,
    StubDeath,
    backend_error,
    death_text,
    plans_unhealthy_instance_checks,
    served_release,
    server_goes_unready,
)
from triton_backend_gen.smoke.suite import SuiteProgress, run_suite

ENDPOINTS = None  # the pure tests' checks contact no server
DEADLINE_S = 40  # a run whose stub died or hung ends within this (server start and stop included)


# --- decisions ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("release", "planned"),
    [("24.10", False), ("25.11", False), ("25.12", True), ("26.02", True), ("26.04", True), ("26.08", True)],
)
def test_the_unhealthy_instance_check_is_planned_where_the_server_reports_a_python_instances_health(
    release, planned
):
    served = versions.resolve(release)
    assert plans_unhealthy_instance_checks(served, sees_stubs=True) is planned
    assert plans_unhealthy_instance_checks(served, sees_stubs=False) is False  # a container, --url: no kill
    assert server_goes_unready(served) is (release >= "26.04")


def test_a_server_of_a_release_tbgen_does_not_know_gets_no_unhealthy_instance_check():
    assert served_release("9.99.0") == ServedRelease("9.99.0", None)
    assert served_release("2.51.0").release == versions.resolve("24.10")
    assert plans_unhealthy_instance_checks(None, sees_stubs=True) is False


def test_the_backends_error_is_picked_from_a_failed_checks_detail():
    detail = (
        "2 of 8 concurrent requests failed: InferenceServerException: Stub process 'm_0_0' is not healthy."
    )
    assert backend_error(detail) == "Stub process 'm_0_0' is not healthy."
    assert backend_error("outputs differ at [0, 3]") is None


def _death(release: str, model_ready, server_ready, dead=True) -> StubDeath:
    how = "killed by SIGKILL" if dead else "stopped by SIGSTOP (state T)"
    trouble = StubTrouble(Stub(7, "m", "m_0_0", 1), dead, how)
    served = ServedRelease(versions.resolve(release).server_version, versions.resolve(release))
    error = "Stub process 'm_0_0' is not healthy."
    return StubDeath(trouble, "infer [grpc]", served, model_ready, server_ready, error)


def test_what_the_report_says_follows_what_the_server_answered_and_its_release():
    old = death_text(_death("24.10", True, True))
    assert "model 'm' instance m_0_0 died during 'infer [grpc]'" in old
    assert "its process had exited (killed by SIGKILL)" in old
    assert "still answers that the model is ready" in old and ISSUE_8604 in old
    assert "Requests to it fail: Stub process 'm_0_0' is not healthy." in old
    reporting = death_text(_death("26.03", False, True))
    assert "answers that the model is not ready." in reporting and ISSUE_8604 not in reporting
    assert "not ready itself" in death_text(_death("26.04", False, False))
    hung = death_text(_death("26.03", True, True, dead=False))  # a stopped stub, a model without is_ready()
    assert "hung during" in hung and "still answers that the model is ready." in hung
    assert ISSUE_8604 not in hung


def test_a_broken_model_fails_its_check_and_its_remaining_checks_are_not_run_while_others_go_on():
    ran = []

    def check(name: str, model: str) -> SmokeCheck:
        return SmokeCheck(name, "http", lambda endpoints: ran.append(name) or "fine", model=model)

    plan = [check("a1", "a"), check("b1", "b"), check("a2", "a"), check("b2", "b"), check("a3", "a")]
    broken_after = {"b1"}  # the stub of a breaks during b1 (a BLS call into it, a crash in the background)

    def broken(done: SmokeCheck, result) -> dict[str, str]:
        return {"a": "a's stub died"} if done.name in broken_after or "a2" in ran else {}

    results = run_smoke(plan, ENDPOINTS, broken_models=broken)
    assert ran == ["a1", "b1", "b2"]
    verdicts = {r.name: (r.passed, r.detail) for r in results}
    assert verdicts["a1"] == (True, "fine")
    assert verdicts["b1"] == (True, "fine")  # the broken model is a, not b
    assert verdicts["a2"] == (False, "not run: a's stub died")
    assert verdicts["a3"] == (False, "not run: a's stub died")
    assert verdicts["b2"] == (True, "fine")


def test_the_check_a_stub_broke_in_fails_whatever_it_said():
    plan = [SmokeCheck("a1", "http", lambda endpoints: "answered", model="a")]
    [result] = run_smoke(plan, ENDPOINTS, broken_models=lambda check, result: {"a": "a's stub died"})
    assert not result.passed
    assert result.detail == "a's stub died; the check itself passed: answered"


# --- a real stub of the embedded server ---------------------------------------------------------------------
def stub_pids(project: Path) -> list[int]:
    """The pids of the live python stubs of ``project``'s models, read from /proc (not by the tested code)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"triton_python_backend_stub") and str(project).encode() in argv[1]:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """A python-backend project for the embedded server's release, rendered once: each test serves a copy."""
    return render_new_project(
        "python-backend", tmp_path_factory.mktemp("stub") / "p", {"triton_version": "24.10"}
    )


@pytest.fixture
def python_project(rendered, tmp_path, server_or_skip) -> Path:
    return Path(shutil.copytree(rendered, tmp_path / "p", symlinks=True))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stop", "at", "what"),
    [
        (signal.SIGKILL, "batch sizes 1..8 [grpc]", "died during 'batch sizes 1..8 [grpc]'"),
        (signal.SIGSTOP, "metadata [grpc]", "hung during 'metadata [grpc]'"),
    ],
    ids=["killed", "stopped"],
)
def test_a_stub_that_dies_or_hangs_mid_suite_is_named_and_the_run_fails_in_time(
    python_project, stop, at, what
):

    project = load_project(python_project)
    triton = prepare_server(project)
    stopped: list[int] = []

    class StopTheStub(SuiteProgress):
        def check(self, check: SmokeCheck) -> None:
            if f"{check.name} [{check.protocol}]" == at:
                [pid] = stub_pids(python_project)
                os.kill(pid, stop)
                stopped.append(pid)

    started = time.monotonic()
    try:
        report = run_suite(project, triton, progress=StopTheStub())
    finally:
        for pid in set(stopped) & set(stub_pids(python_project)):  # nothing left behind, whatever happened
            os.kill(pid, signal.SIGKILL)
    seconds = time.monotonic() - started
    assert stopped, f"the suite never ran {at}"
    assert not report.passed and seconds < DEADLINE_S
    assert triton_processes_of(python_project) == [] and not triton.running
    [stub] = [r for r in report.results if r.name.startswith("python stub")]
    assert stub.name == "python stub add_sub_0_0" and not stub.passed
    assert f"model 'add_sub' instance add_sub_0_0 {what}" in stub.detail
    how = "killed by SIGKILL" if stop == signal.SIGKILL else "stopped by SIGSTOP"
    assert how in stub.detail
    assert "still answers that the model is ready" in stub.detail and ISSUE_8604 in stub.detail
    assert "Requests to it fail: Stub process 'add_sub_0_0' is not healthy." in stub.detail
    names = [f"{r.name} [{r.protocol}]" for r in report.results]
    after = report.results[names.index(at) + 1 : names.index(stub.name + " [-]")]
    assert not report.results[names.index(at)].passed
    assert after and all(r.detail.startswith("not run: the python stub of model 'add_sub'") for r in after)
    assert all(r.passed for r in report.results[: names.index(at)])


@pytest.mark.slow
def test_tbgen_test_reports_a_killed_stub_by_model_and_instance(python_project):
    """The CLI starts its own server; the stub is killed once the first inference check has passed."""
    command = [sys.executable, "-m", "triton_backend_gen", "test", str(python_project), "--no-unit"]
    env = {**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        for line in run.stdout:
            lines.append(line)
            if line.startswith("pass  infer [http]"):
                [pid] = stub_pids(python_project)
                os.kill(pid, signal.SIGKILL)
        code = run.wait(timeout=DEADLINE_S)
    finally:
        run.kill()
        run.wait()
    output, errors = "".join(lines), run.stderr.read()
    assert code == 1 and time.monotonic() - started < DEADLINE_S
    assert "Traceback" not in output + errors
    assert "FAIL  python stub add_sub_0_0" in output
    assert "model 'add_sub' instance add_sub_0_0 died during" in output
    assert "killed by SIGKILL" in output and ISSUE_8604 in output
    assert "not run: the python stub of model 'add_sub'" in output
    assert triton_processes_of(python_project) == []
