"""Sequence (stateful) models and custom metrics of the python-backend template, in the embedded 2.51 server:
the direct strategy (uint64 correlation IDs) and the oldest one (string IDs) each serve 8 interleaved
sequences with every response equal to reference.compute_sequence(), restart a correlation ID from zero,
refuse a sequence that Triton ended for being idle, and publish custom metrics that agree with Triton's own
statistics; a stateless model's custom metrics agree too. Offline: the model.py of every combination
compiles."""

from __future__ import annotations

import json
import random
import re
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import new_project
from tritonclient.utils import InferenceServerException

from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import start_server
from triton_backend_gen.scaffold.layout import layout_problems
from triton_backend_gen.smoke import load_reference

MODEL = "accumulate"
SEQUENCES = 8
STEPS = 6
# The tests shorten config.pbtxt's max_sequence_idle_microseconds (5 s) to 1 s, and wait for Triton's reaper,
# which takes a moment more, to end an idle sequence.
IDLE_TIMEOUT_US = 1_000_000
IDLE_WAIT_S = 2.5


def new_sequence_project(tmp_path: Path, strategy: str, corrid: str, dtype: str, dims: str) -> Path:
    return new_project(
        tmp_path,
        "python-backend",
        f"sequence={strategy}",
        f"correlation_id={corrid}",
        f"dtype={dtype}",
        f"dims={dims}",
        "custom_metrics=yes",
        name=f"seq-{strategy}",
    )


def infer(
    client, reference, inputs: dict[str, np.ndarray], sequence_id, *, start=False, end=False
) -> np.ndarray:
    """One request of a sequence; its OUTPUT."""
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), reference.INPUTS[name][0])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = client.infer(MODEL, tensors, sequence_id=sequence_id, sequence_start=start, sequence_end=end)
    return {name: result.as_numpy(name) for name in reference.OUTPUTS}


def assert_step(reference, sent: list[dict], got: dict, context: str) -> None:
    expected = reference.compute_sequence(sent)[-1]
    for name, array in expected.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, (context, got[name], array)
        np.testing.assert_array_equal(
            got[name], array, err_msg=f"{context}: {name} after {len(sent)} requests"
        )


def run_interleaved(url: str, reference, ids: list) -> None:
    """SEQUENCES sequences from as many threads, in lock step (so that batches hold requests of several
    sequences) with random jitter, each response checked against the reference of its own inputs so far."""
    barrier = threading.Barrier(len(ids))
    failures: list[str] = []

    def run(index: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        jitter = random.Random(index)
        sent: list[dict] = []
        try:
            for position in range(STEPS):
                barrier.wait(timeout=60)
                time.sleep(jitter.uniform(0, 0.004))
                sent.append(reference.make_inputs(1, seed=1000 * index + position))
                got = infer(
                    client, reference, sent[-1], ids[index], start=position == 0, end=position == STEPS - 1
                )
                assert_step(reference, sent, got, f"sequence {ids[index]!r}")
        except Exception as err:  # noqa: BLE001 - reported below, with the other threads'
            failures.append(f"sequence {ids[index]!r}: {err!r}")
            barrier.abort()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(ids))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, "\n".join(failures)


def metric_samples(url: str, family: str, model: str) -> dict[str, float]:
    """The samples of metric ``family`` labelled with ``model`` on the metrics endpoint, by suffix ("",
    "_count", "_sum", "_bucket" + its le label); asserts their labels are the model's name and version."""
    text = urllib.request.urlopen(f"http://{url}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{family}(_count|_sum|_bucket)?\{{(.*)\}} (\S+)", line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if labels.get("model") != model:
            continue
        le = labels.pop("le", None)
        assert labels == {"model": model, "version": "1"}, line
        samples[(match.group(1) or "") + (f"{{le={le}}}" if le is not None else "")] = float(match.group(3))
    return samples


def assert_metrics_agree_with_statistics(triton, model: str) -> None:
    """The contract of custom_metrics: execution_batch_size's _count is the model's execution_count and its
    _sum the inference_count (Triton's statistics), and requests_process_latency_ns has counted time."""
    stats = json.load(urllib.request.urlopen(f"http://{triton.http_url}/v2/models/{model}/stats", timeout=10))
    model_stats = stats["model_stats"][0]
    histogram = metric_samples(triton.metrics_url, "execution_batch_size", model)
    latency = metric_samples(triton.metrics_url, "requests_process_latency_ns", model)
    assert int(model_stats["execution_count"]) > 0, model_stats
    assert histogram["_count"] == int(model_stats["execution_count"]), (histogram, model_stats)
    assert histogram["_sum"] == int(model_stats["inference_count"]), (histogram, model_stats)
    assert histogram["_bucket{le=128}"] == histogram["_bucket{le=+Inf}"] == histogram["_count"], histogram
    assert latency[""] > 0, latency


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "corrid", "dtype", "dims"),
    [
        ("direct", "uint64", "INT8", "2,3"),
        ("oldest", "string", "UINT8", "5"),
    ],
)
def test_sequences_keep_their_own_state_restart_and_expire(
    tmp_path, server_or_skip, strategy, corrid, dtype, dims
):
    project = new_sequence_project(tmp_path, strategy, corrid, dtype, dims)
    config = project / "model_repository" / MODEL / "config.pbtxt"
    text = config.read_text()
    assert "max_sequence_idle_microseconds: 5000000" in text
    config.write_text(text.replace("5000000", str(IDLE_TIMEOUT_US)))
    reference = load_reference(project)

    def sequence_id(index: int):
        return f"seq-{index}-{strategy}" if corrid == "string" else 1000 + index

    with start_server(load_project(project)) as triton:
        url = triton.grpc_url
        client = grpcclient.InferenceServerClient(url)
        # 8 concurrent sequences, interleaved; then the same correlation IDs again (started anew).
        ids = [sequence_id(index) for index in range(SEQUENCES)]
        run_interleaved(url, reference, ids)
        run_interleaved(url, reference, ids)

        # A correlation ID that starts again while its sequence is open starts from zero.
        restarted = sequence_id(100)
        sent = [reference.make_inputs(1, seed=7)]
        assert_step(reference, sent, infer(client, reference, sent[0], restarted, start=True), "first run")
        sent.append(reference.make_inputs(1, seed=8))
        assert_step(reference, sent, infer(client, reference, sent[1], restarted), "first run")
        sent = [reference.make_inputs(1, seed=9)]
        assert_step(reference, sent, infer(client, reference, sent[0], restarted, start=True), "restarted")
        sent.append(reference.make_inputs(1, seed=10))
        assert_step(reference, sent, infer(client, reference, sent[1], restarted, end=True), "restarted")

        # A sequence idle for longer than the idle timeout is ended: its next request needs START again.
        idle = sequence_id(200)
        sent = [reference.make_inputs(1, seed=11)]
        assert_step(reference, sent, infer(client, reference, sent[0], idle, start=True), "before idling")
        time.sleep(IDLE_WAIT_S)
        with pytest.raises(InferenceServerException, match="START"):
            infer(client, reference, reference.make_inputs(1, seed=12), idle)
        sent = [reference.make_inputs(1, seed=13)]
        assert_step(
            reference, sent, infer(client, reference, sent[0], idle, start=True, end=True), "after idling"
        )

        assert_metrics_agree_with_statistics(triton, MODEL)


@pytest.mark.slow
def test_custom_metrics_of_a_stateless_model_agree_with_statistics(tmp_path, server_or_skip):
    """The add/sub example with dynamic batching: requests of 1 to 4 rows from several threads."""
    project = new_project(tmp_path, "python-backend", "custom_metrics=yes", "dims=4", name="metrics")
    with start_server(load_project(project)) as triton:

        def run(index: int) -> None:
            client = grpcclient.InferenceServerClient(triton.grpc_url)
            for position in range(10):
                rows = 1 + (index + position) % 4
                a = np.full((rows, 4), index, np.float32)
                tensors = [grpcclient.InferInput(name, [rows, 4], "FP32") for name in ("INPUT0", "INPUT1")]
                for tensor in tensors:
                    tensor.set_data_from_numpy(a)
                result = client.infer("add_sub", tensors)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)

        threads = [threading.Thread(target=run, args=(index,)) for index in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert_metrics_agree_with_statistics(triton, "add_sub")


@pytest.mark.parametrize(
    "answers",
    [
        {"sequence": "direct", "max_batch_size": 0},
        {"sequence": "direct", "correlation_id": "string", "dtype": "FP16", "custom_metrics": True},
        {"sequence": "oldest", "dtype": "FP64", "batching": "vectorized"},
        {"sequence": "oldest", "correlation_id": "string", "custom_metrics": True, "max_batch_size": 1},
        {"custom_metrics": True, "batching": "vectorized"},
        {"custom_metrics": True, "max_batch_size": 0},
        {"custom_metrics": True, "native": True},
        {"custom_metrics": True, "python_based_backend": True},
    ],
)
def test_every_combination_renders_a_model_py_that_compiles(render_template, answers):
    project = render_template("python-backend", triton_version="24.10", **answers)
    models = list(project.glob("model_repository/*/1/model.py")) + list(project.glob("backends/*/model.py"))
    assert len(models) == 1
    source, yours = models[0].read_text(), (models[0].parent / "compute.py").read_text()
    compile(source, str(models[0]), "exec")
    compile(yours, "compute.py", "exec")
    assert layout_problems(project) == []
    assert ("MetricFamily" in source) == bool(answers.get("custom_metrics"))
    if "sequence" in answers:  # the user's step() in compute.py, the state kept by model.py
        assert "def step(" in yours and "def compute(" not in yours and "compute.step(" in source
        assert ("self.slots" in source) == (answers["sequence"] == "direct")
