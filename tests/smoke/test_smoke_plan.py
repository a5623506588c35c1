"""The smoke suite without a server: what plan_smoke plans from a config, the comparisons, run_smoke,
JUnit."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.project import load_project
from triton_backend_gen.smoke import (
    Endpoints,
    SmokeCheck,
    SmokeError,
    SmokeResult,
    config_differences,
    load_reference,
    output_mismatches,
    plan_smoke,
    run_smoke,
    write_junit_xml,
)

# Nothing listens here: planning must never contact a server, and the reference check needs none.
NOWHERE = Endpoints("127.0.0.1:1", "127.0.0.1:2")


def names(plan: list[SmokeCheck]) -> set[tuple[str, str]]:
    return {(check.name, check.protocol) for check in plan}


def run_offline_checks(plan: list[SmokeCheck]) -> list[SmokeResult]:
    return run_smoke([check for check in plan if check.protocol == "-"], NOWHERE)


# ---- plan_smoke -----------------------------------------------------------------------------------------


def test_batching_model_gets_every_batch_size_concurrency_and_an_oversized_batch(render_template):
    project = load_project(render_template("python-backend", max_batch_size=4))
    plan = names(plan_smoke(project))
    for protocol in ("http", "grpc"):
        assert {("metadata", protocol), ("config", protocol), ("infer", protocol)} <= plan
        assert ("batch sizes 1..4", protocol) in plan
        assert ("concurrent requests (dynamic batching)", protocol) in plan
        for bad in ("wrong dtype", "wrong shape", "missing input", "unknown input", "batch larger than max"):
            assert (f"bad request: {bad}", protocol) in plan
    assert not any("stream" in name for name, _ in plan)
    assert [r.passed for r in run_offline_checks(plan_smoke(project))] == [True]


def test_model_without_batching_has_no_batch_checks(render_template):
    project = load_project(render_template("python-backend", max_batch_size=0, dims="-1"))
    plan = names(plan_smoke(project))
    assert ("infer", "http") in plan and ("concurrent requests", "grpc") in plan
    assert not any(name.startswith("batch sizes") or "batch larger" in name for name, _ in plan)
    assert run_offline_checks(plan_smoke(project))[0].passed


def test_without_dynamic_batching_concurrency_does_not_expect_merged_executions(render_template):
    project = load_project(render_template("python-backend", dynamic_batching=False))
    plan = names(plan_smoke(project))
    assert ("concurrent requests", "http") in plan
    assert ("concurrent requests (dynamic batching)", "http") not in plan


def test_decoupled_model_is_tested_over_grpc_streams(render_template):
    project = load_project(render_template("decoupled-backend", language="python"))
    plan = plan_smoke(project)
    found = names(plan)
    for name in (
        "stream",
        "several requests on one stream",
        "concurrent streams",
        "stream cancelled mid-way",
    ):
        assert (name, "grpc") in found
    assert ("refuses HTTP /infer (decoupled)", "http") in found
    assert ("refuses unary gRPC infer (decoupled)", "grpc") in found
    # Unary inference cannot reach a decoupled model: no infer checks, bad requests go over the stream.
    assert not any(name in ("infer", "concurrent requests") for name, _ in found)
    bad = {(name, protocol) for name, protocol in found if name.startswith("bad request")}
    assert bad and {protocol for _, protocol in bad} == {"grpc"}
    assert ("bad request: batch larger than max", "grpc") not in found  # max_batch_size is 0
    assert run_offline_checks(plan)[0].passed


def test_a_request_without_responses_is_checked_when_the_reference_makes_one(render_template):
    """reference.no_response_inputs is optional: references written before it existed plan without it."""
    project = render_template("decoupled-backend", language="python")
    assert ("request without responses", "grpc") in names(plan_smoke(load_project(project)))
    reference = project / "reference.py"
    text = reference.read_text()
    assert "def no_response_inputs(" in text
    reference.write_text(text.replace("def no_response_inputs(", "def _no_response_inputs("))
    assert ("request without responses", "grpc") not in names(plan_smoke(load_project(project)))


@pytest.mark.parametrize("dtype", ["FP16", "INT32", "INT64"])
def test_each_dtype_plans_and_its_reference_agrees_with_the_config(render_template, dtype):
    project = load_project(render_template("python-backend", dtype=dtype))
    plan = plan_smoke(project)
    result = run_offline_checks(plan)[0]
    assert result.passed, result.detail
    reference = load_reference(project.root)
    exact = dtype.startswith("INT")
    assert (reference.TOLERANCE == {"rtol": 0, "atol": 0}) == exact


def test_reference_that_disagrees_with_the_config_fails_its_check(render_template):
    root = render_template("python-backend", dtype="FP32")
    config = root / "model_repository" / "add_sub" / "config.pbtxt"
    config.write_text(config.read_text().replace("TYPE_FP32", "TYPE_FP16"))
    result = run_offline_checks(plan_smoke(load_project(root)))[0]
    assert not result.passed
    assert "reference.py disagrees with config.pbtxt" in result.detail
    assert "dtype float32, config.pbtxt says FP16" in result.detail


def test_the_plan_names_models_when_a_project_has_several(render_template):
    root = render_template("python-backend")
    (root / "model_repository" / "add_sub_copy").mkdir()
    source = (root / "model_repository" / "add_sub" / "config.pbtxt").read_text()
    (root / "model_repository" / "add_sub_copy" / "config.pbtxt").write_text(
        source.replace('"add_sub"', '"add_sub_copy"')
    )
    toml = root / "tbgen.toml"
    toml.write_text(
        toml.read_text().replace(
            "[answers]",
            '[[models]]\nname = "add_sub_copy"\ndecoupled = false\nmax_batch_size = 8\n\n[answers]',
        )
    )
    plan = plan_smoke(load_project(root))
    assert ("add_sub: infer", "http") in names(plan) and ("add_sub_copy: infer", "http") in names(plan)


# ---- reference.py loading -------------------------------------------------------------------------------


def test_references_of_two_projects_do_not_collide(render_template, tmp_path):
    first = render_template("python-backend", project_name="first", dtype="INT32")
    second = render_template("python-backend", project_name="second", dtype="FP16")
    a, b = load_reference(first), load_reference(second)
    assert a is not b and a.__name__ != b.__name__
    assert a.DTYPE is np.int32 and b.DTYPE is np.float16


def test_missing_or_broken_reference_is_a_clear_error(render_template):
    root = render_template("python-backend")
    (root / "reference.py").write_text("import numpy as np\nraise RuntimeError('half-written')\n")
    with pytest.raises(SmokeError, match="reference.py fails to import: RuntimeError: half-written"):
        plan_smoke(load_project(root))
    (root / "reference.py").write_text(
        "TOLERANCE = {}\ndef make_inputs(batch_size, seed=0):\n    return {}\n"
    )
    with pytest.raises(SmokeError, match="lacks compute"):
        plan_smoke(load_project(root))
    (root / "reference.py").unlink()
    with pytest.raises(SmokeError, match="reference.py does not exist"):
        plan_smoke(load_project(root))


# ---- comparing outputs ----------------------------------------------------------------------------------


def test_integers_compare_exactly():
    want = {"OUT": np.array([[1, 2, 3]], dtype=np.int32)}
    assert output_mismatches({"OUT": want["OUT"].copy()}, want, {"rtol": 1, "atol": 1}) == []
    off_by_one = {"OUT": np.array([[1, 2, 4]], dtype=np.int32)}
    (problem,) = output_mismatches(off_by_one, want, {"rtol": 1, "atol": 1})  # tolerance ignored for ints
    assert problem == "OUT: 1 of 3 elements differ exactly; first at [0, 2]: got 4, expected 3"


def test_floats_compare_within_the_tolerance():
    want = {"Y": np.array([1.0, 100.0, np.nan], dtype=np.float32)}
    close = {"Y": np.array([1.0 + 5e-7, 100.0 + 5e-5, np.nan], dtype=np.float32)}
    assert output_mismatches(close, want, {"rtol": 1e-6, "atol": 1e-6}) == []
    far = {"Y": np.array([1.1, 100.0, np.nan], dtype=np.float32)}
    (problem,) = output_mismatches(far, want, {"rtol": 1e-6, "atol": 1e-6})
    assert problem.startswith("Y: 1 of 3 elements differ within rtol=1e-06, atol=1e-06; first at [0]")


def test_dtype_shape_and_missing_outputs_are_reported_by_name():
    want = {"A": np.zeros((2, 3), np.float32), "B": np.zeros(3, np.int64), "C": np.zeros(1, np.int32)}
    got = {"A": np.zeros((3, 2), np.float32), "B": np.zeros(3, np.int32), "C": None}
    assert output_mismatches(got, want, {}) == [
        "A: shape [3, 2], expected [2, 3]",
        "B: dtype int32, expected int64",
        "C: missing from the response",
    ]


# ---- config as served -----------------------------------------------------------------------------------


def test_config_differences_ignore_what_the_server_fills_in(render_template):
    root = render_template("python-backend")
    local = load_model_config(root / "model_repository" / "add_sub" / "config.pbtxt")
    served = type(local)()
    served.CopyFrom(local)
    served.dynamic_batching.preferred_batch_size.append(8)  # the server adds defaults
    served.instance_group[0].name = "add_sub_0"
    served.input[0].allow_ragged_batch = False
    assert config_differences(local, served) == []
    served.input[1].dims[:] = [16, 1]
    served.ClearField("dynamic_batching")
    assert config_differences(local, served) == [
        "input[INPUT1].dims: [16] in config.pbtxt, [16, 1] as served",
        "dynamic_batching: set in config.pbtxt, missing as served",
    ]


# ---- run_smoke and JUnit --------------------------------------------------------------------------------


def _fails(_endpoints):
    raise AssertionError("OUTPUT0 differs")


def _breaks(_endpoints):
    raise ConnectionRefusedError("connection refused")


def test_run_smoke_reports_each_check_with_its_reason():
    plan = [
        SmokeCheck("passes", "http", lambda endpoints: f"spoke to {endpoints.http_url}"),
        SmokeCheck("fails", "grpc", _fails),
        SmokeCheck("breaks", "http", _breaks),
    ]
    results = run_smoke(plan, NOWHERE)
    assert [(r.name, r.passed) for r in results] == [("passes", True), ("fails", False), ("breaks", False)]
    assert results[0].detail == "spoke to 127.0.0.1:1"
    assert results[1].detail == "OUTPUT0 differs"
    assert results[2].detail == "ConnectionRefusedError: connection refused"
    assert all(r.seconds >= 0 for r in results)


def test_run_smoke_stops_trusting_a_server_that_became_unhealthy():
    health = iter([True, False])
    plan = [SmokeCheck(f"check {i}", "http", lambda endpoints: "fine") for i in range(4)]
    results = run_smoke(plan, NOWHERE, is_healthy=lambda: next(health))
    assert [r.passed for r in results] == [True, False, False, False]
    assert results[1].detail == "the server is not healthy after this check (fine)"
    assert results[2].detail == "not run: the server stopped being healthy during 'check 1'"


def test_junit_xml_has_one_testcase_per_result(tmp_path: Path):
    results = [
        SmokeResult("infer", "http", True, "8 batch sizes", 0.25),
        SmokeResult("infer", "grpc", False, "OUTPUT1: 3 of 16 elements differ\nmore", 0.5),
        SmokeResult("reference.py matches config.pbtxt", "-", True, "ok", 0.0),
    ]
    path = tmp_path / "reports" / "smoke.xml"
    write_junit_xml(results, path, "my-backend")
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite.get("name") == "my-backend" and suite.get("tests") == "3" and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "infer [http]",
        "infer [grpc]",
        "reference.py matches config.pbtxt",
    ]
    failure = cases[1].find("failure")
    assert failure.get("message") == "OUTPUT1: 3 of 16 elements differ"
    assert failure.text == "OUTPUT1: 3 of 16 elements differ\nmore"
    assert cases[0].find("failure") is None and float(suite.get("time")) == pytest.approx(0.75)
