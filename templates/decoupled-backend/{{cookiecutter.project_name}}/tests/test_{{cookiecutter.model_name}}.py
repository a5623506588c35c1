{%- import "signature.j2" as sig with context -%}
{%- if sig.accumulator -%}
{% include "test_sequence.py.j2" %}
{%- else -%}
"""Streaming tests of {{ cookiecutter.model_name }} over gRPC, compared with reference.py.

A decoupled model answers only on a gRPC stream. ``enable_empty_final_response=True`` makes the server
forward the final flag also when it comes alone (an empty response), so that the client knows when a
request's stream has ended.
"""

from __future__ import annotations

import queue
import threading
{%- if sig.add_sub %}
import time
{%- endif %}

import numpy as np
import pytest
import reference
from conftest import MODEL_NAME
{%- if sig.add_sub %}
from tritonclient.utils import np_to_triton_dtype
{%- endif %}

TIMEOUT_S = 30
# The batch size of a request: none when the model does not batch.
BATCH = 1 if getattr(reference, "MAX_BATCH_SIZE", 0) > 0 else None


class Stream:
    """One gRPC stream: send requests with ids, collect each request's responses up to its final flag."""

    def __init__(self, grpcclient, client):
        self._grpcclient = grpcclient
        self._client = client
        self._results: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: self._results.put((result, error)))

    def send(self, inputs: dict[str, np.ndarray], request_id: str = "") -> None:
        tensors = []
        for name, array in inputs.items():
{%- if sig.add_sub %}
            tensor = self._grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
{%- else %}
            # Each with the datatype config.pbtxt declares (tritonclient sends float32 arrays as BF16).
            tensor = self._grpcclient.InferInput(name, list(array.shape), reference.INPUTS[name][0])
{%- endif %}
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        self._client.async_stream_infer(
            MODEL_NAME, tensors, request_id=request_id, enable_empty_final_response=True
        )

    def next(self):
        """The next (result, error) from the server."""
        return self._results.get(timeout=TIMEOUT_S)

    def collect(self, request_ids: list[str]) -> dict[str, list]:
        """Every result of each request, in arrival order, up to and including its final response."""
        results: dict[str, list] = {request_id: [] for request_id in request_ids}
        open_ids = set(request_ids)
        while open_ids:
            result, error = self.next()
            if error is not None:
                raise error
            response = result.get_response()
            results[response.id].append(result)
            if response.parameters["triton_final_response"].bool_param:
                open_ids.discard(response.id)
        return results

    def close(self, cancel: bool = False) -> None:
        self._client.stop_stream(cancel_requests=cancel)


def is_final(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def check_stream(results: list, inputs: dict[str, np.ndarray]) -> None:
    """The responses of one request equal reference.responses(), in order, and only the last is flagged final:
    {{ 'here an empty response after the data' if sig.add_sub else 'here the last data response carries it' }}."""
    expected = reference.responses(inputs)
    *earlier, last = results
    assert all(not is_final(result) for result in earlier), "a response is flagged final before the stream ended"
    assert is_final(last), "the last response is not flagged final"
    data = [result for result in results if result.get_response().outputs]
    assert len(data) == len(expected), f"expected {len(expected)} data responses, got {len(data)}"
    for index, (result, want) in enumerate(zip(data, expected)):
        for name, array in want.items():
            got = result.as_numpy(name)
            assert got is not None, f"response {index} lacks output {name}"
            assert got.shape == array.shape, (name, got.shape)
            if array.dtype == np.object_:  # BYTES: compared exactly, as bytes
                assert [bytes(v) for v in got.flat] == [bytes(v) for v in array.flat], f"response {index}, {name}"
            else:
                assert got.dtype == array.dtype, (name, got.dtype)
                np.testing.assert_allclose(got, array, **reference.TOLERANCE, err_msg=f"response {index}, {name}")
{%- if sig.add_sub %}
    assert not last.get_response().outputs, "the final response is not empty"
{%- else %}
    assert last in data, "the final flag came alone: it rides on the last data response"
{%- endif %}


@pytest.fixture
def stream(grpcclient, client):
    opened = Stream(grpcclient, client)
    yield opened
    opened.close()
{% if sig.add_sub %}

def test_model_is_decoupled_without_batching(client):
    config = client.get_model_config(MODEL_NAME).config
    assert config.model_transaction_policy.decoupled
    assert config.max_batch_size == 0
    assert {tensor.name for tensor in config.input} == {"IN", "DELAY", "WAIT"}
    assert {tensor.name for tensor in config.output} == {"OUT", "IDX"}
{%- else %}


def test_model_is_decoupled_with_the_reference_tensors(client):
    config = client.get_model_config(MODEL_NAME).config
    assert config.model_transaction_policy.decoupled
    assert config.max_batch_size == reference.MAX_BATCH_SIZE
    assert {tensor.name for tensor in config.input} == set(reference.INPUTS)
    assert {tensor.name for tensor in config.output} == set(reference.OUTPUTS)
{%- endif %}


@pytest.mark.parametrize("seed", [0, 1])
def test_stream_matches_reference(stream, seed):
    inputs = reference.make_inputs(BATCH, seed=seed)
    stream.send(inputs, request_id="r0")
    check_stream(stream.collect(["r0"])["r0"], inputs)




@pytest.mark.skipif(
    getattr(reference, "no_response_inputs", lambda batch: None)(BATCH) is None,
    reason="reference.py makes no request that streams no response",
)
def test_a_request_without_responses_gets_the_final_flag_alone(stream):
    inputs = reference.no_response_inputs(BATCH)
    assert reference.responses(inputs) == []
    stream.send(inputs, request_id="empty")
    (result,) = stream.collect(["empty"])["empty"]
    assert is_final(result) and not result.get_response().outputs


def test_requests_on_one_stream_are_answered_separately(stream):
    requests = {f"r{seed}": reference.make_inputs(BATCH, seed=seed) for seed in range(4)}
    for request_id, inputs in requests.items():
        stream.send(inputs, request_id=request_id)
    results = stream.collect(list(requests))
    for request_id, inputs in requests.items():
        check_stream(results[request_id], inputs)


def test_concurrent_streams(grpcclient, server_url):
    """Several clients stream at once; a slow stream does not hold the others back."""
    failures = []

    def run(seed: int) -> None:
        try:
            with grpcclient.InferenceServerClient(server_url) as client:
                opened = Stream(grpcclient, client)
                try:
                    inputs = reference.make_inputs(BATCH, seed=seed)
                    opened.send(inputs, request_id=f"c{seed}")
                    check_stream(opened.collect([f"c{seed}"])[f"c{seed}"], inputs)
                finally:
                    opened.close()
        except Exception as err:  # noqa: BLE001 - reported by the test below
            failures.append(f"stream {seed}: {err!r}")

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert not failures, failures


{%- if sig.add_sub %}


def test_delay_of_the_wrong_length_is_an_error(stream, client):
    inputs = {
        "IN": np.arange(3, dtype=np.int32),
        "DELAY": np.zeros(2, dtype=np.uint32),
        "WAIT": np.zeros(1, dtype=np.uint32),
    }
    stream.send(inputs, request_id="bad")
    result, error = stream.next()
    assert result is None and error is not None, "a DELAY shorter than IN must be refused"
    assert "DELAY" in str(error)
    assert client.is_server_live() and client.is_model_ready(MODEL_NAME)


def test_cancel_mid_stream_leaves_the_server_healthy(grpcclient, client, server_url):
    length = 50
    inputs = {
        "IN": np.arange(length, dtype=np.int32),
        "DELAY": np.full(length, 20, dtype=np.uint32),
        "WAIT": np.zeros(1, dtype=np.uint32),
    }
    cancelled = Stream(grpcclient, client)
    cancelled.send(inputs, request_id="long")
    first, error = cancelled.next()
    assert error is None and first.as_numpy("IDX")[0] == 0
    cancelled.close(cancel=True)

    # The model keeps serving: a new stream gets its full answer.
    time.sleep(0.1)
    assert client.is_server_live() and client.is_model_ready(MODEL_NAME)
    with grpcclient.InferenceServerClient(server_url) as other:
        fresh = Stream(grpcclient, other)
        try:
            inputs = reference.make_inputs(BATCH, seed=3)
            fresh.send(inputs, request_id="after")
            check_stream(fresh.collect(["after"])["after"], inputs)
        finally:
            fresh.close()
{%- else %}


def test_a_missing_required_input_is_refused(stream, client):
    required = next(name for name, (_, _, optional) in reference.INPUTS.items() if not optional)
    inputs = reference.make_inputs(BATCH, seed=6)
    del inputs[required]
    stream.send(inputs, request_id="bad")
    result, error = stream.next()
    assert result is None and error is not None, f"a request without {required} must be refused"
    assert client.is_server_live() and client.is_model_ready(MODEL_NAME)
{%- endif %}
{%- endif %}
