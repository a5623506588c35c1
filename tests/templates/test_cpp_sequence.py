"""cpp-backend with sequence=direct|oldest: a stateful C++ accumulator under Triton's sequence batcher (state
by batch slot, by correlation ID, or Triton's implicit state), and custom_metrics=yes: a request latency
counter and a batch size histogram published on Triton's metrics endpoint.

The built tests serve each variant in the embedded tritonserver and check it with tritonclient: interleaved
sequences answered as reference.compute_sequence computes, START restarting a correlation ID from zero, a
sequence idle past max_sequence_idle_microseconds ended, and the custom metrics against Triton's own
statistics.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
from conftest import fuzz_passes, grpc_infer, interleaved_sequences, run_tbgen, triton_sources_or_skip

from triton_backend_gen.errors import AnswerError, ScaffoldError
from triton_backend_gen.scaffold import get_template, resolve_answers
from triton_backend_gen.scaffold.render import render_into

IDLE_TIMEOUT_S = 5.0  # sequence.pbtxt.j2's max_sequence_idle_microseconds


def render(directory: Path, **given) -> str:
    """src/<backend>.cc of the cpp-backend template rendered with ``given``."""
    template = get_template("cpp-backend")
    answers = resolve_answers(template, {"project_name": "seq", "triton_version": "24.10", **given})
    return (render_into(template, answers, directory) / "src" / "seq.cc").read_text()


# --------------------------------------------------------------------------- rendering


def test_custom_metrics_with_bls_is_refused(tmp_path, capfd):
    template = get_template("cpp-backend")
    given = {"project_name": "p", "pattern": "bls", "custom_metrics": True, "triton_version": "24.10"}
    with pytest.raises(AnswerError, match="custom_metrics"):
        resolve_answers(template, given)
    # Plain cookiecutter skips tbgen's answers: the template's own hook refuses it.
    answers = {**resolve_answers(template, {**given, "custom_metrics": False}), "custom_metrics": True}
    with pytest.raises(ScaffoldError, match="failed to render"):
        render_into(template, answers, tmp_path)
    assert "custom_metrics" in capfd.readouterr().err


# --------------------------------------------------------------------------- built and served

VARIANTS = {
    # direct: state by batch slot; uint64 correlation IDs; custom metrics
    "direct-fp32-metrics": ["sequence=direct", "custom_metrics=yes"],
    # oldest: Triton's implicit state, string correlation IDs, INT32 sums that wrap
    "oldest-int32-string-implicit": [
        "sequence=oldest",
        "correlation_id=string",
        "implicit_state=yes",
        "dtype=INT32",
        "dims=4",
        "custom_metrics=yes",
    ],
    # oldest: state by correlation ID in the backend; FP16 rounded after each request
    "oldest-fp16-uint64": ["sequence=oldest", "dtype=FP16", "dims=3,2"],
}
FUZZED = "oldest-int32-string-implicit"  # `tbgen test --fuzz 300` too


def new_built(tmp_path: Path, *sets: str) -> Path:
    """`tbgen new` (release 24.10) and `tbgen build`, asserted warning-free under -Werror."""
    project = tmp_path / "seqproj"
    args = ["new", str(project), "-t", "cpp-backend", "--no-input", "--triton-version", "24.10"]
    for item in sets:
        args += ["--set", item]
    created = run_tbgen(*args)
    assert created.returncode == 0, created.stdout + created.stderr
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    log = (project / "build" / "tbgen-build.log").read_text()
    assert not [line for line in log.splitlines() if str(project / "src") in line and "warning" in line]
    return project


class Sequences:
    """Requests of sequences to a served sequence model, checked against the project's reference."""

    def __init__(self, url: str, model: str, reference):
        self.url, self.model, self.reference = url, model, reference
        self.batch = 1 if reference.MAX_BATCH_SIZE > 0 else None
        self.string_ids = reference.SEQUENCE["correlation_id"] == "string"

    def correlation_id(self, n: int):
        return f"sequence-{n}" if self.string_ids else 1000 + n

    def send(self, client, sequence_id, inputs: dict, *, start=False, end=False) -> dict:
        return grpc_infer(
            client,
            self.model,
            self.reference,
            inputs,
            sequence_id=sequence_id,
            sequence_start=start,
            sequence_end=end,
        )

    def check(self, outputs: dict, history: list[dict]) -> None:
        from triton_backend_gen.smoke.compare import output_mismatches

        expected = self.reference.compute_sequence(history)[-1]
        mismatches = output_mismatches(outputs, expected, self.reference.TOLERANCE)
        assert not mismatches, (len(history), mismatches)

    def run(self, client, sequence_id, length: int, seed: int, *, end=True) -> list[dict]:
        """A sequence of ``length`` requests, each checked; its inputs."""
        history = []
        for step in range(length):
            inputs = self.reference.make_inputs(self.batch, seed=seed * 100 + step)
            history.append(inputs)
            outputs = self.send(client, sequence_id, inputs, start=step == 0, end=end and step == length - 1)
            self.check(outputs, history)
        return history


def interleaved(sequences: Sequences, url: str, count: int = 8, length: int = 6) -> None:
    """``count`` sequences from as many clients, released together so that their requests interleave
    (conftest.interleaved_sequences)."""
    import tritonclient.grpc as grpcclient

    with ExitStack() as stack:
        clients = [stack.enter_context(grpcclient.InferenceServerClient(url)) for _ in range(count)]

        def send(n: int, inputs: dict, start: bool, end: bool) -> dict:
            return sequences.send(clients[n], sequences.correlation_id(n), inputs, start=start, end=end)

        interleaved_sequences(sequences.reference, [length] * count, send)


def http_json(url: str) -> dict:
    with urllib.request.urlopen(f"http://{url}", timeout=10) as response:
        return json.loads(response.read())


def metric_value(text: str, name: str, model: str) -> float | None:
    """The sample ``name`` labelled with ``model`` and version 1 in Prometheus text, or None."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{([^}}]*)\}} (\S+)", line.strip())
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            if labels.get("model") == model and labels.get("version") == "1":
                return float(match.group(2))
    return None


def check_metrics(triton, model: str) -> None:
    """Both families with the model/version labels; the histogram matches Triton's statistics."""
    with urllib.request.urlopen(f"http://{triton.metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert "# HELP requests_process_latency_ns Cumulative time spent processing requests" in text
    assert "# HELP execution_batch_size Requests per execution" in text
    latency = metric_value(text, "requests_process_latency_ns", model)
    assert latency is not None and latency > 0, text[-3000:]
    stats = http_json(f"{triton.http_url}/v2/models/{model}/stats")["model_stats"][0]
    count = metric_value(text, "execution_batch_size_count", model)
    total = metric_value(text, "execution_batch_size_sum", model)
    assert count == int(stats["execution_count"]) and count > 0, (count, stats)
    assert total == int(stats["inference_count"]), (total, stats)
    buckets = [
        line
        for line in text.splitlines()
        if line.startswith("execution_batch_size_bucket{") and f'model="{model}"' in line
    ]
    assert sorted(re.search(r'le="([^"]+)"', b).group(1) for b in buckets) == sorted(
        ["1", "2", "4", "8", "16", "32", "64", "128", "+Inf"]
    )


@pytest.mark.cpp
@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_sequence_model_keeps_state_per_sequence(tmp_path, compiler_cache, server_or_skip, variant):
    """Built with -Werror, passes `tbgen test`, and served: 8 interleaved sequences each answered as the
    reference computes, START restarting a correlation ID from zero, an idle sequence ended by Triton, and the
    custom metrics agreeing with Triton's statistics."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke import load_reference

    triton_sources_or_skip("r24.10")
    project = new_built(tmp_path, *VARIANTS[variant])
    result = run_tbgen("test", str(project))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " 0 failed" in result.stdout and "8 interleaved sequences" in result.stdout, result.stdout[-4000:]
    if variant == FUZZED:
        fuzz_passes(project)  # bad control combinations among them
    reference = load_reference(project)
    model = load_project(project).models[0].name
    metrics = "custom_metrics=yes" in VARIANTS[variant]
    with prepare_server(load_project(project)) as triton:
        sequences = Sequences(triton.grpc_url, model, reference)
        with grpcclient.InferenceServerClient(triton.grpc_url) as client:
            # A sequence left idle: after the timeout Triton has ended it, so a request without START fails.
            idle_id = sequences.correlation_id(99)
            sequences.run(client, idle_id, 2, seed=99, end=False)
            idle_since = time.monotonic()

            interleaved(sequences, triton.grpc_url)

            # A correlation ID that starts again (after its END, or in the middle) starts from zero.
            restarted = sequences.correlation_id(3)
            sequences.run(client, restarted, 2, seed=50, end=False)
            sequences.run(client, restarted, 3, seed=51)
            sequences.run(client, restarted, 2, seed=52)

            time.sleep(max(0.0, IDLE_TIMEOUT_S + 1.5 - (time.monotonic() - idle_since)))
            with pytest.raises(InferenceServerException, match="START"):
                sequences.send(client, idle_id, reference.make_inputs(sequences.batch, seed=7))
            # ... and it can start again, from zero.
            sequences.run(client, idle_id, 2, seed=98)
            assert client.is_server_live() and client.is_model_ready(model)
        if metrics:
            check_metrics(triton, model)


@pytest.mark.cpp
@pytest.mark.slow
def test_custom_metrics_of_a_stateless_model(tmp_path, compiler_cache, server_or_skip):
    """custom_metrics on the add/sub example with dynamic batching: batches of several rows, and the histogram
    still agrees with Triton's statistics (rows, not requests, as inference_count counts)."""
    import tritonclient.grpc as grpcclient

    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke import load_reference

    triton_sources_or_skip("r24.10")
    project = new_built(tmp_path, "custom_metrics=yes", "dtype=INT32", "dims=4")
    reference = load_reference(project)
    model = load_project(project).models[0].name
    failures: list[BaseException] = []
    with prepare_server(load_project(project)) as triton:

        def infer(batch: int, seed: int) -> None:
            try:
                check_one(batch, seed)
            except BaseException as err:  # noqa: BLE001 - reported below
                failures.append(err)

        def check_one(batch: int, seed: int) -> None:
            with grpcclient.InferenceServerClient(triton.grpc_url) as client:
                inputs = reference.make_inputs(batch, seed=seed)
                got = grpc_infer(client, model, reference, inputs)
                for name, expected in reference.compute(inputs).items():
                    np.testing.assert_array_equal(got[name], expected)

        threads = [threading.Thread(target=infer, args=(1 + n % 3, n)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not failures, failures
        check_metrics(triton, model)
