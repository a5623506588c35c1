"""The smoke checks, each a function of the endpoints, and plan_smoke, which picks them for a model."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.clients import (
    REQUEST_TIMEOUT_S,
    Endpoints,
    Stream,
    assert_healthy,
    error_text,
    infer,
    is_final,
    model_counts,
    open_client,
    output_arrays,
    timeout_kwargs,
)
from triton_backend_gen.smoke.compare import assert_outputs_match, config_differences
from triton_backend_gen.smoke.model import (
    ModelSpec,
    TensorSpec,
    leaves_tensors_to_backend,
    load_model_spec,
    load_model_specs,
    reference_mismatch,
)
from triton_backend_gen.smoke.run import SmokeCheck
from triton_backend_gen.smoke.sequences import plan_sequence_checks
from triton_backend_gen.smoke.stream_protocol import LogWindow, stream_deadline

json_format = lazy_module("google.protobuf.json_format")
np = lazy_module("numpy")
model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")
tritonutils = lazy_module("tritonclient.utils")

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from triton_backend_gen.project import ModelEntry, Project


UNKNOWN_INPUT = "TBGEN_UNKNOWN_INPUT"


# ---- Checks: metadata and config ------------------------------------------------------------------------


def _check_metadata(spec: ModelSpec, protocol: str, endpoints: Endpoints) -> str:
    with open_client(protocol, endpoints) as client:
        if protocol == "http":
            meta = client.get_model_metadata(spec.name)
        else:
            meta = client.get_model_metadata(spec.name, as_json=True, **timeout_kwargs(protocol))
    problems = []
    if meta.get("name") != spec.name:
        problems.append(f"name {meta.get('name')!r}, expected {spec.name!r}")
    for kind, tensors in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        problems += _served_tensor_problems(spec, kind, tensors, meta.get(kind, []))
    if problems:
        raise AssertionError("served metadata differs from config.pbtxt: " + "; ".join(problems))
    return f"{len(spec.inputs)} inputs, {len(spec.outputs)} outputs as in config.pbtxt"


def _served_tensor_problems(
    spec: ModelSpec, kind: str, tensors: tuple[TensorSpec, ...], served_list: list[dict[str, Any]]
) -> list[str]:
    """How the served metadata of ``kind`` ("inputs" or "outputs") differs from ``tensors``."""
    served = {t["name"]: t for t in served_list}
    if set(served) != {t.name for t in tensors}:
        return [f"{kind} {sorted(served)}, config.pbtxt declares {sorted(t.name for t in tensors)}"]
    problems = []
    for tensor in tensors:
        got = served[tensor.name]
        shape = [int(d) for d in got.get("shape", [])]
        if got.get("datatype") != tensor.datatype:
            problems.append(f"{tensor.name}: datatype {got.get('datatype')}, expected {tensor.datatype}")
        if shape != spec.served_shape(tensor):
            problems.append(f"{tensor.name}: shape {shape}, expected {spec.served_shape(tensor)}")
    return problems


def _check_config(spec: ModelSpec, local: ModelConfig, protocol: str, endpoints: Endpoints) -> str:

    with open_client(protocol, endpoints) as client:
        if protocol == "http":
            served = json_format.ParseDict(
                client.get_model_config(spec.name), model_config_pb2.ModelConfig(), ignore_unknown_fields=True
            )
        else:
            served = client.get_model_config(spec.name, **timeout_kwargs(protocol)).config
    problems = config_differences(local, served)
    # proto3 does not list zero values as set: compare what the suite relies on explicitly (but batching
    # that config.pbtxt leaves to the backend's auto-complete, with the tensors, is the served one).
    explicit = [
        (
            "model_transaction_policy.decoupled",
            local.model_transaction_policy.decoupled,
            served.model_transaction_policy.decoupled,
        )
    ]
    if not spec.auto_completed:
        explicit += [
            ("max_batch_size", local.max_batch_size, served.max_batch_size),
            ("dynamic_batching", local.HasField("dynamic_batching"), served.HasField("dynamic_batching")),
        ]
    for name, mine, theirs in explicit:
        if mine != theirs and not any(p.startswith(name) for p in problems):
            problems.append(f"{name}: {mine!r} in config.pbtxt, {theirs!r} as served")
    if problems:
        raise AssertionError("served config differs from config.pbtxt: " + "; ".join(problems))
    completed = " (tensors and batching auto-completed by the backend)" if spec.auto_completed else ""
    return f"{len(local.ListFields())} fields of config.pbtxt as served{completed}"


def _served_config(name: str, endpoints: Endpoints) -> ModelConfig:
    with open_client("http", endpoints) as client:
        return json_format.ParseDict(
            client.get_model_config(name), model_config_pb2.ModelConfig(), ignore_unknown_fields=True
        )


def served_configs(
    project: Project, endpoints: Endpoints, model: ModelEntry | None = None, repository: Path | None = None
) -> dict[str, ModelConfig]:
    """The configs as served of the models (``model``, or every model of the project) whose config.pbtxt
    leaves the tensors to the backend's auto-complete, by name: what plan_smoke and plan_fuzz take as
    ``served``. Asks the server only about such models (none: an empty dict, no server contact)."""
    models = [model] if model is not None else list(project.models)
    return {
        entry.name: _served_config(entry.name, endpoints)
        for entry in models
        if leaves_tensors_to_backend(load_model_spec(entry, repository)[1])
    }


# ---- Checks: reference.py against the config ------------------------------------------------------------


def _tensor_problems(
    kind: str, arrays: dict[str, np.ndarray], tensors: tuple[TensorSpec, ...], batch: int | None
):

    problems = []
    declared = {t.name: t for t in tensors}
    required = {t.name for t in tensors if not t.optional}
    if not required <= set(arrays) or not set(arrays) <= set(declared):
        problems.append(f"{kind} {sorted(arrays)}, config.pbtxt declares {sorted(declared)}")
    for name, array in arrays.items():
        if name in declared:
            problems += _array_problems(f"{kind} {name}", np.asarray(array), declared[name], batch)
    return problems


def _array_problems(label: str, array: np.ndarray, tensor: TensorSpec, batch: int | None) -> list[str]:
    """How ``array`` disagrees with the dtype and dims (after ``batch``, when batched) of ``tensor``."""
    problems = []
    sent_as_float32 = tensor.datatype == "BF16" and array.dtype == np.float32
    if tritonutils.np_to_triton_dtype(array.dtype) != tensor.datatype and not sent_as_float32:
        problems.append(f"{label}: dtype {array.dtype}, config.pbtxt says {tensor.datatype}")
    dims = ((batch,) if batch is not None else ()) + tensor.dims
    if len(array.shape) != len(dims) or any(
        d != -1 and d != s for d, s in zip(dims, array.shape, strict=True)
    ):
        problems.append(f"{label}: shape {list(array.shape)}, config.pbtxt allows {list(dims)}")
    return problems


def _check_reference(spec: ModelSpec, reference: ModuleType, _endpoints: Endpoints) -> str:
    problems = []
    for batch in {spec.batch_sizes[0], spec.batch_sizes[-1]}:
        inputs = reference.make_inputs(batch, seed=0)
        problems += _tensor_problems("make_inputs", inputs, spec.inputs, batch)
        if spec.decoupled:
            for index, response in enumerate(reference.responses(inputs)):
                problems += _tensor_problems(f"responses[{index}]", response, spec.outputs, batch)
        else:
            outputs = reference.compute(inputs)
            problems += _tensor_problems("compute", outputs, spec.outputs, batch)
    if problems:
        raise AssertionError("reference.py disagrees with config.pbtxt: " + "; ".join(sorted(set(problems))))
    return "make_inputs and " + ("responses" if spec.decoupled else "compute") + " agree with config.pbtxt"


# ---- Checks: inference ----------------------------------------------------------------------------------


def _check_infer(
    spec: ModelSpec, reference: ModuleType, protocol: str, batch_sizes: list, endpoints: Endpoints
) -> str:
    with open_client(protocol, endpoints) as client:
        for batch in batch_sizes:
            seed = batch or 0
            inputs = reference.make_inputs(batch, seed=seed)
            got = infer(protocol, client, spec, inputs)
            where = f"batch size {batch}, seed {seed}" if batch is not None else f"seed {seed}"
            assert_outputs_match(got, reference.compute(inputs), reference.TOLERANCE, where)
    if batch_sizes == [None]:
        return "outputs equal reference.compute"
    if len(batch_sizes) == 1:
        return f"batch size {batch_sizes[0]}: outputs equal reference.compute"
    return f"batch sizes {batch_sizes[0]}..{batch_sizes[-1]}: outputs equal reference.compute"


def _in_threads(count: int, first_seed: int, run: Callable[[int], None], what: str) -> None:
    """``run(seed)`` in ``count`` threads at once (seeds from ``first_seed``); one AssertionError for them
    all."""
    failures: list[str] = []

    def guarded(seed: int) -> None:
        try:
            run(seed)
        except Exception as err:  # noqa: BLE001 - collected and reported by the check
            failures.append(
                str(err) if isinstance(err, AssertionError) else f"{type(err).__name__}: {error_text(err)}"
            )

    threads = [threading.Thread(target=guarded, args=(first_seed + i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(REQUEST_TIMEOUT_S * 2)
    if any(thread.is_alive() for thread in threads):
        failures.append(f"no answer within {REQUEST_TIMEOUT_S * 2:.0f} s")
    if failures:
        raise AssertionError(
            f"{len(failures)} of {count} concurrent {what} failed: " + "; ".join(failures[:3])
        )


def _concurrent_burst(
    spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints, count: int
) -> None:
    """``count`` requests sent at once from as many threads, each with its own client; all answers checked."""
    batch = 1 if spec.max_batch_size > 0 else None
    barrier = threading.Barrier(count)

    def send(seed: int) -> None:
        with open_client(protocol, endpoints) as client:
            inputs = reference.make_inputs(batch, seed=seed)
            barrier.wait(timeout=REQUEST_TIMEOUT_S)
            got = infer(protocol, client, spec, inputs)
            assert_outputs_match(got, reference.compute(inputs), reference.TOLERANCE, f"request {seed}")

    _in_threads(count, 100, send, "requests")


def _check_concurrent(spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints) -> str:
    """Concurrent requests all answered correctly; with dynamic batching, whether the server merged them is
    reported (up to 3 bursts). A merge depends on timing: a backend that answers faster than requests queue
    never sees one, so its absence is reported, not failed."""
    count = max(8, 2 * spec.max_batch_size)
    merges = spec.dynamic_batching and spec.max_batch_size > 1
    attempts = 3 if merges else 1
    with open_client(protocol, endpoints) as client:
        for _ in range(attempts):
            inferences, executions = model_counts(client, spec.name, protocol)
            _concurrent_burst(spec, reference, protocol, endpoints, count)
            after = model_counts(client, spec.name, protocol)
            inferences, executions = after[0] - inferences, after[1] - executions
            if not merges or executions < inferences:
                break
    answered = f"{count} concurrent requests answered correctly"
    if not merges:
        return answered
    if executions < inferences:
        return f"{answered}; dynamic batching merged them: {inferences} inferences in {executions} executions"
    return (
        f"{answered}; no merge seen in {attempts} bursts (each request ran alone: the model was never busy)"
    )


# ---- Checks: decoupled models over gRPC streaming -------------------------------------------------------


def _has_data(spec: ModelSpec, result: Any) -> bool:
    """Whether a stream's result carries outputs (else it is the final flag alone, an empty response)."""
    return any(result.as_numpy(t.name) is not None for t in spec.outputs)


def _assert_final_flag_last(spec: ModelSpec, reference: ModuleType, results: list, context: str) -> None:
    """The last of one request's results, and only the last, is flagged final; when the reference says that
    the final flag comes with the last response (FINAL_WITH_LAST_RESPONSE), it comes alone only to a request
    that streamed no data."""
    if not results or not is_final(results[-1]):
        raise AssertionError(f"{context}: the stream ended without a response flagged final")
    early_final = [i for i, r in enumerate(results[:-1]) if is_final(r)]
    if early_final:
        raise AssertionError(f"{context}: response {early_final[0]} is flagged final before the stream ended")
    if (
        getattr(reference, "FINAL_WITH_LAST_RESPONSE", False)
        and len(results) > 1
        and not _has_data(spec, results[-1])
    ):
        raise AssertionError(
            f"{context}: the final flag came alone after {len(results) - 1} responses; reference.py's "
            "FINAL_WITH_LAST_RESPONSE says the last response carries it (send it with the last one)"
        )


def _assert_stream_matches(
    spec: ModelSpec, reference: ModuleType, results: list, inputs: dict, context: str
) -> None:
    """The results of one request equal reference.responses(), in order, and the last one is flagged final."""
    expected = reference.responses(inputs)
    _assert_final_flag_last(spec, reference, results, context)
    # A final flag may come on an empty response of its own (TRITONSERVER_RESPONSE_COMPLETE_FINAL sent without
    # a response): only the responses carrying outputs are compared.
    data = [r for r in results if _has_data(spec, r)]
    if len(data) != len(expected):
        raise AssertionError(
            f"{context}: {len(data)} responses with data, reference.responses gives {len(expected)}"
        )
    for index, (result, want) in enumerate(zip(data, expected, strict=True)):
        got = output_arrays(result, want)
        assert_outputs_match(got, want, reference.TOLERANCE, f"{context}, response {index}")


def _stream(reference: ModuleType, endpoints: Endpoints) -> Stream:
    """A stream whose requests must end within the model's per-request deadline (reference.py's
    STREAM_DEADLINE_S, else the suite's request timeout)."""
    return Stream(endpoints, stream_deadline(reference, REQUEST_TIMEOUT_S))


def _watching_log(check: Callable[[Endpoints], str], endpoints: Endpoints) -> str:
    """``check``, failed also by the protocol faults that only the server's log shows (the lines it gained
    while the check ran: a crash after a final flag, a python stub's refusal of a send after it), when the
    endpoints name the server's log (a server tbgen started; not one at --url)."""
    window = LogWindow(endpoints.log_file)
    try:
        detail = check(endpoints)
    except AssertionError as err:
        faults = window.faults()
        if faults:
            raise AssertionError("; ".join(faults) + f" (the check itself: {err})") from None
        raise
    faults = window.faults()
    if faults:
        raise AssertionError("; ".join(faults) + f" (the check itself passed: {detail})")
    return detail


def _check_stream(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    counts = []
    with _stream(reference, endpoints) as stream:
        for seed in (0, 1):
            inputs = reference.make_inputs(spec.batch_sizes[0], seed=seed)
            stream.send(spec, inputs, request_id=f"seed{seed}")
            results = stream.collect([f"seed{seed}"])[f"seed{seed}"]
            _assert_stream_matches(spec, reference, results, inputs, f"seed {seed}")
            counts.append(sum(1 for r in results if _has_data(spec, r)))
    alone = not _has_data(spec, results[-1])
    return f"responses {counts} in order, the final flag {'alone after them' if alone else 'with the last'}"


def _check_stream_without_responses(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    """A request that streams no response (reference.no_response_inputs) gets the final flag alone."""
    inputs = reference.no_response_inputs(spec.batch_sizes[0])
    expected = reference.responses(inputs)
    if expected:
        raise AssertionError(
            f"reference.no_response_inputs() makes a request that reference.responses() answers with "
            f"{len(expected)} responses: make it stream none, or remove it"
        )
    with _stream(reference, endpoints) as stream:
        stream.send(spec, inputs, request_id="none")
        results = stream.collect(["none"])["none"]
    _assert_stream_matches(spec, reference, results, inputs, "a request without responses")
    if len(results) != 1:
        raise AssertionError(f"{len(results)} results to a request without responses: only the final flag")
    return "no response, the final flag alone"


def _check_stream_many_requests(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    requests = {f"r{seed}": reference.make_inputs(spec.batch_sizes[0], seed=seed) for seed in range(2, 6)}
    with _stream(reference, endpoints) as stream:
        for request_id, inputs in requests.items():
            stream.send(spec, inputs, request_id=request_id)
        results = stream.collect(list(requests))
    for request_id, inputs in requests.items():
        _assert_stream_matches(spec, reference, results[request_id], inputs, f"request {request_id}")
    return f"{len(requests)} requests on one stream, each answered in order"


def _check_concurrent_streams(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    count = 4

    def run(seed: int) -> None:
        with _stream(reference, endpoints) as stream:
            inputs = reference.make_inputs(spec.batch_sizes[0], seed=seed)
            stream.send(spec, inputs, request_id=f"c{seed}")
            results = stream.collect([f"c{seed}"])[f"c{seed}"]
            _assert_stream_matches(spec, reference, results, inputs, f"stream {seed}")

    _in_threads(count, 10, run, "streams")
    return f"{count} concurrent streams answered correctly"


def _check_stream_cancel(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> str:
    inputs = reference.make_inputs(spec.batch_sizes[0], seed=7)
    expected = len(reference.responses(inputs))
    stream = _stream(reference, endpoints)
    try:
        stream.send(spec, inputs, request_id="cancelled")
        _result, error = stream.next()
        if error is not None:
            raise AssertionError(f"the request to be cancelled failed: {error_text(error)}")
        received = 1
    finally:
        stream.close(cancel=True)
    # The model keeps serving: a fresh stream gets its whole answer.
    with open_client("grpc", endpoints) as client:
        assert_healthy(client, spec, "grpc", "a stream cancelled mid-way")
    with _stream(reference, endpoints) as fresh:
        inputs = reference.make_inputs(spec.batch_sizes[0], seed=8)
        fresh.send(spec, inputs, request_id="after")
        _assert_stream_matches(
            spec, reference, fresh.collect(["after"])["after"], inputs, "request after the cancel"
        )
    when = "mid-stream" if received < expected else "after its last data response"
    return f"cancelled {when} ({received} of {expected} responses received); later streams answered"


# ---- Checks: bad requests -------------------------------------------------------------------------------


def _wrong_dtype(array: np.ndarray) -> np.ndarray:
    if array.dtype.kind in "OSU":
        return np.zeros(array.shape, dtype=np.int32)
    return array.astype(np.float32 if array.dtype == np.float64 else np.float64)


def _inputs_to_spoil(spec: ModelSpec, valid: dict[str, np.ndarray]) -> tuple[str, str | None]:
    """(the first input a valid request carries, the first required one it carries or None): the inputs that
    bad_requests spoils."""
    first = next(iter(t.name for t in spec.inputs if t.name in valid))
    required = next((t.name for t in spec.inputs if not t.optional and t.name in valid), None)
    return first, required


def bad_requests(spec: ModelSpec, reference: ModuleType) -> dict[str, dict[str, np.ndarray]]:
    """The malformed variants of a valid request that every model must refuse, by name."""
    batch = spec.batch_sizes[0]
    valid = {name: np.asarray(array) for name, array in reference.make_inputs(batch, seed=0).items()}
    first, required = _inputs_to_spoil(spec, valid)
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


def _check_bad_request(
    spec: ModelSpec, inputs: dict[str, np.ndarray], what: str, protocol: str, endpoints: Endpoints
) -> str:
    if spec.decoupled:
        with Stream(endpoints) as stream:
            stream.send(spec, inputs, request_id="bad")
            _result, error = stream.next()
        if error is None:
            raise AssertionError(f"a request with {what} was answered instead of refused")
        message = error_text(error)
    else:
        with open_client(protocol, endpoints) as client:
            try:
                infer(protocol, client, spec, inputs)
            except tritonutils.InferenceServerException as err:
                message = error_text(err)
            else:
                raise AssertionError(f"a request with {what} was answered instead of refused")
    with open_client(protocol, endpoints) as client:
        assert_healthy(client, spec, protocol, f"a request with {what}")
    return f"refused: {message}"


def _check_decoupled_refuses_unary(
    spec: ModelSpec, reference: ModuleType, protocol: str, endpoints: Endpoints
) -> str:

    with open_client(protocol, endpoints) as client:
        try:
            infer(protocol, client, spec, reference.make_inputs(spec.batch_sizes[0], seed=0))
        except tritonutils.InferenceServerException as err:
            message = error_text(err)
        else:
            raise AssertionError("a decoupled model answered a non-streaming request")
        assert_healthy(client, spec, protocol, "a non-streaming request")
    return f"refused: {message}"


# ---- Planning -------------------------------------------------------------------------------------------


def _fail(message: str, _endpoints: Endpoints) -> str:
    raise AssertionError(message)


def plan_smoke(
    project: Project,
    model: ModelEntry | None = None,
    repository: Path | None = None,
    served: Mapping[str, ModelConfig] | None = None,
    *,
    quick: bool = False,
) -> list[SmokeCheck]:
    """The checks for ``model`` (every model of the project when None), from config.pbtxt and reference.py;
    ``repository`` is the one served when it is not the project's (a run copy). ``served``: the configs the
    server completed for models whose config.pbtxt leaves the tensors to the backend (served_configs).
    ``quick``: only the checks `tbgen dev` runs after a save (reference against config, metadata and config,
    one request and every batch size over both protocols, the streams, the sequences), without concurrent
    load, bad requests and checks that wait on purpose."""
    specs = load_model_specs(project, model, repository, served)
    plan = []
    for reference, spec, config in specs:
        prefix = f"{spec.name}: " if len(specs) > 1 else ""
        plan += [
            dataclasses.replace(c, name=prefix + c.name, model=spec.name)
            for c in _plan_model(spec, config, reference)
            if c.quick or not quick
        ]
    return plan


def _plan_model(spec: ModelSpec, config: ModelConfig, reference: ModuleType) -> list[SmokeCheck]:
    """The checks of one model: reference.py against config.pbtxt, metadata and config over both protocols,
    then (when the reference fits the model) its requests: streams or unary infers, sequences, bad
    requests."""
    if leaves_tensors_to_backend(config) and not spec.auto_completed:
        message = (
            f"config.pbtxt of {spec.name} declares no tensors (the backend auto-completes them), and the "
            "suite was planned without the served config: plan it with served=served_configs(...)"
        )
        return [SmokeCheck("served config (auto-complete)", "-", partial(_fail, message))]
    mismatch = reference_mismatch(spec, reference)
    check = partial(_fail, mismatch) if mismatch else partial(_check_reference, spec, reference)
    plan = [SmokeCheck("reference.py matches config.pbtxt", "-", check)]
    for protocol in ("http", "grpc"):
        plan.append(SmokeCheck("metadata", protocol, partial(_check_metadata, spec, protocol)))
        plan.append(SmokeCheck("config", protocol, partial(_check_config, spec, config, protocol)))
    if mismatch:
        return plan  # requests made from another model's reference would test nothing
    plan += _plan_stream_checks(spec, reference) if spec.decoupled else _plan_infer_checks(spec, reference)
    if spec.sequence is not None:
        plan += plan_sequence_checks(spec, reference)
    # A decoupled model answers only over a gRPC stream (it refuses HTTP and unary gRPC, checked above).
    return plan + _plan_bad_requests(spec, reference, ("grpc",) if spec.decoupled else ("http", "grpc"))


def _plan_stream_checks(spec: ModelSpec, reference: ModuleType) -> list[SmokeCheck]:
    """The checks of a decoupled model: its gRPC streams (each also judged by the lines the server's log
    gained meanwhile), and its refusal of non-streaming requests."""

    def streamed(name: str, check: Callable, quick: bool = True) -> SmokeCheck:
        return SmokeCheck(name, "grpc", partial(_watching_log, partial(check, spec, reference)), quick=quick)

    plan = [
        streamed("stream", _check_stream),
        streamed("several requests on one stream", _check_stream_many_requests),
        streamed("concurrent streams", _check_concurrent_streams, quick=False),
        streamed("stream cancelled mid-way", _check_stream_cancel),
    ]
    # Optional in reference.py (references written before it existed lack it; None: the signature allows no
    # such request).
    no_responses = getattr(reference, "no_response_inputs", None)
    if no_responses is not None and no_responses(spec.batch_sizes[0]) is not None:
        plan.append(streamed("request without responses", _check_stream_without_responses))
    for protocol, what in (("http", "HTTP /infer"), ("grpc", "unary gRPC infer")):
        plan.append(
            SmokeCheck(
                f"refuses {what} (decoupled)",
                protocol,
                partial(_check_decoupled_refuses_unary, spec, reference, protocol),
            )
        )
    return plan


def _plan_infer_checks(spec: ModelSpec, reference: ModuleType) -> list[SmokeCheck]:
    """The infer checks of a model that answers each request once, over each protocol: one request, every
    batch size when it batches, concurrent requests."""
    plan = []
    for protocol in ("http", "grpc"):
        plan.append(
            SmokeCheck(
                "infer", protocol, partial(_check_infer, spec, reference, protocol, [spec.batch_sizes[0]])
            )
        )
        if len(spec.batch_sizes) > 1:
            plan.append(
                SmokeCheck(
                    f"batch sizes 1..{spec.max_batch_size}",
                    protocol,
                    partial(_check_infer, spec, reference, protocol, spec.batch_sizes),
                )
            )
        name = "concurrent requests" + (" (dynamic batching)" if spec.dynamic_batching else "")
        plan.append(
            SmokeCheck(name, protocol, partial(_check_concurrent, spec, reference, protocol), quick=False)
        )
    return plan


def _plan_bad_requests(
    spec: ModelSpec, reference: ModuleType, protocols: tuple[str, ...]
) -> list[SmokeCheck]:
    """A check of each bad request (bad_requests) over each of ``protocols``."""
    return [
        SmokeCheck(
            f"bad request: {what}",
            protocol,
            partial(_check_bad_request, spec, inputs, what, protocol),
            quick=False,
        )
        for what, inputs in bad_requests(spec, reference).items()
        for protocol in protocols
    ]
