"""The fuzz kinds (each with its weight and protocols), the case, and what each case sends over raw HTTP and
gRPC (loopback only), and how its answer is read."""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import quote

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.checks import UNKNOWN_INPUT
from triton_backend_gen.smoke.clients import (
    Endpoints,
    bfloat16_bytes,
    error_text,
    new_sequence_id,
    one_request_sequence,
    stream_message,
    wire_datatype,
)
from triton_backend_gen.smoke.compare import assert_outputs_match
from triton_backend_gen.smoke.model import ModelSpec
from triton_backend_gen.smoke.stream_protocol import StreamLedger, never_ended, stream_deadline

grpc = lazy_module("grpc")
np = lazy_module("numpy")
service_pb2 = lazy_module("tritonclient.grpc.service_pb2")
service_pb2_grpc = lazy_module("tritonclient.grpc.service_pb2_grpc")
tritonutils = lazy_module("tritonclient.utils")

FUZZ_TIMEOUT_S = 20.0  # the longest a case may wait for its answer
# Payload sizes of the "huge tensor" cases. The 2.51 server's gRPC frontend keeps the buffers of the
# largest messages it has parsed in its pools (about GRPC_POOL_FACTOR times the largest, for good; HTTP
# keeps nothing), so gRPC gets smaller ones: the memory check must tell such pools from a leak.
HUGE_MIB = {"http": (4, 16, 48), "grpc": (1, 4, 8)}


_DATATYPES = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
)
_ITEM_SIZE = {
    "BOOL": 1,
    "UINT8": 1,
    "INT8": 1,
    "UINT16": 2,
    "INT16": 2,
    "FP16": 2,
    "BF16": 2,
    "UINT32": 4,
    "INT32": 4,
    "FP32": 4,
    "UINT64": 8,
    "INT64": 8,
    "FP64": 8,
    "BYTES": 1,
}
_ODD_DIMS = (0, 1, 2, 3, 5, 17, 1000, -1, -7, 2**31, 2**62)


# kind -> (weight, protocols). "grpc" for a decoupled model means a gRPC stream (unary gRPC is refused).
FUZZ_KINDS: dict[str, tuple[int, tuple[str, ...]]] = {
    "valid": (12, ("http", "grpc")),
    "garbage values": (5, ("http", "grpc")),
    "wrong dtype": (8, ("http", "grpc")),
    "wrong shape": (8, ("http", "grpc")),
    "size mismatch": (8, ("http", "grpc")),
    "missing input": (4, ("http", "grpc")),
    "unknown input": (4, ("http", "grpc")),
    "duplicate input": (3, ("http", "grpc")),
    "batch too large": (5, ("http", "grpc")),
    "empty tensor": (5, ("http", "grpc")),
    "huge tensor": (3, ("http", "grpc")),
    "garbage BYTES": (5, ("http", "grpc")),
    "malformed message": (8, ("http", "grpc")),
    "unknown model": (2, ("http", "grpc")),
    "cancelled mid-flight": (10, ("http", "grpc")),
    "client disconnects": (10, ("http", "grpc")),
    "sequence controls": (16, ("http", "grpc")),  # sequence models only
}


@dataclass(frozen=True)
class FuzzCase:
    index: int
    kind: str
    protocol: str  # "http" or "grpc"
    seed: int  # of this case's random generator
    plan_seed: int  # the seed the plan was made with
    model: ModelSpec
    reference: ModuleType = field(repr=False, compare=False)

    @property
    def label(self) -> str:
        return f"#{self.index} {self.kind} [{self.protocol}]"

    # A case also reads as a SmokeCheck, so that run_smoke can run a fuzz plan one case per result; run_fuzz
    # adds what only a whole run can tell: the server's memory and health afterwards, and the figures.
    @property
    def name(self) -> str:
        return f"fuzz #{self.index} {self.kind}"

    def run(self, endpoints: Endpoints) -> str:
        return run_fuzz_case(self, endpoints)


def run_fuzz_case(case: FuzzCase, endpoints: Endpoints) -> str:
    """Send one case; its outcome ("ok", "http 400", "grpc INVALID_ARGUMENT", "cancelled", "disconnected").

    Raises AssertionError when the server did not answer, or answered a valid request wrongly."""
    rng = random.Random(case.seed)
    if case.kind == "valid":
        return fuzz_valid(case, rng, case.protocol, endpoints)
    if case.kind == "client disconnects":
        return _fuzz_disconnect(rng, case.protocol, endpoints)
    if case.kind == "malformed message":
        return _fuzz_malformed(case, rng, endpoints)
    if case.kind == "cancelled mid-flight":
        return _fuzz_cancel(case, rng, endpoints)
    if case.kind == "sequence controls":
        return _fuzz_sequence_controls(case, rng, endpoints)
    model, tensors = fuzz_tensors(case, rng)
    return send_wire(
        case.protocol,
        endpoints,
        model,
        tensors,
        case.model,
        decoupled=case.model.decoupled,
        deadline_s=stream_deadline_of(case),
    )


# -- building the tensors of a case


@dataclass
class _Wire:
    """One input tensor as it goes on the wire: what it claims to be and its raw bytes."""

    name: str
    datatype: str
    shape: list[int]
    payload: bytes


def _wire_from_arrays(inputs: dict[str, np.ndarray], spec: ModelSpec) -> list[_Wire]:
    """``inputs`` as they go on the wire, each of its declared datatype (BF16 arrays are float32)."""
    wires = []
    for name, array in inputs.items():
        array = np.asarray(array)
        datatype = wire_datatype(name, array, spec.input_datatypes)
        if datatype == "BYTES":  # tritonclient gives the length-prefixed bytes as a 0-d object array
            payload = tritonutils.serialize_byte_tensor(array).item() if array.size else b""
        elif datatype == "BF16":
            payload = bfloat16_bytes(array)
        else:
            payload = array.tobytes()
        wires.append(_Wire(name, datatype, list(array.shape), payload))
    return wires


def _element_count(shape: list[int]) -> int:
    return int(np.prod(shape, dtype=object)) if shape else 1


def _garbage_bytes_payload(rng: random.Random, count: int) -> bytes:
    """``count`` BYTES elements whose length prefixes lie (too long, negative-looking, truncated)."""
    parts = []
    for _ in range(max(count, 1)):
        claim = rng.choice([0, 1, 7, 2**31 - 1, 2**32 - 1, rng.randrange(1, 64)])
        parts.append(claim.to_bytes(4, "little") + rng.randbytes(rng.randrange(0, 16)))
    return b"".join(parts)[: rng.randrange(1, 4096)]


def fuzz_tensors(case: FuzzCase, rng: random.Random, huge_mib: int | None = None) -> tuple[str, list[_Wire]]:
    """(model name, input tensors) of ``case``, for the kinds that only change the tensors of a valid request;
    the same for the same ``rng`` state."""
    spec = case.model
    batch = rng.choice(spec.batch_sizes)
    wires = _wire_from_arrays(case.reference.make_inputs(batch, seed=rng.randrange(1000)), case.model)
    target = rng.randrange(len(wires))
    if case.kind == "unknown model":
        return rng.choice(
            ["tbgen_no_such_model", spec.name + "_", "../" + spec.name, spec.name.upper() + "\u00e9"]
        ), wires
    tamper = _TAMPERS.get(case.kind)
    if tamper is None:
        raise ValueError(f"unknown fuzz kind {case.kind!r}")
    return spec.name, tamper(case, rng, wires, target, huge_mib)


# How each kind changes the tensors of a valid request: each takes (case, rng, the tensors, the index of the
# one to change, huge_mib) and returns the tensors to send.


def _garbage_values(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    for w in wires:
        w.payload = rng.randbytes(len(w.payload)) if w.datatype != "BYTES" else _garbage_bytes_payload(rng, 4)
    return wires


def _wrong_dtype(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    wire.datatype = rng.choice([d for d in _DATATYPES if d != wire.datatype] + ["FP8", "COMPLEX64", ""])
    wire.payload = rng.randbytes(_element_count(wire.shape) * _ITEM_SIZE.get(wire.datatype, 4))
    return wires


def _wrong_shape(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    wire.shape = [rng.choice(_ODD_DIMS) for _ in range(rng.randrange(0, 6))]
    count = _element_count(wire.shape)
    size = count * _ITEM_SIZE.get(wire.datatype, 4) if 0 <= count <= 2**18 else rng.randrange(0, 256)
    wire.payload = rng.randbytes(size)
    return wires


def _size_mismatch(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    size = len(wire.payload)
    wire.payload = rng.randbytes(
        rng.choice([0, 1, max(size - rng.randrange(1, 9), 0), size + rng.randrange(1, 9), size * 2 + 1])
    )
    return wires


def _missing_input(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    del wires[target]
    return wires


def _unknown_input(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    name = rng.choice([UNKNOWN_INPUT, "", "x" * 4096, "INPUT\u00e9\u0000", wire.name.lower() + "_"])
    return wires + [_Wire(name, wire.datatype, wire.shape, wire.payload)]


def _duplicate_input(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    return wires + [_Wire(wire.name, wire.datatype, list(wire.shape), wire.payload)]


def _batch_too_large(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    too_big = case.model.max_batch_size + rng.randrange(1, 4 * case.model.max_batch_size + 1)
    return _wire_from_arrays(case.reference.make_inputs(too_big, seed=rng.randrange(1000)), case.model)


def _empty_tensor(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    for w in wires:
        w.shape = [0] + w.shape[1:] if w.shape else [0]
        w.payload = b""
    return wires


def _huge_tensor(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    size = (huge_mib or rng.choice(HUGE_MIB[case.protocol])) * 1024 * 1024
    item = _ITEM_SIZE.get(wire.datatype, 4)
    rest = _element_count(wire.shape[1:]) if len(wire.shape) > 1 else 1
    wire.shape = [max(size // (item * max(rest, 1)), 1)] + wire.shape[1:]
    wire.payload = bytes(_element_count(wire.shape) * item)  # zeros: cheap to make, same size on the wire
    return wires


def _garbage_bytes(
    case: FuzzCase, rng: random.Random, wires: list[_Wire], target: int, huge_mib: int | None
) -> list[_Wire]:
    wire = wires[target]
    wire.datatype = "BYTES"
    wire.payload = _garbage_bytes_payload(rng, _element_count(wire.shape) if len(wire.shape) < 4 else 1)
    return wires


_TAMPERS: dict[str, Callable[[FuzzCase, random.Random, list[_Wire], int, int | None], list[_Wire]]] = {
    "garbage values": _garbage_values,
    "wrong dtype": _wrong_dtype,
    "wrong shape": _wrong_shape,
    "size mismatch": _size_mismatch,
    "missing input": _missing_input,
    "unknown input": _unknown_input,
    "duplicate input": _duplicate_input,
    "batch too large": _batch_too_large,
    "empty tensor": _empty_tensor,
    "huge tensor": _huge_tensor,
    "garbage BYTES": _garbage_bytes,
}


# -- sending


def _split(url: str) -> tuple[str, int]:
    host, port = url.rsplit(":", 1)
    return host, int(port)


# A request's sequence parameters as they go on the wire (sequence_id, sequence_start, sequence_end): values
# of any type, for the fuzzer to send bad ones. A request of a sequence model gets a sequence of its own by
# default.
SequenceParameters = dict[str, Any]


def _sequence_parameters(spec: ModelSpec, sequence: SequenceParameters | None) -> SequenceParameters:
    if sequence is not None:
        return sequence
    flags = one_request_sequence(spec)
    return {} if flags is None else flags.kwargs()


def _http_body(
    spec: ModelSpec, wires: list[_Wire], sequence: SequenceParameters | None = None
) -> tuple[bytes, dict[str, str]]:
    header = {
        "inputs": [
            {
                "name": w.name,
                "datatype": w.datatype,
                "shape": w.shape,
                "parameters": {"binary_data_size": len(w.payload)},
            }
            for w in wires
        ],
        "outputs": [{"name": t.name, "parameters": {"binary_data": True}} for t in spec.outputs],
    }
    parameters = _sequence_parameters(spec, sequence)
    if parameters:
        header["parameters"] = parameters
    head = json.dumps(header).encode()
    return head + b"".join(w.payload for w in wires), {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }


def _http_post(
    endpoints: Endpoints, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes, Any]:
    """(status, body, response headers); AssertionError when the server does not answer."""
    connection = http.client.HTTPConnection(*_split(endpoints.http_url), timeout=FUZZ_TIMEOUT_S)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), response.headers
    except TimeoutError:
        raise AssertionError(f"no HTTP answer within {FUZZ_TIMEOUT_S:.0f} s") from None
    except (ConnectionError, http.client.HTTPException) as err:
        raise AssertionError(
            f"the server dropped the HTTP connection without answering ({type(err).__name__})"
        ) from None
    finally:
        connection.close()


def _infer_path(model: str) -> str:

    return f"/v2/models/{quote(model, safe='')}/infer"


def _grpc_stub(endpoints: Endpoints):

    channel = grpc.insecure_channel(
        endpoints.grpc_url,
        options=[("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)],
    )
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _grpc_request(
    model: str,
    spec: ModelSpec,
    wires: list[_Wire],
    request_id: str = "",
    sequence: SequenceParameters | None = None,
):

    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for key, value in _sequence_parameters(spec, sequence).items():
        parameter = request.parameters[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            if value >= 2**63:
                parameter.uint64_param = value
            else:
                parameter.int64_param = value
        else:
            parameter.string_param = str(value)
    for w in wires:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = w.name, w.datatype
        tensor.shape.extend(w.shape)
        request.raw_input_contents.append(w.payload)
    for t in spec.outputs:
        request.outputs.add().name = t.name
    if spec.decoupled:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def _grpc_outcome(err: Exception) -> str:

    code = err.code() if isinstance(err, grpc.RpcError) else None
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise AssertionError(f"no gRPC answer: {code.name} ({err.details()})")
    return f"grpc {code.name if code else type(err).__name__}"


def send_wire(
    protocol: str,
    endpoints: Endpoints,
    model: str,
    wires: list[_Wire],
    spec: ModelSpec,
    decoupled: bool,
    deadline_s: float = FUZZ_TIMEOUT_S,
) -> str:
    """Send one request; "ok" or how it was refused (a stream's: within ``deadline_s``)."""
    if protocol == "http":
        status, _, _ = _http_post(endpoints, _infer_path(model), *_http_body(spec, wires))
        return "ok" if status == 200 else f"http {status}"
    if decoupled:
        outcome, _ = _grpc_stream_once(
            endpoints, _grpc_request(model, spec, wires, "fuzz"), deadline_s=deadline_s
        )
        return outcome
    channel, stub = _grpc_stub(endpoints)
    try:
        stub.ModelInfer(_grpc_request(model, spec, wires), timeout=FUZZ_TIMEOUT_S)
        return "ok"
    except Exception as err:  # noqa: BLE001 - grpc.RpcError, classified
        return _grpc_outcome(err)
    finally:
        channel.close()


def stream_deadline_of(case: FuzzCase) -> float:
    """The per-request deadline of a case's stream: the model's (reference.py's STREAM_DEADLINE_S), at most
    FUZZ_TIMEOUT_S."""
    return min(FUZZ_TIMEOUT_S, stream_deadline(case.reference, FUZZ_TIMEOUT_S))


def _grpc_stream_once(
    endpoints: Endpoints, request, cancel_after: float | None = None, deadline_s: float = FUZZ_TIMEOUT_S
) -> tuple[str, list]:
    """Send one request on a fresh stream and read until its final response or an error, within
    ``deadline_s`` (AssertionError naming a protocol fault: see _read_stream).

    With ``cancel_after`` (seconds), the stream is cancelled then instead ("cancelled", what came before)."""
    channel, stub = _grpc_stub(endpoints)
    responses: list = []
    try:
        call = stub.ModelStreamInfer(iter([request]), timeout=deadline_s)
        timer = threading.Timer(cancel_after, call.cancel) if cancel_after is not None else None
        if timer is not None:
            timer.start()
        try:
            outcome = read_stream(
                call, request.id, responses, cancellable=timer is not None, deadline_s=deadline_s
            )
        finally:
            if timer is not None:
                timer.cancel()
        if outcome is not None:
            return outcome, responses
        if cancel_after is not None:
            return "cancelled", responses
        raise AssertionError("the stream ended without a final response")
    finally:
        channel.close()


def read_stream(
    call, request_id: str, responses: list, cancellable: bool, deadline_s: float = FUZZ_TIMEOUT_S
) -> str | None:
    """Read ``call`` (the stream of request ``request_id``) to its end, collecting into ``responses`` the
    request's responses up to its final one: "ok" after the final response, "stream error" after an error
    response that ended the request, "cancelled" (when ``cancellable``), how an error ended the stream, or
    None. AssertionError names a protocol fault (smoke.stream_protocol): anything after the final flag, data
    after an error response, no final flag within ``deadline_s`` (the call's deadline)."""
    ledger = StreamLedger()
    ledger.sent(request_id, time.monotonic())
    try:
        # The request iterator is exhausted: the client has half-closed the stream, so the server ends
        # it once the request is done. Reading on to that end (not cancelling a finished stream) matters:
        # the 2.51 server's shutdown waits 15 s for a stream that was cancelled after its final response.
        for message in call:
            read = stream_message(message)
            ledger.receive(read, error_text(read.error) if read.error is not None else "")
            if read.result is not None:
                responses.append(message.infer_response)
    except grpc.RpcError as err:
        if cancellable and err.code() == grpc.StatusCode.CANCELLED:
            return "cancelled"
        if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED and ledger.is_open(request_id):
            raise AssertionError(never_ended(request_id, deadline_s, len(responses))) from None
        if ledger.is_open(request_id):
            return _grpc_outcome(err)
    if ledger.is_open(request_id):
        return None
    return "stream error" if ledger.failed(request_id) is not None else "ok"


class _Refused(Exception):
    """The server refused a request: ``outcome`` says how ("http 400", "grpc INVALID_ARGUMENT", "stream
    error")."""

    def __init__(self, outcome: str, detail: str | None = None) -> None:
        super().__init__(detail or outcome)
        self.outcome = outcome


def _answers(
    protocol: str,
    endpoints: Endpoints,
    spec: ModelSpec,
    wires: list[_Wire],
    request_id: str,
    sequence: SequenceParameters | None = None,
    final_with_last: bool = False,
    deadline_s: float = FUZZ_TIMEOUT_S,
) -> list[dict[str, np.ndarray]]:
    """Send one request to the model (with ``sequence`` as its sequence parameters): the outputs of each
    response with data (a decoupled model's over a gRPC stream, within ``deadline_s``; one otherwise).
    _Refused when the server refuses it; with ``final_with_last``, AssertionError when a stream's final flag
    comes alone after data."""
    if protocol == "http":
        status, body, headers = _http_post(
            endpoints, _infer_path(spec.name), *_http_body(spec, wires, sequence)
        )
        if status != 200:
            raise _Refused(f"http {status}", f"HTTP {status} {body[:200]!r}")
        return [_decode_http_outputs(body, headers, tritonutils.triton_to_np_dtype)]
    request = _grpc_request(spec.name, spec, wires, request_id, sequence)
    if spec.decoupled:
        outcome, responses = _grpc_stream_once(endpoints, request, deadline_s=deadline_s)
        if outcome != "ok":
            raise _Refused(outcome)
        if final_with_last and len(responses) > 1 and not responses[-1].outputs:
            raise AssertionError(
                f"the final flag came alone after {len(responses) - 1} responses; reference.py's "
                "FINAL_WITH_LAST_RESPONSE says the last response carries it"
            )
        return [_decode_grpc_outputs(r, tritonutils.triton_to_np_dtype) for r in responses if r.outputs]
    channel, stub = _grpc_stub(endpoints)
    try:
        response = stub.ModelInfer(request, timeout=FUZZ_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - grpc.RpcError, classified
        raise _Refused(_grpc_outcome(err)) from None
    finally:
        channel.close()
    return [_decode_grpc_outputs(response, tritonutils.triton_to_np_dtype)]


# -- the kinds that need more than tensors


def fuzz_valid(case: FuzzCase, rng: random.Random, protocol: str, endpoints: Endpoints) -> str:
    """A valid request; its answer must equal reference.py's."""
    spec, reference = case.model, case.reference
    batch = rng.choice(spec.batch_sizes)
    inputs = reference.make_inputs(batch, seed=rng.randrange(1000))
    wires = _wire_from_arrays(inputs, spec)
    if spec.decoupled and protocol == "http":  # refused by design: HTTP does not serve decoupled models
        return send_wire("http", endpoints, spec.name, wires, spec, decoupled=True)
    final_with_last = getattr(reference, "FINAL_WITH_LAST_RESPONSE", False)
    try:
        answers = _answers(
            protocol,
            endpoints,
            spec,
            wires,
            "valid",
            final_with_last=final_with_last,
            deadline_s=stream_deadline_of(case),
        )
    except _Refused as err:
        raise AssertionError(f"a valid request was refused: {err}") from None
    if not spec.decoupled:
        assert_outputs_match(
            answers[0], reference.compute(inputs), reference.TOLERANCE, f"batch size {batch}"
        )
        return "ok"
    expected = reference.responses(inputs)
    if len(answers) != len(expected):
        raise AssertionError(f"{len(answers)} responses with data, reference.responses gives {len(expected)}")
    for index, (got, want) in enumerate(zip(answers, expected, strict=True)):
        assert_outputs_match(got, want, reference.TOLERANCE, f"response {index}")
    return "ok"


def _decode(datatype: str, shape: list[int], raw: bytes, to_np) -> np.ndarray:
    """One output's raw bytes as the array tritonclient would give (BF16 as float32)."""
    if datatype == "BYTES":
        return tritonutils.deserialize_bytes_tensor(raw).reshape(shape)
    if datatype == "BF16":
        return tritonutils.deserialize_bf16_tensor(raw).reshape(shape)
    return np.frombuffer(raw, dtype=to_np(datatype)).reshape(shape)


def _decode_http_outputs(body: bytes, headers: Any, to_np) -> dict[str, np.ndarray]:
    length = int(headers.get("Inference-Header-Content-Length", len(body)))
    header, offset, outputs = json.loads(body[:length]), length, {}
    for output in header.get("outputs", []):
        size = int(output.get("parameters", {}).get("binary_data_size", 0))
        if "data" in output:
            outputs[output["name"]] = np.array(output["data"], dtype=to_np(output["datatype"])).reshape(
                output["shape"]
            )
        else:
            outputs[output["name"]] = _decode(
                output["datatype"], output["shape"], body[offset : offset + size], to_np
            )
            offset += size
    return outputs


def _decode_grpc_outputs(response, to_np) -> dict[str, np.ndarray]:
    return {
        output.name: _decode(output.datatype, list(output.shape), raw, to_np)
        for output, raw in zip(response.outputs, response.raw_output_contents, strict=False)
    }


def _fuzz_cancel(case: FuzzCase, rng: random.Random, endpoints: Endpoints) -> str:
    """A valid request abandoned before its answer: the socket closed (HTTP), a deadline or a cancelled
    stream (gRPC). "cancelled", or "ok" when the answer beat the cancellation."""
    spec = case.model
    inputs = case.reference.make_inputs(rng.choice(spec.batch_sizes), seed=rng.randrange(1000))
    wires = _wire_from_arrays(inputs, spec)
    if case.protocol == "http":
        body, headers = _http_body(spec, wires)
        connection = http.client.HTTPConnection(*_split(endpoints.http_url), timeout=FUZZ_TIMEOUT_S)
        try:
            connection.request("POST", _infer_path(spec.name), body=body, headers=headers)
            # A random delay on purpose (nothing to poll): the socket closes before, while or after the server
            # reads the request, so the cancellation lands at a different point of its handling each time.
            time.sleep(rng.choice([0, 0, 0.001, 0.005]))
        finally:
            connection.close()
        return "cancelled"
    if spec.decoupled:
        outcome, _ = _grpc_stream_once(
            endpoints,
            _grpc_request(spec.name, spec, wires, "cancel"),
            cancel_after=rng.uniform(0, 0.03),
            deadline_s=stream_deadline_of(case),
        )
        return outcome
    channel, stub = _grpc_stub(endpoints)
    try:
        stub.ModelInfer(_grpc_request(spec.name, spec, wires), timeout=rng.uniform(0.0001, 0.005))
        return "ok"
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return "cancelled"
        return _grpc_outcome(err)
    finally:
        channel.close()


def _fuzz_disconnect(rng: random.Random, protocol: str, endpoints: Endpoints) -> str:
    """A client that connects, sends part of a request (or garbage) and goes away."""
    host, port = _split(endpoints.http_url if protocol == "http" else endpoints.grpc_url)
    if protocol == "http":
        length = rng.choice([64, 4096, 2**20, 2**31])
        head = (
            f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode()
        options = [b"", head[: rng.randrange(1, len(head))], head, head + b'{"inputs": [', rng.randbytes(512)]
    else:
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        options = [
            b"",
            preface[: rng.randrange(1, len(preface))],
            preface,
            preface + rng.randbytes(64),
            rng.randbytes(512),
        ]
    data = rng.choice(options)
    with socket.create_connection((host, port), timeout=FUZZ_TIMEOUT_S) as sock:
        if data:
            sock.sendall(data)
        if rng.random() < 0.5:  # an abortive close (RST) instead of a FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    return "disconnected"


def _fuzz_malformed(case: FuzzCase, rng: random.Random, endpoints: Endpoints) -> str:
    """A request that is not a valid message: broken JSON or headers (HTTP), random bytes as the protobuf
    message (gRPC)."""
    spec = case.model
    inputs = case.reference.make_inputs(rng.choice(spec.batch_sizes), seed=rng.randrange(1000))
    wires = _wire_from_arrays(inputs, spec)
    if case.protocol == "grpc":
        return _send_malformed_grpc(rng, endpoints, _grpc_request(spec.name, spec, wires).SerializeToString())
    body, headers = _malformed_http(rng, wires, *_http_body(spec, wires))
    status, _, _ = _http_post(endpoints, _infer_path(spec.name), body, headers)
    return "ok" if status == 200 else f"http {status}"


def _send_malformed_grpc(rng: random.Random, endpoints: Endpoints, valid: bytes) -> str:
    """Random bytes, or a truncated or corrupted ``valid`` message, as a ModelInfer request."""
    channel, _ = _grpc_stub(endpoints)
    try:
        method = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer", request_serializer=None, response_deserializer=None
        )
        message = rng.choice(
            [
                rng.randbytes(rng.randrange(1, 2048)),
                valid[: rng.randrange(1, len(valid))],
                valid[:8] + rng.randbytes(64) + valid[72:],
            ]
        )
        try:
            method(message, timeout=FUZZ_TIMEOUT_S)
            return "ok"
        except grpc.RpcError as err:
            return _grpc_outcome(err)
    finally:
        channel.close()


def _malformed_http(
    rng: random.Random, wires: list[_Wire], body: bytes, headers: dict[str, str]
) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a valid HTTP request, broken one of eight ways."""
    length = int(headers["Inference-Header-Content-Length"])
    choice = rng.randrange(8)
    if choice == 0:
        body = body[: rng.randrange(1, length)]  # truncated JSON
        headers.pop("Inference-Header-Content-Length")
    elif choice == 1:
        headers["Inference-Header-Content-Length"] = str(rng.choice([0, -1, len(body) + 1, 2**63]))
    elif choice == 2:
        headers["Inference-Header-Content-Length"] = "abc"
    elif choice == 3:
        body = rng.randbytes(rng.randrange(1, 2048))
    elif choice == 4:
        body = json.dumps(rng.choice([[], 7, "x", {"inputs": 5}, {"inputs": [{"name": 5}]}, {}])).encode()
        headers.pop("Inference-Header-Content-Length")
    elif choice == 5:  # JSON data whose length disagrees with the shape
        tensors = [
            {"name": w.name, "datatype": w.datatype, "shape": w.shape, "data": [1] * rng.randrange(0, 5)}
            for w in wires
        ]
        body = json.dumps({"inputs": tensors}).encode()
        headers.pop("Inference-Header-Content-Length")
    elif choice == 6:  # binary sizes that add up to more than the body
        header = json.loads(body[:length])
        for tensor in header["inputs"]:
            sizes = [2**40, 2**31, tensor["parameters"]["binary_data_size"] + 1]
            tensor["parameters"]["binary_data_size"] = rng.choice(sizes)
        head = json.dumps(header).encode()
        body, headers["Inference-Header-Content-Length"] = head + body[length:], str(len(head))
    else:
        body = body[:length] + rng.randbytes(8)  # binary part too short
    return body, headers


# -- sequence models


def _send_sequenced(
    case: FuzzCase, endpoints: Endpoints, inputs: dict, sequence: SequenceParameters
) -> tuple[str, Any]:
    """Send one request with ``sequence`` as its sequence parameters: ("ok", outputs) or (how it was refused,
    None)."""
    try:
        answers = _answers(
            case.protocol,
            endpoints,
            case.model,
            _wire_from_arrays(inputs, case.model),
            "seq",
            sequence,
            deadline_s=stream_deadline_of(case),
        )
    except _Refused as err:
        return err.outcome, None
    if len(answers) != 1:
        raise AssertionError(f"{len(answers)} responses with data to one request of a sequence, expected 1")
    return "ok", answers[0]


def _fuzz_sequence_controls(case: FuzzCase, rng: random.Random, endpoints: Endpoints) -> str:
    """Bad or unusual sequence controls: no correlation ID, a request of a sequence that never started, an ID
    of the wrong kind or out of range, flags of the wrong type; or a sequence restarted mid-way, whose answers
    must equal reference.compute_sequence. A case that starts a sequence ends it."""
    spec, reference = case.model, case.reference
    batch = 1 if spec.max_batch_size > 0 else None
    inputs = reference.make_inputs(batch, seed=rng.randrange(1000))
    if spec.decoupled and case.protocol == "http":  # refused by design: HTTP does not serve decoupled models
        return send_wire("http", endpoints, spec.name, _wire_from_arrays(inputs, spec), spec, decoupled=True)
    fresh = new_sequence_id(spec)
    wrong_kind = rng.randrange(1, 2**31) if isinstance(fresh, str) else f"tbgen-{fresh}"
    choice = rng.randrange(8)
    if choice == 7:  # a valid sequence started twice: the second START begins from the initial state
        first, second = rng.randrange(1, 4), rng.randrange(1, 4)
        steps = [reference.make_inputs(batch, seed=rng.randrange(1000)) for _ in range(first + second)]
        expected = reference.compute_sequence(steps[:first]) + reference.compute_sequence(steps[first:])
        for index, (step, want) in enumerate(zip(steps, expected, strict=False)):
            flags = {
                "sequence_id": fresh,
                "sequence_start": index in (0, first),
                "sequence_end": index == len(steps) - 1,
            }
            outcome, got = _send_sequenced(case, endpoints, step, flags)
            if outcome != "ok":
                raise AssertionError(f"request {index} of a valid sequence was refused ({outcome})")
            assert_outputs_match(
                got, want, reference.TOLERANCE, f"sequence request {index} (restarted at {first})"
            )
        return "ok"
    sequence = [
        {},  # no correlation ID at all
        {"sequence_id": fresh},  # a request of a sequence that never started
        {"sequence_id": fresh, "sequence_end": True},  # END of a sequence that never started
        {"sequence_id": wrong_kind, "sequence_start": True, "sequence_end": True},
        {"sequence_id": rng.choice([0, ""]), "sequence_start": True, "sequence_end": True},
        {
            "sequence_id": rng.choice([2**64 - 1, -1, "x" * rng.choice([1, 300, 70000])]),
            "sequence_start": True,
            "sequence_end": True,
        },
        {"sequence_id": fresh, "sequence_start": rng.choice(["yes", 1, 2.5]), "sequence_end": True},
    ][choice]
    outcome, _ = _send_sequenced(case, endpoints, inputs, sequence)
    return outcome
