{%- set mbs = cookiecutter.max_batch_size|int -%}
"""Tests of model "{{ cookiecutter.model_name }}" on a running server: outputs against reference.py, batches, bad requests."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tritonclient.http", reason="the tests need tritonclient: pip install 'tritonclient[all]'")
import tritonclient.http  # noqa: E402
from tritonclient.utils import InferenceServerException, np_to_triton_dtype  # noqa: E402

MODEL_NAME = "{{ cookiecutter.model_name }}"
OUTPUTS = ("{{ cookiecutter.output0_name }}", "{{ cookiecutter.output1_name }}")
MAX_BATCH_SIZE = {{ mbs }}


def batch(size: int) -> int | None:
    """The batch size of a request of ``size`` rows; None when the model does not batch."""
    return min(size, MAX_BATCH_SIZE) if MAX_BATCH_SIZE > 0 else None


def to_infer_inputs(client_module, inputs: dict[str, np.ndarray]) -> list:
    tensors = []
    for name, array in inputs.items():
        tensor = client_module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def infer(client_module, client, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Send one request; return its outputs."""
    requested = [client_module.InferRequestedOutput(name) for name in OUTPUTS]
    result = client.infer(MODEL_NAME, to_infer_inputs(client_module, inputs), outputs=requested)
    return {name: result.as_numpy(name) for name in OUTPUTS}


def assert_matches_reference(reference, inputs, outputs):
    expected = reference.compute(inputs)
    for name in OUTPUTS:
        assert outputs[name].dtype == expected[name].dtype, name
        assert outputs[name].shape == expected[name].shape, name
        np.testing.assert_allclose(outputs[name], expected[name], **reference.TOLERANCE, err_msg=name)


def test_served_config_matches_reference(triton, reference):
    _, client = triton
    config = client.get_model_config(MODEL_NAME)
    if not isinstance(config, dict):  # gRPC answers a protobuf message
        from google.protobuf.json_format import MessageToDict

        config = MessageToDict(config.config, preserving_proto_field_name=True)
    assert int(config.get("max_batch_size", 0)) == reference.MAX_BATCH_SIZE == MAX_BATCH_SIZE
    assert [tensor["name"] for tensor in config["input"]] == [reference.INPUT0, reference.INPUT1]
    assert [tensor["name"] for tensor in config["output"]] == list(OUTPUTS)


@pytest.mark.parametrize("size", range(1, max(MAX_BATCH_SIZE, 1) + 1))
def test_request_matches_reference(triton, reference, size):
    inputs = reference.make_inputs(batch(size), seed=size)
    assert_matches_reference(reference, inputs, infer(*triton, inputs))


def test_concurrent_requests_each_get_their_own_outputs(http_pool, reference):
    """Requests in flight together (that dynamic batching may merge) each get their own outputs."""
    sent = []
    for seed in range(32):
        inputs = reference.make_inputs(batch(1 + seed % 3), seed=seed)
        sent.append((inputs, http_pool.async_infer(MODEL_NAME, to_infer_inputs(tritonclient.http, inputs))))
    for inputs, pending in sent:
        result = pending.get_result()
        assert_matches_reference(reference, inputs, {name: result.as_numpy(name) for name in OUTPUTS})


def bad_requests(reference):
    """(what is wrong, inputs) pairs the server must answer with an error."""
    good = reference.make_inputs(batch(1))
    in0, in1 = good[reference.INPUT0], good[reference.INPUT1]
    wrong_dtype = np.float64 if np.issubdtype(reference.DTYPE, np.integer) else np.int32
    return [
        ("wrong data type", {reference.INPUT0: in0, reference.INPUT1: in1.astype(wrong_dtype)}),
        ("missing input", {reference.INPUT0: in0}),
        ("shape mismatch", {reference.INPUT0: in0, reference.INPUT1: np.concatenate([in1, in1], axis=-1)}),
    ]


def test_bad_requests_get_errors_and_the_server_keeps_serving(triton, reference):
    client_module, client = triton
    for problem, inputs in bad_requests(reference):
        with pytest.raises(InferenceServerException):
            infer(client_module, client, inputs)
            pytest.fail(f"a request with a {problem} was answered without error")
    assert client.is_server_live()
    inputs = reference.make_inputs(batch(1))
    assert_matches_reference(reference, inputs, infer(client_module, client, inputs))
