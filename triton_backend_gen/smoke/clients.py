"""Talking to a running server with tritonclient: clients, inference requests, gRPC streams."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Self

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from triton_backend_gen.smoke.model import ModelSpec

REQUEST_TIMEOUT_S = 30.0  # one request or one stream of the smoke suite


@dataclass(frozen=True)
class Endpoints:
    http_url: str  # "127.0.0.1:8000"
    grpc_url: str  # "127.0.0.1:8001"


# ---- Clients --------------------------------------------------------------------------------------------


def _client_module(protocol: str) -> ModuleType:
    return httpclient if protocol == "http" else grpcclient


@contextlib.contextmanager
def open_client(protocol: str, endpoints: Endpoints) -> Iterator[Any]:
    module = _client_module(protocol)
    if protocol == "http":
        client = module.InferenceServerClient(
            endpoints.http_url, connection_timeout=REQUEST_TIMEOUT_S, network_timeout=REQUEST_TIMEOUT_S
        )
    else:
        client = module.InferenceServerClient(endpoints.grpc_url)
    try:
        yield client
    finally:
        client.close()


def timeout_kwargs(protocol: str) -> dict[str, float]:
    return {"client_timeout": REQUEST_TIMEOUT_S} if protocol == "grpc" else {}


def infer_inputs(protocol: str, inputs: dict[str, np.ndarray]) -> list:
    module = _client_module(protocol)
    tensors = []
    for name, array in inputs.items():
        array = np.asarray(array)
        tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        if protocol == "http":
            tensor.set_data_from_numpy(array, binary_data=True)
        else:
            tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def infer(protocol: str, client: Any, spec: ModelSpec, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    module = _client_module(protocol)
    outputs = [
        module.InferRequestedOutput(t.name, binary_data=True)
        if protocol == "http"
        else module.InferRequestedOutput(t.name)
        for t in spec.outputs
    ]
    result = client.infer(spec.name, infer_inputs(protocol, inputs), outputs=outputs, **timeout_kwargs(protocol))
    return {t.name: result.as_numpy(t.name) for t in spec.outputs}


def assert_healthy(client: Any, spec: ModelSpec, protocol: str, after: str) -> None:
    kwargs = timeout_kwargs(protocol)
    if not client.is_server_live(**kwargs):
        raise AssertionError(f"the server is not live after {after}")
    if not client.is_model_ready(spec.name, **kwargs):
        raise AssertionError(f"model '{spec.name}' is not ready after {after}")


def error_text(err: Exception) -> str:
    message = err.message() if hasattr(err, "message") and callable(err.message) else str(err)
    return " ".join(str(message).split())


# ---- gRPC streams ---------------------------------------------------------------------------------------


class Stream:
    """One gRPC stream: requests with ids, and each request's results up to its final flag."""

    def __init__(self, endpoints: Endpoints) -> None:
        self._grpcclient = grpcclient
        self._client = grpcclient.InferenceServerClient(endpoints.grpc_url)
        self._results: queue.Queue = queue.Queue()
        self._client.start_stream(callback=lambda result, error: self._results.put((result, error)))
        self._closed = False

    def send(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> None:
        self._client.async_stream_infer(
            model, infer_inputs("grpc", inputs), request_id=request_id, enable_empty_final_response=True
        )

    def next(self, timeout: float = REQUEST_TIMEOUT_S):
        """The next (result, error) on the stream."""
        try:
            return self._results.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no response on the stream within {timeout:.0f} s") from None

    def collect(self, request_ids: list[str]) -> dict[str, list]:
        """Every result of each request, in arrival order, up to and including its final one."""
        results: dict[str, list] = {request_id: [] for request_id in request_ids}
        open_ids = set(request_ids)
        while open_ids:
            result, error = self.next()
            if error is not None:
                raise AssertionError(f"the stream returned an error: {error_text(error)}")
            response = result.get_response()
            if response.id not in results:
                raise AssertionError(f"a response for unknown request id {response.id!r}")
            results[response.id].append(result)
            if is_final(result):
                open_ids.discard(response.id)
        return results

    def close(self, cancel: bool = False) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._client.stop_stream(cancel_requests=cancel)
            finally:
                self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_final(result: Any) -> bool:
    parameter = result.get_response().parameters.get("triton_final_response")
    return bool(parameter is not None and parameter.bool_param)
