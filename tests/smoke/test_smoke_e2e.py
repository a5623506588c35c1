"""The smoke suite and the fuzzer against the real server (the embedded tritonserver 2.51), one per project.

Generated projects must pass every check; deliberately broken ones must fail the right checks, saying why.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold import render_new_project
from triton_backend_gen.smoke import (
    Endpoints,
    plan_fuzz,
    plan_smoke,
    run_fuzz,
    run_smoke,
)

# One worker for the module: its module-scoped server serves every test (see tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smoke-e2e")]

FUZZ_COUNT = 200

# (id, template, answers)
GOOD = [
    ("python-default", "python-backend", {}),
    ("python-vectorized", "python-backend", {"batching": "vectorized"}),
    ("decoupled-python", "decoupled-backend", {"language": "python"}),
]


def start(project: Path):
    """A running server for ``project``, or skip saying why there is none."""
    from triton_backend_gen.runtime import start_server

    try:
        return start_server(load_project(project))
    except ServerError as err:
        pytest.skip(f"no tritonserver to test against: {err}")


class Served:
    def __init__(self, project: Path, server) -> None:
        self.project = load_project(project)
        self.server = server
        self.endpoints = Endpoints(server.http_url, server.grpc_url)

    def smoke(self, project: Path | None = None):
        plan = plan_smoke(load_project(project) if project else self.project)
        return {
            (r.name, r.protocol): r
            for r in run_smoke(plan, self.endpoints, is_healthy=lambda: self.server.running)
        }


@pytest.fixture(scope="module", params=GOOD, ids=[variant[0] for variant in GOOD])
def served(request, tmp_path_factory):
    _, template, answers = request.param
    project = render_new_project(template, tmp_path_factory.mktemp("smoke") / "my-backend", answers)
    with start(project) as server:
        yield Served(project, server)


def test_every_check_passes(served):
    results = served.smoke()
    failed = [f"{name} [{protocol}]: {r.detail}" for (name, protocol), r in results.items() if not r.passed]
    assert not failed, "\n".join(failed)
    assert len(results) >= 15
    merging = "concurrent requests (dynamic batching)"
    concurrency = {c.protocol: c for c in plan_smoke(served.project) if c.name == merging}
    for protocol, check in concurrency.items():
        # A python model is busy for milliseconds per execute, so concurrent requests queue and merge. On a
        # machine loaded by other tests the burst's threads can start too far apart to meet, so the check
        # (3 bursts) gets a few more tries before a missing merge fails the test.
        details = [results[check.name, protocol].detail]
        while "dynamic batching merged them" not in details[-1] and len(details) < 5:
            details.append(check.run(served.endpoints))
        assert "dynamic batching merged them" in details[-1], f"[{protocol}] {details}"


def test_fuzz_leaves_the_server_healthy(served, record_property, capsys):
    report = run_fuzz(
        plan_fuzz(served.project, FUZZ_COUNT, seed=0),
        served.endpoints,
        server_pid=served.server.pid,
        is_healthy=lambda: served.server.running,
    )
    record_property("fuzz", report.summary())
    with capsys.disabled():
        print(f"\n[{served.project.template} {served.project.kind.value}] {report.summary()}")
    assert report.requests == FUZZ_COUNT and not report.truncated
    assert report.passed, report.summary()
    assert report.outcomes["ok"] > 0 and report.errors, "the fuzzer must both succeed and be refused"
    assert report.rss_before and report.rss_after


def test_a_reference_that_disagrees_with_the_model_fails_the_inference_checks(served, tmp_path):
    """The served model is the good one; the plan comes from a copy whose reference.py computes otherwise."""
    copy = Path(
        shutil.copytree(served.project.root, tmp_path / "edited", ignore=shutil.ignore_patterns("build"))
    )
    reference = copy / "reference.py"
    if served.project.template == "decoupled-backend":
        text = reference.read_text().replace('{"OUT": np.array([value]', '{"OUT": np.array([value + 1]')
        inference = [
            "stream",
            "several requests on one stream",
            "concurrent streams",
            "stream cancelled mid-way",
        ]
        expected_message = "OUT: 1 of 1 elements differ exactly"
    else:
        text = reference.read_text().replace("OUTPUT1: (a - b)", "OUTPUT1: (b - a)")
        inference = ["infer", "batch sizes 1..8", "concurrent requests (dynamic batching)"]
        expected_message = "OUTPUT1: "
    assert text != reference.read_text(), "the edit did not apply: the template changed"
    reference.write_text(text)
    results = served.smoke(copy)
    for name, result in results.items():
        if name[0] in inference:
            assert not result.passed, name
            assert "outputs differ from reference.py" in result.detail and expected_message in result.detail
            assert "OUTPUT0" not in result.detail, "only the edited output differs"
        else:
            assert result.passed, f"{name}: {result.detail}"


def _broken_python_model(root: Path) -> None:
    model = root / "model_repository" / "add_sub" / "1" / "compute.py"
    text = model.read_text()
    assert "OUTPUT1: in0 - in1}" in text
    model.write_text(text.replace("OUTPUT1: in0 - in1}", "OUTPUT1: in0 - in1 + 1}"))


def _broken_decoupled_model(root: Path) -> None:
    compute = root / "model_repository" / "repeat_int32" / "1" / "compute.py"  # the user's stream
    text = compute.read_text()
    assert 'zip(inputs["IN"], inputs["DELAY"])' in text
    compute.write_text(
        text.replace('zip(inputs["IN"], inputs["DELAY"])', 'zip(inputs["IN"][:-1], inputs["DELAY"])')
    )


@pytest.mark.parametrize(
    ("template", "answers", "breakage", "failing", "message"),
    [
        (
            "python-backend",
            {},
            _broken_python_model,
            {"infer", "batch sizes 1..8", "concurrent requests (dynamic batching)"},
            "outputs differ from reference.py: OUTPUT1: ",
        ),
        (
            "decoupled-backend",
            {"language": "python"},
            _broken_decoupled_model,
            {"stream", "several requests on one stream", "concurrent streams", "stream cancelled mid-way"},
            "3 responses with data, reference.responses gives 4",
        ),
    ],
    ids=["python-model-wrong-output", "decoupled-model-drops-a-response"],
)
def test_a_broken_model_fails_the_right_checks(tmp_path, template, answers, breakage, failing, message):
    project = render_new_project(template, tmp_path / "broken", answers)
    breakage(project)
    with start(project) as server:
        results = Served(project, server).smoke()
    failed = {name for (name, _), r in results.items() if not r.passed}
    assert failed == failing
    for (name, _), result in results.items():
        if name in failing:
            assert message in result.detail, result.detail


def test_checks_after_a_server_crash_are_reported_not_run(tmp_path):
    project = render_new_project("python-backend", tmp_path / "crash", {})
    with start(project) as server:
        served = Served(project, server)
        plan = plan_smoke(served.project)
        crash_after = next(i for i, check in enumerate(plan) if check.name == "infer")

        def crash(_endpoints, server=server):
            server.stop()
            return "stopped the server"

        plan.insert(crash_after, type(plan[0])("crash", "-", crash))
        started = time.monotonic()
        results = run_smoke(plan, served.endpoints, is_healthy=lambda: server.running)
    assert time.monotonic() - started < 60
    crashed = results[crash_after]
    assert not crashed.passed and crashed.detail.startswith("the server is not healthy after this check")
    assert all(
        r.detail == "not run: the server stopped being healthy during 'crash'"
        for r in results[crash_after + 1 :]
    )
    assert all(r.passed for r in results[:crash_after])


def test_fuzz_catches_a_model_that_leaks_memory(tmp_path):
    """A model that keeps 8 MiB per computed request: answers stay right, the memory check fails."""
    project = render_new_project("python-backend", tmp_path / "leaky", {})
    model = project / "model_repository" / "add_sub" / "1" / "compute.py"
    text = model.read_text()
    assert "    return {OUTPUT0: in0 + in1" in text
    model.write_text(
        text.replace(
            "    return {OUTPUT0: in0 + in1",
            "    _KEPT.append(np.ones(1 << 20))\n    return {OUTPUT0: in0 + in1",
        )
        + "\n_KEPT = []\n"
    )
    with start(project) as server:
        served = Served(project, server)
        report = run_fuzz(
            plan_fuzz(served.project, FUZZ_COUNT, seed=0), served.endpoints, server_pid=server.pid
        )
    assert not report.failures and report.healthy, report.summary()
    assert not report.memory_ok and not report.passed
    assert "ABOVE the limit" in report.summary()


def test_fuzz_cases_also_run_as_smoke_checks(served):
    cases = plan_fuzz(served.project, 30, seed=5)
    results = run_smoke(cases, served.endpoints, is_healthy=lambda: served.server.running)
    assert [r.name for r in results] == [f"fuzz #{c.index} {c.kind}" for c in cases]
    assert all(r.passed for r in results), [r.detail for r in results if not r.passed]
    assert {r.detail for r in results} & {"ok", "cancelled", "disconnected"}
