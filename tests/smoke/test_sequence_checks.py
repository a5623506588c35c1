"""The smoke suite's checks of sequence models and custom metrics, against the real server: a correct
hand-written model passes them (and the fuzzer's bad sequence controls), and models that get state or metrics
wrong fail the checks that should catch them, saying why. (The generated sequence models are tested in
tests/templates.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import check_results, run_tbgen

# One worker for the module: its module-scoped server serves every test (see tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sequence-checks")]

# A sequence model keyed by correlation ID (oldest strategy), with the two custom metric families of the
# templates. BUGS swap one line for a wrong one.
MODEL = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.families = [
            pb_utils.MetricFamily(name="requests_process_latency_ns", description="Cumulative time spent "
                                  "processing requests", kind=pb_utils.MetricFamily.COUNTER),
            pb_utils.MetricFamily(name="execution_batch_size", description="Requests per execution",
                                  kind=pb_utils.MetricFamily.HISTOGRAM),
        ]
        self.latency = self.families[0].Metric(labels=labels)
        self.batch = self.families[1].Metric(labels=labels, buckets=[1, 2, 4, 8, 16])

    def execute(self, requests):
        began = time.time_ns()
        self.batch.observe(len(requests))  # OBSERVE
        responses = []
        for request in requests:
            def value(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy().item()
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            tag = json.loads(request.parameters() or "{}").get("tag", "untagged")
            if not isinstance(tag, str):  # TAG
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"request parameter tag must be a string, got {type(tag).__name__}")))
                continue
            key = value("CORRID")  # KEY
            if value("START"):  # RESET
                self.sums[key] = np.zeros_like(x)
            self.sums[key] = self.sums.get(key, np.zeros_like(x)) + x
            scale = json.loads(request.parameters() or "{}").get("scale", 1)  # a request parameter
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", self.sums[key] * scale)]))
            if value("END"):
                del self.sums[key]
            self.latency.increment(time.time_ns() - began)
        return responses
"""
BUGS = {
    "state shared by every sequence": ('key = value("CORRID")  # KEY', "key = 0"),
    "no reset on START": ('if value("START"):  # RESET', "if key not in self.sums:"),
    "histogram per request": (
        "self.batch.observe(len(requests))  # OBSERVE",
        "[self.batch.observe(1) for _ in requests]",
    ),
    "a tag of any type": ("if not isinstance(tag, str):  # TAG", "if False:"),
}


@pytest.fixture(scope="module")
def sequence_project(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("seq") / "p"
    result = run_tbgen(
        "new",
        str(project),
        "-t",
        "python-backend",
        "--no-input",
        "--triton-version",
        "24.10",
        "--set",
        "sequence=oldest",
        "--set",
        "custom_metrics=yes",
        "--set",
        "request_parameters=yes",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'parameters = { tag = "untagged" }' in (project / "tbgen.toml").read_text()
    return project


def with_model(project: Path, source: str) -> None:
    (project / "model_repository" / "accumulate" / "1" / "model.py").write_text(source)


def test_a_correct_sequence_model_passes_every_check_and_the_fuzzer(sequence_project, server_or_skip):
    with_model(sequence_project, MODEL)
    result = run_tbgen("test", str(sequence_project), "--fuzz", "150")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    checks = check_results(result.stdout)
    for name in (
        "sequence [http]",
        "sequence [grpc]",
        "8 interleaved sequences [grpc]",
        "sequence restarted [grpc]",
        "request for an unknown sequence [http]",
        "idle sequence timed out [grpc]",
        "custom metrics [metrics]",
        "request parameters [http]",
        "request parameters [grpc]",
    ):
        assert checks.get(name) == "pass", (name, checks)
    assert "as the statistics say" in result.stdout
    assert "150 requests" in result.stdout and " 0 failed" in result.stdout


@pytest.mark.parametrize(
    ("bug", "caught_by"),
    [
        ("state shared by every sequence", "8 interleaved sequences [grpc]"),
        ("no reset on START", "sequence restarted [grpc]"),
        ("histogram per request", "custom metrics [metrics]"),
        ("a tag of any type", "request parameters [grpc]"),
    ],
)
def test_a_model_that_gets_state_or_metrics_wrong_fails_the_check_that_catches_it(
    sequence_project, server_or_skip, bug, caught_by
):
    wrong, right = BUGS[bug]
    assert wrong in MODEL
    with_model(sequence_project, MODEL.replace(wrong, right))
    result = run_tbgen("test", str(sequence_project))
    assert result.returncode == 1, result.stdout[-4000:]
    checks = check_results(result.stdout)
    assert checks.get(caught_by) == "FAIL", (caught_by, checks)
    if bug in ("histogram per request", "a tag of any type"):
        family = caught_by.split(" [")[0]  # the check over every protocol
        assert all(state == "pass" for name, state in checks.items() if not name.startswith(family)), checks
    if bug == "histogram per request":
        assert "the server's statistics say" in " ".join(result.stdout.split())


def test_infer_sends_a_one_request_sequence_with_request_parameters(sequence_project, server_or_skip):
    with_model(sequence_project, MODEL)
    values = ",".join(str(v) for v in range(16))
    result = run_tbgen(
        "infer",
        "accumulate",
        "--project",
        str(sequence_project),
        "-i",
        f"INPUT=[[{values}]]",
        "--param",
        "scale=3",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "OUTPUT float32 [1, 16]" in out and "[[ 0. 3. 6. 9. 12." in out, out
    refused = run_tbgen("infer", "accumulate", "--project", str(sequence_project), "--sequence-id", "x1")
    assert refused.returncode == 2 and "correlation IDs are unsigned integers" in refused.stderr
