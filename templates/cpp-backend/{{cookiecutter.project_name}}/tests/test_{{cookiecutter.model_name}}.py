{%- import "signature.j2" as sig with context -%}
{%- if sig.accumulator -%}
{% include "test_sequence.py.j2" %}
{%- else -%}
"""Smoke tests of model "{{ cookiecutter.model_name }}" against a running server (see conftest.py), compared with reference.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from conftest import MODEL_NAME
import reference

OUTPUTS = tuple(reference.OUTPUTS)
BATCH_SIZES = [1, reference.MAX_BATCH_SIZE] if reference.MAX_BATCH_SIZE > 0 else [None]
REQUIRED = [name for name, (_, _, optional) in reference.INPUTS.items() if not optional]


def infer(client, module, inputs, outputs=OUTPUTS):
    """Send ``inputs``, each with its datatype from reference.INPUTS; the requested outputs as numpy arrays."""
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), reference.INPUTS[name][0])
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = [module.InferRequestedOutput(name) for name in outputs]
    result = client.infer(MODEL_NAME, tensors, outputs=requested)
    return {name: output_array(result, name) for name in outputs}


{% include "output_array.py.j2" %}


def assert_matches_reference(got, inputs, outputs=OUTPUTS):
    expected = reference.compute(inputs)
    for name in outputs:
        want = expected[name]
        assert got[name] is not None, f"{name} is missing from the response"
        assert got[name].shape == want.shape, name
        if reference.OUTPUTS[name][0] == "BYTES":  # compared exactly, as bytes
            assert [bytes(v) for v in got[name].flat] == [bytes(v) for v in want.flat], name
        else:
            assert got[name].dtype == want.dtype, name
            np.testing.assert_allclose(got[name], want, **reference.TOLERANCE, err_msg=name)


def test_metadata_matches_reference(http_client):
    metadata = http_client.get_model_metadata(MODEL_NAME)
    assert {t["name"]: t["datatype"] for t in metadata["inputs"]} == {
        name: datatype for name, (datatype, _, _) in reference.INPUTS.items()}
    assert {t["name"]: t["datatype"] for t in metadata["outputs"]} == {
        name: datatype for name, (datatype, _) in reference.OUTPUTS.items()}


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("seed", [1, 2])
def test_http_infer(http_client, batch_size, seed):
    inputs = reference.make_inputs(batch_size, seed=seed)
    assert_matches_reference(infer(http_client, httpclient, inputs), inputs)


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
@pytest.mark.parametrize("seed", [3, 4])
def test_grpc_infer(grpc_client, batch_size, seed):
    inputs = reference.make_inputs(batch_size, seed=seed)
    assert_matches_reference(infer(grpc_client, grpcclient, inputs), inputs)


def test_one_requested_output(grpc_client):
    inputs = reference.make_inputs(BATCH_SIZES[0], seed=5)
    got = infer(grpc_client, grpcclient, inputs, outputs=OUTPUTS[-1:])
    assert_matches_reference(got, inputs, outputs=OUTPUTS[-1:])


def test_concurrent_requests_each_get_their_own_result(grpc_client):
    # Concurrent requests are what the dynamic batcher combines into one execution; their seeds vary the
    # -1 dims and which optional inputs are present, so some line up in a batch and some do not.
    requests = [reference.make_inputs(BATCH_SIZES[0], seed=100 + i) for i in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda inputs: infer(grpc_client, grpcclient, inputs), requests))
    for inputs, got in zip(requests, results):
        assert_matches_reference(got, inputs)


def test_a_missing_required_input_is_refused(http_client):
    inputs = reference.make_inputs(BATCH_SIZES[0], seed=6)
    del inputs[REQUIRED[0]]
    with pytest.raises(InferenceServerException):
        infer(http_client, httpclient, inputs)
    assert http_client.is_model_ready(MODEL_NAME)
{%- if sig.add_sub %}


def test_inputs_of_different_shapes_are_rejected(http_client):
    inputs = reference.make_inputs(BATCH_SIZES[0], seed=4)
    longer = np.concatenate([inputs[reference.INPUT1]] * 2, axis=-1)
    with pytest.raises(InferenceServerException):
        infer(http_client, httpclient, {reference.INPUT0: inputs[reference.INPUT0], reference.INPUT1: longer})
{%- endif %}
{%- endif %}
