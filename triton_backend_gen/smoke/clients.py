"""Talking to a running server with tritonclient: clients, inference requests, gRPC streams."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Self

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.model import ModelSpec
from triton_backend_gen.smoke.stream_protocol import StreamLedger, StreamMessage

grpc = lazy_module("grpc")
np = lazy_module("numpy")
grpcclient = lazy_module("tritonclient.grpc")
grpc_utils = lazy_module("tritonclient.grpc._utils")
service_pb2_grpc = lazy_module("tritonclient.grpc.service_pb2_grpc")
httpclient = lazy_module("tritonclient.http")
tritonutils = lazy_module("tritonclient.utils")

REQUEST_TIMEOUT_S = 30.0  # one request or one stream of the smoke suite
CLOSE_GRACE_S = 2.0  # how long a stream left on an error, its requests ended, may take to end before a cancel
# tritonclient's channel options: messages of any size (gRPC's default limit is 4 MiB).
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
]


@dataclass(frozen=True)
class Endpoints:
    http_url: str  # "127.0.0.1:8000"
    grpc_url: str  # "127.0.0.1:8001"
    # The server's log, where this machine can read it (None: unknown): checks read the lines it gains while
    # they run for what a client cannot see (smoke.stream_protocol.LogWindow).
    log_file: Path | None = None


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


def bfloat16_bytes(array: np.ndarray) -> bytes:
    """Float values as BF16 on the wire: the high 16 bits of each float32, as tritonclient sends them."""
    return (np.asarray(array, dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()


def wire_datatype(name: str, array: np.ndarray, datatypes: Mapping[str, str]) -> str:
    """The datatype ``array`` goes on the wire as: its dtype's, except float32 for an input declared BF16
    (numpy has no bfloat16: BF16 values travel as float32 arrays). A mismatch is sent as it is, for the server
    to judge."""
    if datatypes.get(name) == "BF16" and array.dtype == np.float32:
        return "BF16"
    return tritonutils.np_to_triton_dtype(array.dtype)


def infer_inputs(protocol: str, inputs: dict[str, np.ndarray], datatypes: Mapping[str, str]) -> list:
    """``inputs`` as the client's tensors (see wire_datatype)."""
    module = _client_module(protocol)
    tensors = []
    for name, array in inputs.items():
        array = np.asarray(array)
        tensor = module.InferInput(name, list(array.shape), wire_datatype(name, array, datatypes))
        if protocol == "http":
            tensor.set_data_from_numpy(array, binary_data=True)
        else:
            tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def output_array(result: Any, name: str) -> np.ndarray | None:
    """Output ``name`` of a tritonclient result (HTTP or gRPC) as numpy, None when the response lacks it.

    An empty tensor keeps its declared datatype: tritonclient's HTTP ``as_numpy`` returns an empty output as
    float64 whatever its datatype (``np.empty(0)``), so a model answering ``[batch, 0]`` INT64 would read as
    FP64 over HTTP only."""
    array = result.as_numpy(name)
    if array is None or array.size:
        return array
    output = result.get_output(name)
    datatype = output["datatype"] if isinstance(output, dict) else output.datatype
    return array.astype(tritonutils.triton_to_np_dtype(datatype))


def output_arrays(result: Any, names: Iterable[str]) -> dict[str, np.ndarray | None]:
    """Every output of ``names`` of one result (see output_array)."""
    return {name: output_array(result, name) for name in names}


@dataclass(frozen=True)
class SequenceFlags:
    """Where a request stands in its sequence: its correlation ID and whether it starts or ends it."""

    id: int | str
    start: bool = False
    end: bool = False

    def kwargs(self) -> dict[str, Any]:
        return {"sequence_id": self.id, "sequence_start": self.start, "sequence_end": self.end}


_sequence_ids = itertools.count(1)


def new_sequence_id(spec: ModelSpec) -> int | str:
    """A correlation ID no other request of this process used, of the model's kind (string or integer)."""
    number = next(_sequence_ids)
    return f"tbgen-{number}" if spec.sequence is not None and spec.sequence.string_ids else number


def one_request_sequence(spec: ModelSpec) -> SequenceFlags | None:
    """For a sequence model, a fresh sequence of one request (START and END); None for other models."""
    return SequenceFlags(new_sequence_id(spec), True, True) if spec.sequence is not None else None


def infer(
    protocol: str,
    client: Any,
    spec: ModelSpec,
    inputs: dict[str, np.ndarray],
    sequence: SequenceFlags | None = None,
) -> dict[str, np.ndarray]:
    """The outputs of one request; a request of a sequence model carries ``sequence`` (default: a sequence of
    its own, one_request_sequence)."""
    result = infer_result(protocol, client, spec, inputs, sequence)
    return output_arrays(result, spec.output_names)


def infer_result(
    protocol: str,
    client: Any,
    spec: ModelSpec,
    inputs: dict[str, np.ndarray],
    sequence: SequenceFlags | None = None,
    parameters: dict[str, Any] | None = None,
) -> Any:
    """tritonclient's result of one request (see infer), sent with request ``parameters``."""
    module = _client_module(protocol)
    sequence = sequence or one_request_sequence(spec)
    outputs = [
        module.InferRequestedOutput(t.name, binary_data=True)
        if protocol == "http"
        else module.InferRequestedOutput(t.name)
        for t in spec.outputs
    ]
    return client.infer(
        spec.name,
        infer_inputs(protocol, inputs, spec.input_datatypes),
        outputs=outputs,
        parameters=parameters,
        **(sequence.kwargs() if sequence else {}),
        **timeout_kwargs(protocol),
    )


def response_parameters(result: Any) -> dict[str, Any]:
    """The parameters of a tritonclient result (HTTP or gRPC), as plain values; Triton's own ones left out."""
    response = result.get_response()
    if isinstance(response, dict):  # HTTP
        found = dict(response.get("parameters", {}))
    else:
        found = {
            key: getattr(value, value.WhichOneof("parameter_choice"))
            for key, value in response.parameters.items()
            if value.WhichOneof("parameter_choice")
        }
    return {key: value for key, value in found.items() if not key.startswith("triton_")}


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


def stream_message(message: Any) -> StreamMessage:
    """A ModelStreamInferResponse as the ledger reads it. An error keeps its request id and final flag, which
    tritonclient's own stream drops (it hands on the error's text alone)."""
    response = message.infer_response
    flag = response.parameters.get("triton_final_response")
    final = flag.bool_param if flag is not None else None
    if message.error_message:
        error = tritonutils.InferenceServerException(msg=message.error_message)
        return StreamMessage(response.id or "", error=error, final=final)
    return StreamMessage(
        response.id, grpcclient.InferResult(response), final=final, data=bool(response.outputs)
    )


class Stream:
    """One gRPC stream (ModelStreamInfer): requests with ids, and each request's results up to its final flag,
    judged against the decoupled protocol as they come (smoke.stream_protocol: a response after the final
    flag, the final flag twice, an error response mid-stream, no final flag within ``deadline_s`` of the
    request: each an AssertionError naming it).

    It reads the stream's messages itself rather than through tritonclient's stream, which hands on an error
    response's text alone (not its request id nor its final flag); the requests are tritonclient's own. A
    stream left on an error cancels its requests; one closed cleanly waits for the server to end it, at most
    until its open requests' deadline, and names what came after a request's final flag meanwhile."""

    def __init__(self, endpoints: Endpoints, deadline_s: float = REQUEST_TIMEOUT_S) -> None:
        self.deadline_s = deadline_s
        self._ledger = StreamLedger()
        self._requests: queue.Queue = queue.Queue()  # what gRPC sends; None half-closes the stream
        self._messages: queue.Queue = queue.Queue()
        self._cancelled = False
        self._closed = False
        self._channel = grpc.insecure_channel(endpoints.grpc_url, options=_CHANNEL_OPTIONS)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._call = stub.ModelStreamInfer(iter(self._requests.get, None))
        self._reader = threading.Thread(target=self._read, name="tbgen-stream", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """The reader thread: every message of the stream into the queue, then how the stream failed (not
        when this side cancelled it)."""
        try:
            for message in self._call:
                self._messages.put(stream_message(message))
        except grpc.RpcError as err:
            if not self._cancelled:
                error = tritonutils.InferenceServerException(msg=err.details(), status=str(err.code()))
                self._messages.put(StreamMessage(None, error=error))

    def send(
        self,
        spec: ModelSpec,
        inputs: dict[str, np.ndarray],
        request_id: str,
        sequence: SequenceFlags | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        """Send one request (with request ``parameters``); a request of a sequence model carries ``sequence``
        (default: a sequence of its own)."""
        sequence = sequence or one_request_sequence(spec)
        flags = {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
        request = grpc_utils._get_inference_request(  # what tritonclient's async_stream_infer sends
            model_name=spec.name,
            inputs=infer_inputs("grpc", inputs, spec.input_datatypes),
            model_version="",
            request_id=request_id,
            outputs=None,
            priority=0,
            timeout=None,
            parameters=parameters,
            **{**flags, **(sequence.kwargs() if sequence else {})},
        )
        # The final flag alone comes as an empty response (else a client learns of it only from its absence).
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        self._ledger.sent(request_id, time.monotonic())
        self._requests.put(request)

    def infer(
        self,
        spec: ModelSpec,
        inputs: dict[str, np.ndarray],
        request_id: str,
        sequence: SequenceFlags | None = None,
    ) -> list[dict[str, np.ndarray]]:
        """The outputs of each data response to one request, in order (AssertionError for an error)."""
        return [
            output_arrays(r, spec.output_names)
            for r in self.infer_results(spec, inputs, request_id, sequence)
        ]

    def infer_results(
        self,
        spec: ModelSpec,
        inputs: dict[str, np.ndarray],
        request_id: str,
        sequence: SequenceFlags | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> list:
        """tritonclient's result of each data response to one request sent with request ``parameters`` (see
        infer)."""
        self.send(spec, inputs, request_id, sequence, parameters)
        results = self.collect([request_id])[request_id]
        return [r for r in results if any(r.as_numpy(name) is not None for name in spec.output_names)]

    def next(self, timeout: float | None = None):
        """The next (result, error) on the stream, within ``timeout`` (default: the per-request deadline)."""
        message = self._next_message(self.deadline_s if timeout is None else timeout)
        if message is None:
            wait = self.deadline_s if timeout is None else timeout
            raise AssertionError(f"no response on the stream within {wait:g} s")
        return message.result, message.error

    def _next_message(self, timeout: float) -> StreamMessage | None:
        """The next message, taken into the ledger (AssertionError for a protocol fault); None when none
        came within ``timeout``."""
        try:
            message = self._messages.get(timeout=timeout)
        except queue.Empty:
            return None
        request_id = self._ledger.receive(message, error_text(message.error) if message.error else "")
        return dataclasses.replace(message, request_id=request_id)

    def collect(self, request_ids: list[str]) -> dict[str, list]:
        """Every result of each request, in arrival order, up to and including its final one; AssertionError
        for an error response, a protocol fault, or a request whose final flag did not come within the
        per-request deadline."""
        results: dict[str, list] = {request_id: [] for request_id in request_ids}
        while any(self._ledger.is_open(request_id) for request_id in request_ids):
            wait = self._ledger.wait_s(request_ids, time.monotonic(), self.deadline_s)
            message = self._next_message(wait)
            if message is None:
                fault = self._ledger.overdue(request_ids, time.monotonic(), self.deadline_s)
                if fault is not None:
                    raise AssertionError(fault)
                continue
            if message.request_id not in results:
                raise AssertionError(f"a response for unknown request id {message.request_id!r}")
            if message.result is not None:
                results[message.request_id].append(message.result)
            failed = self._ledger.failed(message.request_id)
            if failed is not None and not self._ledger.is_open(message.request_id):
                raise AssertionError(f"the stream returned an error: {failed}")
        return results

    def close(self, cancel: bool = False) -> None:
        """Close the stream: ``cancel`` the requests still open, or let the server end it (within the open
        requests' deadline, else cancelled: AssertionError, the stream never ended) and name anything that
        came after a request's final flag meanwhile."""
        if self._closed:
            return
        self._closed = True
        try:
            self._requests.put(None)  # half-close: the server ends the stream once its requests are done
            open_ids = self._ledger.open_ids()
            # A stream whose requests have all ended is not cancelled: the 2.51 server's shutdown waits 15 s
            # for a stream cancelled after its final responses. The server ends it at once.
            if not cancel or not open_ids:
                wait = self._ledger.wait_s(open_ids, time.monotonic(), self.deadline_s)
                self._reader.join(min(wait, CLOSE_GRACE_S) if cancel else wait)
            if self._reader.is_alive():
                self._cancelled = True
                self._call.cancel()
                self._reader.join()
                if not cancel:
                    raise AssertionError(self._unended())
            while not cancel and self._next_message(0) is not None:
                pass  # each is judged by the ledger: a response after its request's final flag raises
        finally:
            self._channel.close()

    def _unended(self) -> str:
        """Why a stream closed cleanly had to be cancelled: a request without its final flag, or a server that
        did not end the stream after its requests ended."""
        fault = self._ledger.overdue(self._ledger.open_ids(), time.monotonic(), self.deadline_s)
        return fault or f"the server did not end the stream within {self.deadline_s:g} s of its last request"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # Leaving on an error or an interrupt cancels what is in flight: closing without cancelling waits for
        # the server to finish every request of the stream, which a slow decoupled model makes minutes.
        self.close(cancel=exc_type is not None)


def is_final(result: Any) -> bool:
    parameter = result.get_response().parameters.get("triton_final_response")
    return bool(parameter is not None and parameter.bool_param)


# ---- The server's statistics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelStatistics:
    """What the server counted for one model (all versions): requests, executions and their mean times."""

    name: str
    success: int  # requests answered
    failed: int
    executions: int  # executions of the model (a dynamic batch counts once)
    inferences: int  # inferences (a batch of N counts N)
    queue_us: float  # mean time a successful request waited in the queue
    compute_us: float  # mean time of input + infer + output per successful request

    def describe(self) -> str:
        return (
            f"{self.success} ok, {self.failed} failed, {self.inferences} inferences in {self.executions} "
            f"executions; queue {self.queue_us:.0f} us, compute {self.compute_us:.0f} us per request"
        )


def model_counts(client: Any, model: str, protocol: str) -> tuple[int, int]:
    """(inference_count, execution_count) of ``model``, summed over its versions, asked through ``client``."""
    if protocol == "http":
        stats = client.get_inference_statistics(model)
    else:
        stats = client.get_inference_statistics(model, as_json=True, **timeout_kwargs(protocol))
    entries = stats.get("model_stats", [])
    return (
        sum(int(m.get("inference_count", 0)) for m in entries),
        sum(int(m.get("execution_count", 0)) for m in entries),
    )


def _statistics_row(entry: dict) -> list[float]:
    """One version's statistics (an entry of model_stats): [successes, failures, executions, inferences,
    queue ns, compute ns (input + infer + output)]."""
    stats = entry.get("inference_stats", {})
    ns = {
        key: float(stats.get(key, {}).get("ns", 0))
        for key in ("queue", "compute_input", "compute_infer", "compute_output")
    }
    return [
        int(stats.get("success", {}).get("count", 0)),
        int(stats.get("fail", {}).get("count", 0)),
        int(entry.get("execution_count", 0)),
        int(entry.get("inference_count", 0)),
        ns["queue"],
        ns["compute_input"] + ns["compute_infer"] + ns["compute_output"],
    ]


def server_statistics(endpoints: Endpoints, models: list[str]) -> list[ModelStatistics]:
    """The server's statistics of ``models`` (those it has none of are left out)."""
    with open_client("http", endpoints) as client:
        stats = client.get_inference_statistics().get("model_stats", [])
    totals: dict[str, list[float]] = {}
    for entry in stats:
        row = _statistics_row(entry)
        totals[entry["name"]] = [a + b for a, b in zip(totals.get(entry["name"], [0] * 6), row, strict=True)]
    result = []
    for name in models:
        if name in totals:
            success, failed, executions, inferences, queue_ns, compute_ns = totals[name]
            per = max(success, 1) * 1000.0
            result.append(
                ModelStatistics(
                    name,
                    int(success),
                    int(failed),
                    int(executions),
                    int(inferences),
                    queue_ns / per,
                    compute_ns / per,
                )
            )
    return result
