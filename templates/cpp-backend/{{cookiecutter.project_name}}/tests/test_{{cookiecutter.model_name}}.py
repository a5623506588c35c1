"""Smoke tests of model "{{ cookiecutter.model_name }}" against a running server (see conftest.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import MODEL_NAME
import reference

OUTPUTS = (reference.OUTPUT0, reference.OUTPUT1)
BATCH_SIZES = [1, reference.MAX_BATCH_SIZE] if reference.MAX_BATCH_SIZE > 0 else [None]


def infer(client, module, inputs, outputs=OUTPUTS):
    tensors = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), reference.TRITON_DTYPE)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    requested = [module.InferRequestedOutput(name) for name in outputs]
    result = client.infer(MODEL_NAME, tensors, outputs=requested)
    return {name: result.as_numpy(name) for name in outputs}


def assert_matches_reference(got, inputs, outputs=OUTPUTS):
    expected = reference.compute(inputs)
    for name in outputs:
        assert got[name].dtype == expected[name].dtype, name
        assert got[name].shape == expected[name].shape, name
        np.testing.assert_allclose(got[name], expected[name], **reference.TOLERANCE, err_msg=name)


def test_metadata_matches_reference(http_client):
    metadata = http_client.get_model_metadata(MODEL_NAME)
    tensors = {t["name"]: t["datatype"] for t in metadata["inputs"] + metadata["outputs"]}
    assert tensors == {name: reference.TRITON_DTYPE for name in (reference.INPUT0, reference.INPUT1, *OUTPUTS)}


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_http_infer(http_client, batch_size):
    inputs = reference.make_inputs(batch_size, seed=1)
    assert_matches_reference(infer(http_client, httpclient, inputs), inputs)


@pytest.mark.parametrize("batch_size", BATCH_SIZES)
def test_grpc_infer(grpc_client, batch_size):
    inputs = reference.make_inputs(batch_size, seed=2)
    assert_matches_reference(infer(grpc_client, grpcclient, inputs), inputs)


def test_one_requested_output(grpc_client):
    inputs = reference.make_inputs(BATCH_SIZES[0], seed=3)
    got = infer(grpc_client, grpcclient, inputs, outputs=(reference.OUTPUT1,))
    assert_matches_reference(got, inputs, outputs=(reference.OUTPUT1,))


def test_concurrent_requests_each_get_their_own_result(grpc_client):
    # Concurrent requests are what the dynamic batcher combines into one execution.
    requests = [reference.make_inputs(BATCH_SIZES[0], seed=100 + i) for i in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda inputs: infer(grpc_client, grpcclient, inputs), requests))
    for inputs, got in zip(requests, results):
        assert_matches_reference(got, inputs)


def test_inputs_of_different_shapes_are_rejected(http_client):
    inputs = reference.make_inputs(BATCH_SIZES[0], seed=4)
    longer = np.concatenate([inputs[reference.INPUT1]] * 2, axis=-1)
    with pytest.raises(InferenceServerException):
        infer(http_client, httpclient, {reference.INPUT0: inputs[reference.INPUT0], reference.INPUT1: longer})
