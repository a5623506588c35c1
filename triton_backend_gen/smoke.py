"""The smoke suite and the fuzzer: what `tbgen test` sends to a running server, and how answers are judged.

The suite is planned from a model's ``config.pbtxt`` and the project's ``reference.py`` (see
docs/templates.md): :func:`plan_smoke` is pure (it reads files, it never contacts a server) and returns
:class:`SmokeCheck` objects; :func:`run_smoke` runs them against the endpoints of a running server.

- metadata and config as served match config.pbtxt (over HTTP and gRPC);
- inference over HTTP and gRPC with ``reference.make_inputs``, outputs equal to ``reference.compute``
  (exact for integers, ``reference.TOLERANCE`` for floats), every batch size from 1 to max_batch_size,
  concurrent requests (and, with dynamic batching, proof that the server merged some of them);
- decoupled models over gRPC streaming: count, order and content of the responses against
  ``reference.responses``, the final flag, several requests per stream, concurrent streams, a stream
  cancelled mid-way;
- bad requests (wrong dtype, wrong shape, missing input, unknown input, batch larger than max) each get
  an error and leave the server healthy.

The fuzzer (:func:`plan_fuzz`, :func:`run_fuzz`) sends deterministic randomised malformed requests over
raw HTTP and gRPC (loopback only) and reports what came back and the server's memory before and after.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import importlib.util
import json
import queue
import random
import socket
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from triton_backend_gen.errors import TbgenError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from triton_backend_gen.project import ModelEntry, Project

REQUEST_TIMEOUT_S = 30.0  # one request or one stream of the smoke suite
UNKNOWN_INPUT = "TBGEN_UNKNOWN_INPUT"


class SmokeError(TbgenError):
    """The smoke suite cannot be planned: reference.py or a model config is missing or broken."""


# ---- Plans and results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoints:
    http_url: str  # "127.0.0.1:8000"
    grpc_url: str  # "127.0.0.1:8001"


@dataclass(frozen=True)
class SmokeCheck:
    name: str
    protocol: str  # "http", "grpc" or "-" (no server contact)
    run: Callable[[Endpoints], str]  # a short detail on success; raises with a clear message on failure


@dataclass(frozen=True)
class SmokeResult:
    name: str
    protocol: str
    passed: bool
    detail: str
    seconds: float


# ---- What the model looks like, from its config.pbtxt -------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # Triton's wire name: "FP32", "INT64", "BYTES", ...
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False


@dataclass(frozen=True)
class ModelSpec:
    name: str
    max_batch_size: int
    decoupled: bool
    dynamic_batching: bool
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def batch_sizes(self) -> list[int | None]:
        """The batch sizes to test: 1..max_batch_size, or [None] for a model that does not batch."""
        return list(range(1, self.max_batch_size + 1)) if self.max_batch_size > 0 else [None]

    def served_shape(self, tensor: TensorSpec) -> list[int]:
        """The shape the server reports in the model metadata (-1 first for the batch dimension)."""
        return ([-1] if self.max_batch_size > 0 else []) + list(tensor.dims)


def model_spec(config: ModelConfig, name: str) -> ModelSpec:
    """The parts of a ModelConfig that the smoke suite needs."""
    from tritonclient.grpc import model_config_pb2

    def datatype(value: int) -> str:
        wire = model_config_pb2.DataType.Name(value).removeprefix("TYPE_")
        return "BYTES" if wire == "STRING" else wire

    def tensors(items, optional: bool) -> tuple[TensorSpec, ...]:
        return tuple(
            TensorSpec(t.name, datatype(t.data_type), tuple(t.dims), bool(optional and t.optional)) for t in items
        )

    return ModelSpec(
        name=config.name or name,
        max_batch_size=config.max_batch_size,
        decoupled=config.model_transaction_policy.decoupled,
        dynamic_batching=config.HasField("dynamic_batching") and config.max_batch_size > 0,
        inputs=tensors(config.input, optional=True),
        outputs=tensors(config.output, optional=False),
    )


# ---- reference.py ---------------------------------------------------------------------------------------


def load_reference(project_root: Path) -> ModuleType:
    """``<project_root>/reference.py`` imported under a module name of its own (projects never collide)."""
    path = Path(project_root) / "reference.py"
    if not path.is_file():
        raise SmokeError(
            f"{path} does not exist; the smoke suite compares the model's answers with it.",
            "Every tbgen project has a reference.py (see docs/templates.md); render the project again or write one.",
        )
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_tbgen_reference_{digest}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise SmokeError(f"{path} fails to import: {type(err).__name__}: {err}", "Fix reference.py.") from err
    return module


def _check_reference_api(reference: ModuleType, decoupled: bool) -> None:
    wanted = ["make_inputs", "TOLERANCE", "responses" if decoupled else "compute"]
    missing = [name for name in wanted if not hasattr(reference, name)]
    if missing:
        raise SmokeError(
            f"{reference.__file__} lacks {', '.join(missing)}.",
            "reference.py defines make_inputs, TOLERANCE and compute (responses for decoupled models); "
            "see docs/templates.md.",
        )


# ---- Comparing answers ----------------------------------------------------------------------------------


def is_exact_dtype(dtype: np.dtype) -> bool:
    """Integers, booleans and bytes compare exactly; floats within the tolerance."""
    return not np.issubdtype(np.dtype(dtype), np.inexact)


def output_mismatches(
    got: dict[str, np.ndarray | None], expected: dict[str, np.ndarray], tolerance: dict[str, float]
) -> list[str]:
    """Why ``got`` differs from ``expected`` (one line per output), or [] when every output matches.

    Integers, booleans and bytes must be equal; floats must satisfy ``numpy.isclose`` with
    ``tolerance`` (``rtol``, ``atol``), NaN equal to NaN."""
    problems = []
    for name, want in expected.items():
        want = np.asarray(want)
        have = got.get(name)
        if have is None:
            problems.append(f"{name}: missing from the response")
            continue
        if have.dtype != want.dtype and not (have.dtype.kind in "OSU" and want.dtype.kind in "OSU"):
            problems.append(f"{name}: dtype {have.dtype}, expected {want.dtype}")
            continue
        if have.shape != want.shape:
            problems.append(f"{name}: shape {list(have.shape)}, expected {list(want.shape)}")
            continue
        if is_exact_dtype(want.dtype):
            bad = have != want
            how = "exactly"
        else:
            rtol, atol = float(tolerance.get("rtol", 0.0)), float(tolerance.get("atol", 0.0))
            bad = ~np.isclose(have, want, rtol=rtol, atol=atol, equal_nan=True)
            how = f"within rtol={rtol:g}, atol={atol:g}"
        bad = np.asarray(bad)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            problems.append(
                f"{name}: {int(bad.sum())} of {bad.size} elements differ {how}; first at {list(first)}: "
                f"got {have[first]!r}, expected {want[first]!r}"
            )
    return problems


def assert_outputs_match(
    got: dict[str, np.ndarray | None], expected: dict[str, np.ndarray], tolerance: dict[str, float], context: str
) -> None:
    problems = output_mismatches(got, expected, tolerance)
    if problems:
        raise AssertionError(f"{context}: outputs differ from reference.py: " + "; ".join(problems))


# ---- Clients ---------------------------------------------------------------------------------------------


def _client_module(protocol: str):
    if protocol == "http":
        import tritonclient.http as module
    else:
        import tritonclient.grpc as module
    return module


@contextlib.contextmanager
def _client(protocol: str, endpoints: Endpoints) -> Iterator[Any]:
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


def _timeout_kwargs(protocol: str) -> dict[str, float]:
    return {"client_timeout": REQUEST_TIMEOUT_S} if protocol == "grpc" else {}


def _tensors(protocol: str, inputs: dict[str, np.ndarray]) -> list:
    from tritonclient.utils import np_to_triton_dtype

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


def _infer(protocol: str, client: Any, spec: ModelSpec, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    module = _client_module(protocol)
    outputs = [
        module.InferRequestedOutput(t.name, binary_data=True)
        if protocol == "http"
        else module.InferRequestedOutput(t.name)
        for t in spec.outputs
    ]
    result = client.infer(spec.name, _tensors(protocol, inputs), outputs=outputs, **_timeout_kwargs(protocol))
    return {t.name: result.as_numpy(t.name) for t in spec.outputs}


def _assert_healthy(client: Any, spec: ModelSpec, protocol: str, after: str) -> None:
    kwargs = _timeout_kwargs(protocol)
    if not client.is_server_live(**kwargs):
        raise AssertionError(f"the server is not live after {after}")
    if not client.is_model_ready(spec.name, **kwargs):
        raise AssertionError(f"model '{spec.name}' is not ready after {after}")


def _error_text(err: Exception) -> str:
    message = err.message() if hasattr(err, "message") and callable(err.message) else str(err)
    return " ".join(str(message).split())


# ---- Checks: metadata and config --------------------------------------------------------------------------


def _check_metadata(spec: ModelSpec, protocol: str, endpoints: Endpoints) -> str:
    with _client(protocol, endpoints) as client:
        if protocol == "http":
            meta = client.get_model_metadata(spec.name)
        else:
            meta = client.get_model_metadata(spec.name, as_json=True, **_timeout_kwargs(protocol))
    problems = []
    if meta.get("name") != spec.name:
        problems.append(f"name {meta.get('name')!r}, expected {spec.name!r}")
    for kind, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        served = {t["name"]: t for t in meta.get(kind, [])}
        if set(served) != {t.name for t in tensors}:
            problems.append(f"{kind} {sorted(served)}, config.pbtxt declares {sorted(t.name for t in tensors)}")
            continue
        for tensor in tensors:
            got = served[tensor.name]
            shape = [int(d) for d in got.get("shape", [])]
            if got.get("datatype") != tensor.datatype:
                problems.append(f"{tensor.name}: datatype {got.get('datatype')}, expected {tensor.datatype}")
            if shape != spec.served_shape(tensor):
                problems.append(f"{tensor.name}: shape {shape}, expected {spec.served_shape(tensor)}")
    if problems:
        raise AssertionError("served metadata differs from config.pbtxt: " + "; ".join(problems))
    return f"{len(spec.inputs)} inputs, {len(spec.outputs)} outputs as in config.pbtxt"


def config_differences(local: Any, served: Any, path: str = "") -> list[str]:
    """Each field that ``local`` (config.pbtxt) sets and ``served`` has with another value.

    Fields the server fills in (defaults, auto-completed values) are not differences; repeated messages with
    a ``name`` are matched by name, others by position."""
    from google.protobuf.descriptor import FieldDescriptor

    problems = []
    for descriptor, value in local.ListFields():
        where = f"{path}.{descriptor.name}" if path else descriptor.name
        other = getattr(served, descriptor.name)
        is_message = descriptor.type == FieldDescriptor.TYPE_MESSAGE
        if descriptor.label == FieldDescriptor.LABEL_REPEATED and is_message and descriptor.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if key not in other:
                    problems.append(f"{where}[{key}]: missing as served")
                elif hasattr(item, "ListFields"):
                    problems += config_differences(item, other[key], f"{where}[{key}]")
                elif item != other[key]:
                    problems.append(f"{where}[{key}]: {item!r} in config.pbtxt, {other[key]!r} as served")
        elif descriptor.label == FieldDescriptor.LABEL_REPEATED and is_message:
            named = all(getattr(item, "name", "") for item in value)
            served_by_name = {getattr(item, "name", ""): item for item in other}
            for index, item in enumerate(value):
                key = item.name if named else index
                match = served_by_name.get(key) if named else (other[index] if index < len(other) else None)
                if match is None:
                    problems.append(f"{where}[{key}]: missing as served")
                else:
                    problems += config_differences(item, match, f"{where}[{key}]")
        elif is_message:
            if not served.HasField(descriptor.name):
                problems.append(f"{where}: set in config.pbtxt, missing as served")
            else:
                problems += config_differences(value, other, where)
        elif descriptor.label == FieldDescriptor.LABEL_REPEATED:
            if list(value) != list(other):
                problems.append(f"{where}: {list(value)} in config.pbtxt, {list(other)} as served")
        elif value != other:
            problems.append(f"{where}: {value!r} in config.pbtxt, {other!r} as served")
    return problems


def _check_config(spec: ModelSpec, local: ModelConfig, protocol: str, endpoints: Endpoints) -> str:
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    with _client(protocol, endpoints) as client:
        if protocol == "http":
            served = json_format.ParseDict(
                client.get_model_config(spec.name), model_config_pb2.ModelConfig(), ignore_unknown_fields=True
            )
        else:
            served = client.get_model_config(spec.name, **_timeout_kwargs(protocol)).config
    problems = config_differences(local, served)
    # proto3 does not list zero values as set: compare what the suite relies on explicitly.
    for name, mine, theirs in (
        ("max_batch_size", local.max_batch_size, served.max_batch_size),
        ("model_transaction_policy.decoupled", local.model_transaction_policy.decoupled,
         served.model_transaction_policy.decoupled),
        ("dynamic_batching", local.HasField("dynamic_batching"), served.HasField("dynamic_batching")),
    ):
        if mine != theirs and not any(p.startswith(name) for p in problems):
            problems.append(f"{name}: {mine!r} in config.pbtxt, {theirs!r} as served")
    if problems:
        raise AssertionError("served config differs from config.pbtxt: " + "; ".join(problems))
    return f"{len(local.ListFields())} fields of config.pbtxt as served"


# ---- Checks: reference.py against the config --------------------------------------------------------------


def _tensor_problems(kind: str, arrays: dict[str, np.ndarray], tensors: tuple[TensorSpec, ...], batch: int | None):
    from tritonclient.utils import np_to_triton_dtype

    problems = []
    declared = {t.name: t for t in tensors}
    required = {t.name for t in tensors if not t.optional}
    if not required <= set(arrays) or not set(arrays) <= set(declared):
        problems.append(f"{kind} {sorted(arrays)}, config.pbtxt declares {sorted(declared)}")
    for name, array in arrays.items():
        tensor = declared.get(name)
        if tensor is None:
            continue
        array = np.asarray(array)
        if np_to_triton_dtype(array.dtype) != tensor.datatype:
            problems.append(f"{kind} {name}: dtype {array.dtype}, config.pbtxt says {tensor.datatype}")
        dims = ((batch,) if batch is not None else ()) + tensor.dims
        if len(array.shape) != len(dims) or any(d != -1 and d != s for d, s in zip(dims, array.shape)):
            problems.append(f"{kind} {name}: shape {list(array.shape)}, config.pbtxt allows {list(dims)}")
    return problems


def _check_reference(spec: ModelSpec, reference: ModuleType, _endpoints: Endpoints) -> str:
    problems = []
    for batch in {spec.batch_sizes[0], spec.batch_sizes[-1]}:
        inputs = reference.make_inputs(batch, seed=0)
        problems += _tensor_problems("make_inputs", inputs, spec.inputs, batch)
        if spec.decoupled:
            for index, response in enumerate(reference.responses(inputs)):
                problems += _tensor_problems(f"responses[{index}]", response, spec.outputs, None)
        else:
            outputs = reference.compute(inputs)
            problems += _tensor_problems("compute", outputs, spec.outputs, batch)
    if problems:
        raise AssertionError("reference.py disagrees with config.pbtxt: " + "; ".join(sorted(set(problems))))
    return "make_inputs and " + ("responses" if spec.decoupled else "compute") + " agree with config.pbtxt"


# ---- Checks: inference ----------------------------------------------------------------------------------


def _check_infer(spec: ModelSpec, reference: ModuleType, protocol: str, batch_sizes: list, endpoints: Endpoints) -> str:
    with _client(protocol, endpoints) as client:
        for batch in batch_sizes:
            seed = batch or 0
            inputs = reference.make_inputs(batch, seed=seed)
            got = _infer(protocol, client, spec, inputs)
            where = f"batch size {batch}, seed {seed}" if batch is not None else f"seed {seed}"
            assert_outputs_match(got, reference.compute(inputs), reference.TOLERANCE, where)
    if batch_sizes == [None]:
        return "outputs equal reference.compute"
    if len(batch_sizes) == 1:
        return f"batch size {batch_sizes[0]}: outputs equal reference.compute"
    return f"batch sizes {batch_sizes[0]}..{batch_sizes[-1]}: outputs equal reference.compute"


def _model_counts(client: Any, spec: ModelSpec, protocol: str) -> tuple[int, int]:
    """(inference_count, execution_count) of the model, summed over its versions."""
    if protocol == "http":
        stats = client.get_inference_statistics(spec.name)
    else:
        stats = client.get_inference_statistics(spec.name, as_json=True, **_timeout_kwargs(protocol))
    models = stats.get("model_stats", [])
    return (
        sum(int(m.get("inference_count", 0)) for m in models),
        sum(int(m.get("execution_count", 0)) for m in models),
    )


def _concurrent_burst(spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints, count: int) -> None:
    """``count`` requests sent at once from as many threads, each with its own client; all answers checked."""
    batch = 1 if spec.max_batch_size > 0 else None
    failures: list[str] = []
    barrier = threading.Barrier(count)

    def send(seed: int) -> None:
        try:
            with _client(protocol, endpoints) as client:
                inputs = reference.make_inputs(batch, seed=seed)
                barrier.wait(timeout=REQUEST_TIMEOUT_S)
                got = _infer(protocol, client, spec, inputs)
                assert_outputs_match(got, reference.compute(inputs), reference.TOLERANCE, f"request {seed}")
        except Exception as err:  # noqa: BLE001 - collected and reported by the check
            failures.append(f"{type(err).__name__}: {_error_text(err)}" if not isinstance(err, AssertionError) else str(err))

    threads = [threading.Thread(target=send, args=(100 + i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REQUEST_TIMEOUT_S * 2)
    if any(thread.is_alive() for thread in threads):
        failures.append(f"no answer within {REQUEST_TIMEOUT_S * 2:.0f} s")
    if failures:
        raise AssertionError(f"{len(failures)} of {count} concurrent requests failed: " + "; ".join(failures[:3]))


def _check_concurrent(spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints) -> str:
    count = max(8, 2 * spec.max_batch_size)
    merges = spec.dynamic_batching and spec.max_batch_size > 1
    attempts = 3 if merges else 1
    with _client(protocol, endpoints) as client:
        for _ in range(attempts):
            inferences, executions = _model_counts(client, spec, protocol)
            _concurrent_burst(spec, reference, protocol, endpoints, count)
            after = _model_counts(client, spec, protocol)
            inferences, executions = after[0] - inferences, after[1] - executions
            if not merges or executions < inferences:
                break
    if merges and executions >= inferences:
        raise AssertionError(
            f"dynamic batching merged no requests in {attempts} bursts of {count}: the last burst ran "
            f"{inferences} inferences in {executions} executions"
        )
    merged = f", dynamic batching ran {inferences} inferences in {executions} executions" if merges else ""
    return f"{count} concurrent requests answered correctly{merged}"


# ---- Checks: decoupled models over gRPC streaming ---------------------------------------------------------


class _Stream:
    """One gRPC stream: requests with ids, and each request's results up to its final flag."""

    def __init__(self, endpoints: Endpoints) -> None:
        import tritonclient.grpc as grpcclient

        self._grpcclient = grpcclient
        self._client = grpcclient.InferenceServerClient(endpoints.grpc_url)
        self._results: queue.Queue = queue.Queue()
        self._client.start_stream(callback=lambda result, error: self._results.put((result, error)))
        self._closed = False

    def send(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> None:
        self._client.async_stream_infer(
            model, _tensors("grpc", inputs), request_id=request_id, enable_empty_final_response=True
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
                raise AssertionError(f"the stream returned an error: {_error_text(error)}")
            response = result.get_response()
            if response.id not in results:
                raise AssertionError(f"a response for unknown request id {response.id!r}")
            results[response.id].append(result)
            if _is_final(result):
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


def _is_final(result: Any) -> bool:
    parameter = result.get_response().parameters.get("triton_final_response")
    return bool(parameter is not None and parameter.bool_param)


def _assert_stream_matches(spec: ModelSpec, reference: ModuleType, results: list, inputs: dict, context: str) -> None:
    """The results of one request equal reference.responses(), in order, and the last one is flagged final."""
    expected = reference.responses(inputs)
    if not results or not _is_final(results[-1]):
        raise AssertionError(f"{context}: the stream ended without a response flagged final")
    data = [r for r in results if any(r.as_numpy(t.name) is not None for t in spec.outputs)]
    early_final = [i for i, r in enumerate(results[:-1]) if _is_final(r)]
    if early_final:
        raise AssertionError(f"{context}: response {early_final[0]} is flagged final before the stream ended")
    if len(data) != len(expected):
        raise AssertionError(f"{context}: {len(data)} responses with data, reference.responses gives {len(expected)}")
    for index, (result, want) in enumerate(zip(data, expected)):
        got = {name: result.as_numpy(name) for name in want}
        assert_outputs_match(got, want, reference.TOLERANCE, f"{context}, response {index}")


def _check_stream(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    counts = []
    with _Stream(endpoints) as stream:
        for seed in (0, 1):
            inputs = reference.make_inputs(None, seed=seed)
            stream.send(spec.name, inputs, request_id=f"seed{seed}")
            results = stream.collect([f"seed{seed}"])[f"seed{seed}"]
            _assert_stream_matches(spec, reference, results, inputs, f"seed {seed}")
            counts.append(len(results) - 1)
    return f"responses {counts} in order, then the final flag"


def _check_stream_many_requests(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    requests = {f"r{seed}": reference.make_inputs(None, seed=seed) for seed in range(2, 6)}
    with _Stream(endpoints) as stream:
        for request_id, inputs in requests.items():
            stream.send(spec.name, inputs, request_id=request_id)
        results = stream.collect(list(requests))
    for request_id, inputs in requests.items():
        _assert_stream_matches(spec, reference, results[request_id], inputs, f"request {request_id}")
    return f"{len(requests)} requests on one stream, each answered in order"


def _check_concurrent_streams(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    count = 4
    failures: list[str] = []

    def run(seed: int) -> None:
        try:
            with _Stream(endpoints) as stream:
                inputs = reference.make_inputs(None, seed=seed)
                stream.send(spec.name, inputs, request_id=f"c{seed}")
                results = stream.collect([f"c{seed}"])[f"c{seed}"]
                _assert_stream_matches(spec, reference, results, inputs, f"stream {seed}")
        except Exception as err:  # noqa: BLE001 - collected and reported by the check
            failures.append(str(err) if isinstance(err, AssertionError) else f"{type(err).__name__}: {_error_text(err)}")

    threads = [threading.Thread(target=run, args=(10 + i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REQUEST_TIMEOUT_S * 2)
    if any(thread.is_alive() for thread in threads):
        failures.append(f"a stream got no final response within {REQUEST_TIMEOUT_S * 2:.0f} s")
    if failures:
        raise AssertionError(f"{len(failures)} of {count} concurrent streams failed: " + "; ".join(failures[:3]))
    return f"{count} concurrent streams answered correctly"


def _check_stream_cancel(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    inputs = reference.make_inputs(None, seed=7)
    expected = len(reference.responses(inputs))
    stream = _Stream(endpoints)
    try:
        stream.send(spec.name, inputs, request_id="cancelled")
        _result, error = stream.next()
        if error is not None:
            raise AssertionError(f"the request to be cancelled failed: {_error_text(error)}")
        received = 1
    finally:
        stream.close(cancel=True)
    # The model keeps serving: a fresh stream gets its whole answer.
    with _client("grpc", endpoints) as client:
        _assert_healthy(client, spec, "grpc", "a stream cancelled mid-way")
    with _Stream(endpoints) as fresh:
        inputs = reference.make_inputs(None, seed=8)
        fresh.send(spec.name, inputs, request_id="after")
        _assert_stream_matches(spec, reference, fresh.collect(["after"])["after"], inputs, "request after the cancel")
    when = "mid-stream" if received < expected else "after its last data response"
    return f"cancelled {when} ({received} of {expected} responses received); later streams answered"


# ---- Checks: bad requests ---------------------------------------------------------------------------------


def _wrong_dtype(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "OSU":
        return np.zeros(array.shape, dtype=np.int32)
    return array.astype(np.float32 if array.dtype == np.float64 else np.float64)


def bad_requests(spec: ModelSpec, reference: ModuleType) -> dict[str, dict[str, np.ndarray]]:
    """The malformed variants of a valid request that every model must refuse, by name."""
    batch = spec.batch_sizes[0]
    valid = {name: np.asarray(array) for name, array in reference.make_inputs(batch, seed=0).items()}
    first = next(iter(t.name for t in spec.inputs if t.name in valid))
    required = next((t.name for t in spec.inputs if not t.optional and t.name in valid), None)
    bad = {
        "wrong dtype": {**valid, first: _wrong_dtype(valid[first])},
        "wrong shape": {**valid, first: np.stack([valid[first]] * 2, axis=-1)},
        "unknown input": {**valid, UNKNOWN_INPUT: valid[first]},
    }
    if required is not None:
        bad["missing input"] = {name: array for name, array in valid.items() if name != required}
    if spec.max_batch_size > 0:
        too_big = spec.max_batch_size + 1
        bad["batch larger than max"] = reference.make_inputs(too_big, seed=0)
    return bad


def _check_bad_request(spec: ModelSpec, inputs: dict[str, np.ndarray], what: str, protocol: str,
                       endpoints: Endpoints) -> str:
    from tritonclient.utils import InferenceServerException

    if spec.decoupled:
        with _Stream(endpoints) as stream:
            stream.send(spec.name, inputs, request_id="bad")
            _result, error = stream.next()
        if error is None:
            raise AssertionError(f"a request with {what} was answered instead of refused")
        message = _error_text(error)
    else:
        with _client(protocol, endpoints) as client:
            try:
                _infer(protocol, client, spec, inputs)
            except InferenceServerException as err:
                message = _error_text(err)
            else:
                raise AssertionError(f"a request with {what} was answered instead of refused")
    with _client(protocol, endpoints) as client:
        _assert_healthy(client, spec, protocol, f"a request with {what}")
    return f"refused: {message[:120]}"


def _check_decoupled_refuses_unary(spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints) -> str:
    from tritonclient.utils import InferenceServerException

    with _client(protocol, endpoints) as client:
        try:
            _infer(protocol, client, spec, reference.make_inputs(None, seed=0))
        except InferenceServerException as err:
            message = _error_text(err)
        else:
            raise AssertionError("a decoupled model answered a non-streaming request")
        _assert_healthy(client, spec, protocol, "a non-streaming request")
    return f"refused: {message[:120]}"


# ---- Planning and running -------------------------------------------------------------------------------


def load_model_spec(project: Project, model: ModelEntry) -> tuple[ModelSpec, ModelConfig]:
    from triton_backend_gen.model_config import load_model_config

    path = project.model_repository / model.name / "config.pbtxt"
    if not path.is_file():
        raise SmokeError(f"{path} does not exist.", f"tbgen.toml lists model '{model.name}'; add its config.pbtxt.")
    config = load_model_config(path)
    return model_spec(config, model.name), config


def plan_smoke(project: Project, model: ModelEntry | None = None) -> list[SmokeCheck]:
    """The checks for ``model`` (every model of the project when None), from config.pbtxt and reference.py."""
    models = [model] if model is not None else list(project.models)
    if not models:
        raise SmokeError(f"{project.root / 'tbgen.toml'} lists no models.", "Add a [[models]] entry.")
    reference = load_reference(project.root)
    plan = []
    for entry in models:
        spec, config = load_model_spec(project, entry)
        _check_reference_api(reference, spec.decoupled)
        prefix = f"{spec.name}: " if len(models) > 1 else ""
        plan += [SmokeCheck(prefix + c.name, c.protocol, c.run) for c in _plan_model(spec, config, reference)]
    return plan


def _plan_model(spec: ModelSpec, config: ModelConfig, reference: ModuleType) -> list[SmokeCheck]:
    plan = [SmokeCheck("reference.py matches config.pbtxt", "-", partial(_check_reference, spec, reference))]
    for protocol in ("http", "grpc"):
        plan.append(SmokeCheck("metadata", protocol, partial(_check_metadata, spec, protocol)))
        plan.append(SmokeCheck("config", protocol, partial(_check_config, spec, config, protocol)))
    if spec.decoupled:
        plan += [
            SmokeCheck("stream", "grpc", partial(_check_stream, spec, reference)),
            SmokeCheck("several requests on one stream", "grpc", partial(_check_stream_many_requests, spec, reference)),
            SmokeCheck("concurrent streams", "grpc", partial(_check_concurrent_streams, spec, reference)),
            SmokeCheck("stream cancelled mid-way", "grpc", partial(_check_stream_cancel, spec, reference)),
        ]
        for protocol, what in (("http", "HTTP /infer"), ("grpc", "unary gRPC infer")):
            plan.append(SmokeCheck(f"refuses {what} (decoupled)", protocol,
                                   partial(_check_decoupled_refuses_unary, spec, reference, protocol)))
        bad_protocols = ("grpc",)
    else:
        for protocol in ("http", "grpc"):
            plan.append(SmokeCheck("infer", protocol, partial(_check_infer, spec, reference, protocol,
                                                               [spec.batch_sizes[0]])))
            if spec.max_batch_size > 1:
                plan.append(SmokeCheck(f"batch sizes 1..{spec.max_batch_size}", protocol,
                                       partial(_check_infer, spec, reference, protocol, spec.batch_sizes)))
            name = "concurrent requests" + (" (dynamic batching)" if spec.dynamic_batching else "")
            plan.append(SmokeCheck(name, protocol, partial(_check_concurrent, spec, reference, protocol)))
        bad_protocols = ("http", "grpc")
    for what, inputs in bad_requests(spec, reference).items():
        for protocol in bad_protocols:
            plan.append(SmokeCheck(f"bad request: {what}", protocol,
                                   partial(_check_bad_request, spec, inputs, what, protocol)))
    return plan


def run_smoke(
    plan: list[SmokeCheck],
    endpoints: Endpoints,
    is_healthy: Callable[[], bool] | None = None,
    progress: Callable[[SmokeResult], None] | None = None,
) -> list[SmokeResult]:
    """Run every check in order. ``is_healthy`` (e.g. "the server process is alive and answers") is asked
    after each check; once it says no, that check fails and the remaining ones are reported as not run."""
    results = []
    broken_after: str | None = None
    for check in plan:
        if broken_after is not None:
            result = SmokeResult(check.name, check.protocol, False,
                                 f"not run: the server stopped being healthy during '{broken_after}'", 0.0)
        else:
            start = time.monotonic()
            try:
                passed, detail = True, check.run(endpoints)
            except AssertionError as err:
                passed, detail = False, str(err) or "assertion failed"
            except Exception as err:  # noqa: BLE001 - a check that breaks is a failed check, with its reason
                passed, detail = False, f"{type(err).__name__}: {_error_text(err)}"
            if is_healthy is not None and not is_healthy():
                broken_after = check.name
                passed, detail = False, f"the server is not healthy after this check ({detail})"
            result = SmokeResult(check.name, check.protocol, passed, detail, time.monotonic() - start)
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def write_junit_xml(results: list[SmokeResult], path: Path, suite: str) -> None:
    """``results`` as a JUnit XML report (one testcase per result) at ``path``."""
    failures = sum(1 for r in results if not r.passed)
    root = ET.Element("testsuites", tests=str(len(results)), failures=str(failures))
    node = ET.SubElement(
        root, "testsuite", name=suite, tests=str(len(results)), failures=str(failures), errors="0",
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        name = f"{result.name} [{result.protocol}]" if result.protocol != "-" else result.name
        case = ET.SubElement(node, "testcase", classname=suite, name=name, time=f"{result.seconds:.3f}")
        if result.passed:
            ET.SubElement(case, "system-out").text = result.detail
        else:
            failure = ET.SubElement(case, "failure", message=result.detail.splitlines()[0][:500] if result.detail else "")
            failure.text = result.detail
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


# ---- The fuzzer -------------------------------------------------------------------------------------------
#
# Each case is planned (kind, protocol, seed) without building anything; its request is made when it runs,
# from a random generator seeded with (seed, index), so a plan is cheap and a run is reproducible.

FUZZ_TIMEOUT_S = 20.0  # the longest a case may wait for its answer
# Payload sizes of the "huge tensor" cases. The 2.51 server's gRPC frontend keeps the buffers of the
# largest messages it has parsed in its pools (about GRPC_POOL_FACTOR times the largest, for good; HTTP
# keeps nothing), so gRPC gets smaller ones: the memory check must tell such pools from a leak.
HUGE_MIB = {"http": (4, 16, 48), "grpc": (1, 4, 8)}
GRPC_POOL_FACTOR = 24
_DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
              "FP16", "FP32", "FP64", "BF16", "BYTES")
_ITEM_SIZE = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
              "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8, "BYTES": 1}
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
}
_CLEAN_ENDINGS = {"cancelled mid-flight": "cancelled", "client disconnects": "disconnected"}


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


@dataclass
class FuzzReport:
    """What a fuzz run sent, how the server answered, and its memory: bytes of private resident memory of
    the server and its stubs (:func:`memory_of`), before (after a warm-up) and at the end."""

    seed: int
    planned: int  # cases in the plan
    requests: int = 0  # cases sent
    outcomes: Counter = field(default_factory=Counter)  # "ok", "http 400", "grpc INVALID_ARGUMENT", ...
    kinds: Counter = field(default_factory=Counter)  # cases sent per kind
    failures: list[str] = field(default_factory=list)
    rss_before: int | None = None
    rss_after: int | None = None
    rss_limit: int | None = None
    healthy: bool = True
    truncated: bool = False  # the time limit stopped the run early
    seconds: float = 0.0

    @property
    def memory_ok(self) -> bool:
        return self.rss_after is None or self.rss_limit is None or self.rss_after <= self.rss_limit

    @property
    def passed(self) -> bool:
        return not self.failures and self.healthy and self.memory_ok

    @property
    def errors(self) -> Counter:
        """The refusals, by how the server answered."""
        return Counter({k: v for k, v in self.outcomes.items() if k not in ("ok", "cancelled", "disconnected")})

    def memory_line(self) -> str:
        if self.rss_before is None or self.rss_after is None:
            return "server memory not measured (no pid)"
        mib = 1024 * 1024
        verdict = "within" if self.memory_ok else "ABOVE"
        return (f"server memory (private RSS of the server and its stubs): {self.rss_before / mib:.1f} MiB before, "
                f"{self.rss_after / mib:.1f} MiB after ({verdict} the limit of {(self.rss_limit or 0) / mib:.1f} MiB)")

    def summary(self) -> str:
        sent = f"{self.requests} of {self.planned} requests" if self.truncated else f"{self.requests} requests"
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(self.outcomes.items(), key=lambda kv: -kv[1]))
        lines = [f"fuzz seed {self.seed}: {sent} in {self.seconds:.1f} s; {outcomes}", self.memory_line()]
        if self.truncated:
            lines.append("stopped early: the time limit was reached or the server stopped answering")
        if not self.healthy:
            lines.append("the server was not healthy afterwards")
        lines += self.failures[:20]
        return "\n".join(lines)

    def as_results(self) -> list[SmokeResult]:
        """The report as results for the table and JUnit: one per failure, plus the totals."""
        results = [SmokeResult(f"fuzz {failure.split(':', 1)[0]}", "-", False, failure, 0.0)
                   for failure in self.failures]
        results.append(SmokeResult(f"fuzz: {self.planned} malformed requests", "-", self.passed,
                                   self.summary(), self.seconds))
        return results


def plan_fuzz(project: Project, count: int, seed: int = 0, model: ModelEntry | None = None) -> list[FuzzCase]:
    """``count`` fuzz cases spread over the project's models (or ``model``), deterministic for ``seed``."""
    models = [model] if model is not None else list(project.models)
    if not models:
        raise SmokeError(f"{project.root / 'tbgen.toml'} lists no models.", "Add a [[models]] entry.")
    reference = load_reference(project.root)
    specs = []
    for entry in models:
        spec, _ = load_model_spec(project, entry)
        _check_reference_api(reference, spec.decoupled)
        specs.append(spec)
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        spec = specs[index % len(specs)]
        kinds = [k for k in FUZZ_KINDS if _kind_applies(k, spec)]
        kind = rng.choices(kinds, weights=[FUZZ_KINDS[k][0] for k in kinds])[0]
        protocols = FUZZ_KINDS[kind][1]
        # HTTP refuses every inference request to a decoupled model up front: send it a quarter only.
        weights = [1 if spec.decoupled and p == "http" else 3 for p in protocols]
        protocol = rng.choices(protocols, weights=weights)[0]
        cases.append(FuzzCase(index, kind, protocol, rng.randrange(2**31), seed, spec, reference))
    return cases


def _kind_applies(kind: str, spec: ModelSpec) -> bool:
    if kind == "batch too large":
        return spec.max_batch_size > 0
    if kind == "garbage values":
        return not spec.decoupled  # a decoupled model's inputs may say how long to stream: random ones can hang
    return True


def memory_of(pid: int) -> int | None:
    """Private resident memory (bytes, ``RssAnon`` in /proc) of ``pid`` and its descendants (the python
    stubs); None when ``pid`` is gone.

    Shared memory is left out: the python backend's shm pool is mapped by the server and by each stub (it
    would count twice) and it grows by design up to its configured size."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            if current == pid:
                return None
            continue
        for line in status.splitlines():
            if line.startswith("RssAnon:"):
                total += int(line.split()[1]) * 1024
        todo += children.get(current, [])
    return total


def run_fuzz(
    cases: list[FuzzCase],
    endpoints: Endpoints,
    server_pid: int | None = None,
    is_healthy: Callable[[], bool] | None = None,
    time_limit_s: float = 300.0,
    progress: Callable[[FuzzCase, str], None] | None = None,
) -> FuzzReport:
    """Send every case (stopping at ``time_limit_s``) and judge the server.

    Pass = every case answered or cleanly refused (valid ones answered correctly), the server healthy at
    the end, and its memory (``server_pid`` and its stubs, :func:`memory_of`) back under
    :func:`memory_limit` of its level before, which is taken after a warm-up (valid requests and one
    largest "huge tensor" per protocol: first requests allocate what a leak check must not count)."""
    report = FuzzReport(seed=cases[0].plan_seed if cases else 0, planned=len(cases))
    models = {case.model.name: case for case in cases}
    start = time.monotonic()
    for case in models.values():
        _warm_up(case, endpoints)
    if server_pid is not None:
        report.rss_before = memory_of(server_pid)
    for case in cases:
        if time.monotonic() - start > time_limit_s:
            report.truncated = True
            break
        report.requests += 1
        report.kinds[case.kind] += 1
        try:
            outcome = run_fuzz_case(case, endpoints)
        except AssertionError as err:
            outcome = "failed"
            report.failures.append(f"{case.label}: {err}")
        except Exception as err:  # noqa: BLE001 - an unexpected client-side failure is a failed case
            outcome = "failed"
            report.failures.append(f"{case.label}: {type(err).__name__}: {_error_text(err)}")
        report.outcomes[outcome] += 1
        if progress is not None:
            progress(case, outcome)
        if case.index % 25 == 24 and not _server_answers(endpoints, models):
            report.failures.append(f"{case.label}: the server stopped answering health requests after this case")
            report.truncated = True
            break
    report.healthy = _server_answers(endpoints, models) and (is_healthy is None or is_healthy())
    if report.healthy:
        for case in models.values():
            try:
                _fuzz_valid(case, random.Random(1), "grpc" if case.model.decoupled else "http", endpoints)
            except Exception as err:  # noqa: BLE001 - reported as the reason the server is not healthy
                report.healthy = False
                report.failures.append(f"after fuzzing, a valid request to '{case.model.name}' failed: {err}")
    if server_pid is not None and report.rss_before is not None:
        report.rss_limit = memory_limit(report.rss_before)
        deadline = time.monotonic() + 10  # freed memory returns with a delay
        while True:
            report.rss_after = memory_of(server_pid)
            if report.rss_after is None or report.rss_after <= report.rss_limit or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    report.seconds = time.monotonic() - start
    return report


def memory_limit(before: int) -> int:
    """The most memory the server may hold after fuzzing when it held ``before``: 25% and 64 MiB more for
    allocator noise, plus the gRPC frontend's pools (GRPC_POOL_FACTOR times the largest gRPC request).

    Coarse by necessity: it catches a backend that leaks its requests' tensors (a few hundred requests of
    the sizes fuzzed), not a leak of a few bytes per request."""
    mib = 1024 * 1024
    return int(before * 1.25 + 64 * mib + GRPC_POOL_FACTOR * max(HUGE_MIB["grpc"]) * mib)


def _warm_up(case: FuzzCase, endpoints: Endpoints) -> None:
    rng = random.Random(0)
    for protocol in ("http", "grpc"):
        for _ in range(3):
            _fuzz_valid(case, rng, protocol, endpoints)
        model, wires = fuzz_tensors(replace(case, kind="huge tensor", protocol=protocol), rng,
                                     huge_mib=max(HUGE_MIB[protocol]))
        _send_wire(protocol, endpoints, model, wires, case.model, decoupled=case.model.decoupled)


def _server_answers(endpoints: Endpoints, models: dict[str, FuzzCase]) -> bool:
    host, port = endpoints.http_url.rsplit(":", 1)
    paths = ["/v2/health/live"] + [f"/v2/models/{name}/ready" for name in models]
    try:
        for path in paths:
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            try:
                connection.request("GET", path)
                if connection.getresponse().status != 200:
                    return False
            finally:
                connection.close()
    except OSError:
        return False
    return True


def run_fuzz_case(case: FuzzCase, endpoints: Endpoints) -> str:
    """Send one case; its outcome ("ok", "http 400", "grpc INVALID_ARGUMENT", "cancelled", "disconnected").

    Raises AssertionError when the server did not answer, or answered a valid request wrongly."""
    rng = random.Random(case.seed)
    if case.kind == "valid":
        return _fuzz_valid(case, rng, case.protocol, endpoints)
    if case.kind == "client disconnects":
        return _fuzz_disconnect(rng, case.protocol, endpoints)
    if case.kind == "malformed message":
        return _fuzz_malformed(case, rng, endpoints)
    if case.kind == "cancelled mid-flight":
        return _fuzz_cancel(case, rng, endpoints)
    model, tensors = fuzz_tensors(case, rng)
    return _send_wire(case.protocol, endpoints, model, tensors, case.model, decoupled=case.model.decoupled)


# -- building the tensors of a case


@dataclass
class _Wire:
    """One input tensor as it goes on the wire: what it claims to be and its raw bytes."""

    name: str
    datatype: str
    shape: list[int]
    payload: bytes


def _wire_from_arrays(inputs: dict[str, np.ndarray]) -> list[_Wire]:
    from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

    wires = []
    for name, array in inputs.items():
        array = np.asarray(array)
        datatype = np_to_triton_dtype(array.dtype)
        payload = serialize_byte_tensor(array).tobytes() if datatype == "BYTES" else array.tobytes()
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
    spec, kind = case.model, case.kind
    batch = rng.choice(spec.batch_sizes)
    wires = _wire_from_arrays(case.reference.make_inputs(batch, seed=rng.randrange(1000)))
    target = rng.randrange(len(wires))
    wire = wires[target]
    if kind == "garbage values":
        for w in wires:
            w.payload = rng.randbytes(len(w.payload)) if w.datatype != "BYTES" else _garbage_bytes_payload(rng, 4)
    elif kind == "wrong dtype":
        wire.datatype = rng.choice([d for d in _DATATYPES if d != wire.datatype] + ["FP8", "COMPLEX64", ""])
        wire.payload = rng.randbytes(_element_count(wire.shape) * _ITEM_SIZE.get(wire.datatype, 4))
    elif kind == "wrong shape":
        wire.shape = [rng.choice(_ODD_DIMS) for _ in range(rng.randrange(0, 6))]
        count = _element_count(wire.shape)
        size = count * _ITEM_SIZE.get(wire.datatype, 4) if 0 <= count <= 2**18 else rng.randrange(0, 256)
        wire.payload = rng.randbytes(size)
    elif kind == "size mismatch":
        size = len(wire.payload)
        wire.payload = rng.randbytes(rng.choice([0, 1, max(size - rng.randrange(1, 9), 0), size + rng.randrange(1, 9),
                                                 size * 2 + 1]))
    elif kind == "missing input":
        del wires[target]
    elif kind == "unknown input":
        name = rng.choice([UNKNOWN_INPUT, "", "x" * 4096, "INPUT\u00e9\u0000", wire.name.lower() + "_"])
        wires.append(_Wire(name, wire.datatype, wire.shape, wire.payload))
    elif kind == "duplicate input":
        wires.append(_Wire(wire.name, wire.datatype, list(wire.shape), wire.payload))
    elif kind == "batch too large":
        too_big = spec.max_batch_size + rng.randrange(1, 4 * spec.max_batch_size + 1)
        wires = _wire_from_arrays(case.reference.make_inputs(too_big, seed=rng.randrange(1000)))
    elif kind == "empty tensor":
        for w in wires:
            w.shape = [0] + w.shape[1:] if w.shape else [0]
            w.payload = b""
    elif kind == "huge tensor":
        size = (huge_mib or rng.choice(HUGE_MIB[case.protocol])) * 1024 * 1024
        item = _ITEM_SIZE.get(wire.datatype, 4)
        rest = _element_count(wire.shape[1:]) if len(wire.shape) > 1 else 1
        wire.shape = [max(size // (item * max(rest, 1)), 1)] + wire.shape[1:]
        wire.payload = bytes(_element_count(wire.shape) * item)  # zeros: cheap to make, same size on the wire
    elif kind == "garbage BYTES":
        wire.datatype = "BYTES"
        wire.payload = _garbage_bytes_payload(rng, _element_count(wire.shape) if len(wire.shape) < 4 else 1)
    elif kind == "unknown model":
        return rng.choice(["tbgen_no_such_model", spec.name + "_", "../" + spec.name, spec.name.upper() + "\u00e9"]), wires
    else:
        raise ValueError(f"unknown fuzz kind {kind!r}")
    return spec.name, wires


# -- sending


def _split(url: str) -> tuple[str, int]:
    host, port = url.rsplit(":", 1)
    return host, int(port)


def _http_body(spec: ModelSpec, wires: list[_Wire]) -> tuple[bytes, dict[str, str]]:
    header = {
        "inputs": [
            {"name": w.name, "datatype": w.datatype, "shape": w.shape, "parameters": {"binary_data_size": len(w.payload)}}
            for w in wires
        ],
        "outputs": [{"name": t.name, "parameters": {"binary_data": True}} for t in spec.outputs],
    }
    head = json.dumps(header).encode()
    return head + b"".join(w.payload for w in wires), {
        "Inference-Header-Content-Length": str(len(head)),
        "Content-Type": "application/octet-stream",
    }


def _http_post(endpoints: Endpoints, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, Any]:
    """(status, body, response headers); AssertionError when the server does not answer."""
    connection = http.client.HTTPConnection(*_split(endpoints.http_url), timeout=FUZZ_TIMEOUT_S)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), response.headers
    except TimeoutError:
        raise AssertionError(f"no HTTP answer within {FUZZ_TIMEOUT_S:.0f} s") from None
    except (ConnectionError, http.client.HTTPException) as err:
        raise AssertionError(f"the server dropped the HTTP connection without answering ({type(err).__name__})") from None
    finally:
        connection.close()


def _infer_path(model: str) -> str:
    from urllib.parse import quote

    return f"/v2/models/{quote(model, safe='')}/infer"


def _grpc_stub(endpoints: Endpoints):
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc.insecure_channel(endpoints.grpc_url, options=[
        ("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1)])
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _grpc_request(model: str, spec: ModelSpec, wires: list[_Wire], request_id: str = ""):
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
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
    import grpc

    code = err.code() if isinstance(err, grpc.RpcError) else None
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise AssertionError(f"no gRPC answer: {code.name} ({err.details()})")
    return f"grpc {code.name if code else type(err).__name__}"


def _send_wire(protocol: str, endpoints: Endpoints, model: str, wires: list[_Wire], spec: ModelSpec,
               decoupled: bool) -> str:
    """Send one request; "ok" or how it was refused."""
    if protocol == "http":
        status, _, _ = _http_post(endpoints, _infer_path(model), *_http_body(spec, wires))
        return "ok" if status == 200 else f"http {status}"
    if decoupled:
        outcome, _ = _grpc_stream_once(endpoints, _grpc_request(model, spec, wires, "fuzz"))
        return outcome
    channel, stub = _grpc_stub(endpoints)
    try:
        stub.ModelInfer(_grpc_request(model, spec, wires), timeout=FUZZ_TIMEOUT_S)
        return "ok"
    except Exception as err:  # noqa: BLE001 - grpc.RpcError, classified
        return _grpc_outcome(err)
    finally:
        channel.close()


def _grpc_stream_once(endpoints: Endpoints, request, cancel_after: float | None = None) -> tuple[str, list]:
    """Send one request on a fresh stream and read until its final response or an error.

    With ``cancel_after`` (seconds), the stream is cancelled then instead ("cancelled", what came before)."""
    import grpc

    channel, stub = _grpc_stub(endpoints)
    responses: list = []
    try:
        call = stub.ModelStreamInfer(iter([request]), timeout=FUZZ_TIMEOUT_S)
        if cancel_after is not None:
            timer = threading.Timer(cancel_after, call.cancel)
            timer.start()
        outcome = None
        try:
            # The request iterator is exhausted: the client has half-closed the stream, so the server ends
            # it once the request is done. Reading on to that end (not cancelling a finished stream) matters:
            # the 2.51 server's shutdown waits 15 s for a stream that was cancelled after its final response.
            for message in call:
                if outcome is not None:
                    continue
                if message.error_message:
                    outcome = "stream error"
                    continue
                responses.append(message.infer_response)
                final = message.infer_response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    outcome = "ok"
        except grpc.RpcError as err:
            if cancel_after is not None and err.code() == grpc.StatusCode.CANCELLED:
                return "cancelled", responses
            if outcome is None:
                return _grpc_outcome(err), responses
        finally:
            if cancel_after is not None:
                timer.cancel()
        if outcome is not None:
            return outcome, responses
        if cancel_after is not None:
            return "cancelled", responses
        raise AssertionError("the stream ended without a final response")
    finally:
        channel.close()


# -- the kinds that need more than tensors


def _fuzz_valid(case: FuzzCase, rng: random.Random, protocol: str, endpoints: Endpoints) -> str:
    """A valid request; its answer must equal reference.py's."""
    from tritonclient.utils import triton_to_np_dtype

    spec, reference = case.model, case.reference
    batch = rng.choice(spec.batch_sizes)
    inputs = reference.make_inputs(batch, seed=rng.randrange(1000))
    wires = _wire_from_arrays(inputs)
    if spec.decoupled:
        if protocol == "http":  # refused by design: HTTP does not serve decoupled models
            return _send_wire("http", endpoints, spec.name, wires, spec, decoupled=True)
        outcome, responses = _grpc_stream_once(endpoints, _grpc_request(spec.name, spec, wires, "valid"))
        if outcome != "ok":
            raise AssertionError(f"a valid request was refused ({outcome})")
        data = [r for r in responses if r.outputs]
        expected = reference.responses(inputs)
        if len(data) != len(expected):
            raise AssertionError(f"{len(data)} responses with data, reference.responses gives {len(expected)}")
        for index, (response, want) in enumerate(zip(data, expected)):
            got = _decode_grpc_outputs(response, triton_to_np_dtype)
            assert_outputs_match(got, want, reference.TOLERANCE, f"response {index}")
        return "ok"
    if protocol == "http":
        status, body, headers = _http_post(endpoints, _infer_path(spec.name), *_http_body(spec, wires))
        if status != 200:
            raise AssertionError(f"a valid request was refused: HTTP {status} {body[:200]!r}")
        got = _decode_http_outputs(body, headers, triton_to_np_dtype)
    else:
        channel, stub = _grpc_stub(endpoints)
        try:
            response = stub.ModelInfer(_grpc_request(spec.name, spec, wires), timeout=FUZZ_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - grpc.RpcError
            raise AssertionError(f"a valid request was refused: {_grpc_outcome(err)}") from None
        finally:
            channel.close()
        got = _decode_grpc_outputs(response, triton_to_np_dtype)
    assert_outputs_match(got, reference.compute(inputs), reference.TOLERANCE, f"batch size {batch}")
    return "ok"


def _decode(datatype: str, shape: list[int], raw: bytes, to_np) -> np.ndarray:
    from tritonclient.utils import deserialize_bytes_tensor

    if datatype == "BYTES":
        return deserialize_bytes_tensor(raw).reshape(shape)
    return np.frombuffer(raw, dtype=to_np(datatype)).reshape(shape)


def _decode_http_outputs(body: bytes, headers: Any, to_np) -> dict[str, np.ndarray]:
    length = int(headers.get("Inference-Header-Content-Length", len(body)))
    header, offset, outputs = json.loads(body[:length]), length, {}
    for output in header.get("outputs", []):
        size = int(output.get("parameters", {}).get("binary_data_size", 0))
        if "data" in output:
            outputs[output["name"]] = np.array(output["data"], dtype=to_np(output["datatype"])).reshape(output["shape"])
        else:
            outputs[output["name"]] = _decode(output["datatype"], output["shape"], body[offset:offset + size], to_np)
            offset += size
    return outputs


def _decode_grpc_outputs(response, to_np) -> dict[str, np.ndarray]:
    return {
        output.name: _decode(output.datatype, list(output.shape), raw, to_np)
        for output, raw in zip(response.outputs, response.raw_output_contents)
    }


def _fuzz_cancel(case: FuzzCase, rng: random.Random, endpoints: Endpoints) -> str:
    """A valid request abandoned before its answer: the socket closed (HTTP), a deadline or a cancelled
    stream (gRPC). "cancelled", or "ok" when the answer beat the cancellation."""
    import grpc

    spec = case.model
    wires = _wire_from_arrays(case.reference.make_inputs(rng.choice(spec.batch_sizes), seed=rng.randrange(1000)))
    if case.protocol == "http":
        body, headers = _http_body(spec, wires)
        connection = http.client.HTTPConnection(*_split(endpoints.http_url), timeout=FUZZ_TIMEOUT_S)
        try:
            connection.request("POST", _infer_path(spec.name), body=body, headers=headers)
            time.sleep(rng.choice([0, 0, 0.001, 0.005]))
        finally:
            connection.close()
        return "cancelled"
    if spec.decoupled:
        outcome, _ = _grpc_stream_once(endpoints, _grpc_request(spec.name, spec, wires, "cancel"),
                                       cancel_after=rng.uniform(0, 0.03))
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
        head = (f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {length}\r\n\r\n").encode()
        options = [b"", head[: rng.randrange(1, len(head))], head, head + b'{"inputs": [', rng.randbytes(512)]
    else:
        preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        options = [b"", preface[: rng.randrange(1, len(preface))], preface, preface + rng.randbytes(64),
                   rng.randbytes(512)]
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
    wires = _wire_from_arrays(case.reference.make_inputs(rng.choice(spec.batch_sizes), seed=rng.randrange(1000)))
    if case.protocol == "grpc":
        import grpc

        channel, _ = _grpc_stub(endpoints)
        try:
            method = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                         request_serializer=None, response_deserializer=None)
            valid = _grpc_request(spec.name, spec, wires).SerializeToString()
            message = rng.choice([rng.randbytes(rng.randrange(1, 2048)), valid[: rng.randrange(1, len(valid))],
                                  valid[:8] + rng.randbytes(64) + valid[72:]])
            try:
                method(message, timeout=FUZZ_TIMEOUT_S)
                return "ok"
            except grpc.RpcError as err:
                return _grpc_outcome(err)
        finally:
            channel.close()
    body, headers = _http_body(spec, wires)
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
        tensors = [{"name": w.name, "datatype": w.datatype, "shape": w.shape, "data": [1] * rng.randrange(0, 5)}
                   for w in wires]
        body = json.dumps({"inputs": tensors}).encode()
        headers.pop("Inference-Header-Content-Length")
    elif choice == 6:  # binary sizes that add up to more than the body
        header = json.loads(body[:length])
        for tensor in header["inputs"]:
            tensor["parameters"]["binary_data_size"] = rng.choice([2**40, 2**31, tensor["parameters"]["binary_data_size"] + 1])
        head = json.dumps(header).encode()
        body, headers["Inference-Header-Content-Length"] = head + body[length:], str(len(head))
    else:
        body = body[:length] + rng.randbytes(8)  # binary part too short
    status, _, _ = _http_post(endpoints, _infer_path(spec.name), body, headers)
    return "ok" if status == 200 else f"http {status}"
