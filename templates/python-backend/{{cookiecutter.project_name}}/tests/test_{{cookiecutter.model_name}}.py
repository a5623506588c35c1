{%- import "signature.j2" as sig with context -%}
{%- if sig.accumulator -%}
{% include "test_sequence.py.j2" %}
{%- else -%}
"""Tests of model "{{ cookiecutter.model_name }}" on a running server: outputs against reference.py, batches, bad requests.

The tensors, batching and expected outputs all come from reference.py (INPUTS, OUTPUTS, MAX_BATCH_SIZE,
make_inputs, compute, TOLERANCE): change the model and reference.py together and these tests follow.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tritonclient.http", reason="the tests need tritonclient: pip install 'tritonclient[all]'")
import tritonclient.http  # noqa: E402
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype  # noqa: E402

MODEL_NAME = "{{ cookiecutter.model_name }}"
MAX_BATCH_SIZE = {{ cookiecutter.max_batch_size|int }}


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


def infer(client_module, client, reference, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Send one request; return all its outputs."""
    requested = [client_module.InferRequestedOutput(name) for name in reference.OUTPUTS]
    result = client.infer(MODEL_NAME, to_infer_inputs(client_module, inputs), outputs=requested)
    return {name: output_array(result, name) for name in reference.OUTPUTS}


{% include "output_array.py.j2" %}


def assert_matches_reference(reference, inputs, outputs):
    """Every output has the dtype and shape of reference.compute's; BYTES, BOOL and integers are equal,
    floating-point values within reference.TOLERANCE."""
    expected = reference.compute(inputs)
    for name in reference.OUTPUTS:
        actual, wanted = np.asarray(outputs[name]), np.asarray(expected[name])
        assert actual.dtype == wanted.dtype, f"{name}: dtype {actual.dtype}, expected {wanted.dtype}"
        assert actual.shape == wanted.shape, f"{name}: shape {actual.shape}, expected {wanted.shape}"
        if np.issubdtype(wanted.dtype, np.floating):
            np.testing.assert_allclose(actual, wanted, **reference.TOLERANCE, err_msg=name)
        else:  # BYTES (object arrays of bytes), BOOL and integers: exactly
            assert actual.tolist() == wanted.tolist(), name


def config_type(datatype: str) -> str:
    """config.pbtxt's name of a datatype: TYPE_FP32, TYPE_STRING for BYTES."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def test_served_config_matches_reference(triton, reference):
    _, client = triton
    config = client.get_model_config(MODEL_NAME)
    if not isinstance(config, dict):  # gRPC answers a protobuf message
        from google.protobuf.json_format import MessageToDict

        config = MessageToDict(config.config, preserving_proto_field_name=True)
    assert int(config.get("max_batch_size", 0)) == reference.MAX_BATCH_SIZE == MAX_BATCH_SIZE
    inputs = {t["name"]: t for t in config["input"]}
    outputs = {t["name"]: t for t in config["output"]}
    assert list(inputs) == list(reference.INPUTS)
    assert list(outputs) == list(reference.OUTPUTS)
    for name, (datatype, dims, optional) in reference.INPUTS.items():
        assert inputs[name]["data_type"] == config_type(datatype), name
        assert [int(d) for d in inputs[name]["dims"]] == list(dims), name
        assert bool(inputs[name].get("optional", False)) == optional, name
    for name, (datatype, dims) in reference.OUTPUTS.items():
        assert outputs[name]["data_type"] == config_type(datatype), name
        assert [int(d) for d in outputs[name]["dims"]] == list(dims), name


@pytest.mark.parametrize("size", range(1, max(MAX_BATCH_SIZE, 1) + 1))
def test_request_matches_reference(triton, reference, size):
    inputs = reference.make_inputs(batch(size), seed=size)
    assert_matches_reference(reference, inputs, infer(*triton, reference, inputs))


def test_concurrent_requests_each_get_their_own_outputs(http_pool, reference):
    """Requests in flight together (that dynamic batching may merge) each get their own outputs."""
    sent = []
    for seed in range(32):
        inputs = reference.make_inputs(batch(1 + seed % 3), seed=seed)
        sent.append((inputs, http_pool.async_infer(MODEL_NAME, to_infer_inputs(tritonclient.http, inputs))))
    for inputs, pending in sent:
        result = pending.get_result()
        assert_matches_reference(reference, inputs, {name: output_array(result, name) for name in reference.OUTPUTS})


def bad_requests(reference):
    """(what is wrong, inputs) pairs the server must answer with an error."""
    good = reference.make_inputs(batch(1))
    required = next(name for name, (_, _, optional) in reference.INPUTS.items() if not optional)
    array = good[required]
    if array.dtype == np.object_ or np.issubdtype(array.dtype, np.floating):
        wrong = np.zeros(array.shape, dtype=np.int32)
    else:
        wrong = array.astype(np.float64)
    cases = [
        ("wrong data type", {**good, required: wrong}),
        ("missing input", {name: value for name, value in good.items() if name != required}),
        ("unknown input", {**good, "NOT_AN_INPUT": np.zeros(array.shape, dtype=np.float32)}),
    ]
    if hasattr(reference, "INPUT0"):  # the add/sub example: its inputs must have the same shape
        in0, in1 = good[reference.INPUT0], good[reference.INPUT1]
        cases.append(("shape mismatch", {reference.INPUT0: in0, reference.INPUT1: np.concatenate([in1, in1], axis=-1)}))
    return cases


def test_bad_requests_get_errors_and_the_server_keeps_serving(triton, reference):
    client_module, client = triton
    for problem, inputs in bad_requests(reference):
        with pytest.raises(InferenceServerException):
            infer(client_module, client, reference, inputs)
            pytest.fail(f"a request with a {problem} was answered without error")
    assert client.is_server_live()
    inputs = reference.make_inputs(batch(1))
    assert_matches_reference(reference, inputs, infer(client_module, client, reference, inputs))
{%- endif %}
