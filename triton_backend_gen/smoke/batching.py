"""The "batching strategy" check: the batches a model's batching strategy (batching/<model>/, tbgen.toml's
batch_strategy) makes the server form are those its rule gives for the requests sent.

Timing decides which requests meet in Triton's dynamic batcher, so the check takes timing out: it loads the
model again with a long queue delay (and no preferred batch sizes, which would close batches early) through
the repository API, sends requests of known batch sizes one after the other well within that delay, and
reads the server's statistics: every batch then closes either when the strategy refuses a request (or the
request would pass max_batch_size) or when the delay runs out after the last request. ``plan_batches``
computes those batches from the requests, as core's scheduler forms them: in arrival order, the first request
of a batch always in (tbgen's strategies never refuse it), the include rule asked for each later one. The
execution count and the executions of each batch size must equal the plan, every answer must equal
reference.py's, and the server's log must say that the library was loaded. The model is loaded again with the
config it was served with at the end, whatever happened.

A model whose strategy is ``custom`` is judged by reference.py's ``include_request(batch, request,
parameters)``, the mirror of the user's rule in batching/<model>/decision.h.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from triton_backend_gen.errors import ServerError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import ELEMENTS_INPUT_PARAMETER, STRATEGY_LIMITS
from triton_backend_gen.runtime.model_control import load_model, refuses_model_control
from triton_backend_gen.signature import DATATYPES
from triton_backend_gen.smoke.clients import (
    REQUEST_TIMEOUT_S,
    Endpoints,
    error_text,
    infer_inputs,
    open_client,
    output_arrays,
)
from triton_backend_gen.smoke.compare import assert_outputs_match
from triton_backend_gen.smoke.model import ModelSpec
from triton_backend_gen.smoke.run import SmokeResult

np = lazy_module("numpy")
grpcclient = lazy_module("tritonclient.grpc")

CHECK_NAME = "batching strategy"
QUEUE_DELAY_US = 1_000_000  # the check's max_queue_delay: every request is queued long before it runs out
SEND_GAP_S = 0.02  # between two requests: they reach the batcher in the order sent
LOADED_LINE = "Loading custom batching strategy library"  # core's log line (backend_model.cc), then the path


@dataclass(frozen=True)
class RequestSize:
    """One request as a strategy measures it (batching/<model>/batcher.h's RequestSize)."""

    batch_size: int
    bytes: int  # every input's byte size, BYTES inputs serialized (4-byte length before each element)
    elements: int  # elements of the elements input (BATCH_ELEMENTS_INPUT, else the first), batch dim included


@dataclass(frozen=True)
class BatchSoFar:
    """The requests already in a batch, summed (batcher.h's BatchSoFar)."""

    requests: int = 0
    batch_size: int = 0
    bytes: int = 0
    elements: int = 0

    def plus(self, request: RequestSize) -> BatchSoFar:
        return BatchSoFar(
            self.requests + 1,
            self.batch_size + request.batch_size,
            self.bytes + request.bytes,
            self.elements + request.elements,
        )


Rule = Callable[[BatchSoFar, RequestSize], bool]  # whether a request joins a batch that holds one already


def strategy_rule(strategy: str, parameters: Mapping[str, str], reference: ModuleType) -> Rule:
    """The include rule of ``strategy`` with the model's ``parameters`` (custom: reference.include_request).
    AssertionError naming what is missing (a limit, reference.py's mirror of a custom rule)."""
    if strategy == "single":
        return lambda batch, request: False
    if strategy == "custom":
        mirror = getattr(reference, "include_request", None)
        if mirror is None:
            raise AssertionError(
                "reference.py has no include_request(batch, request, parameters): the mirror of your rule in "
                "batching/<model>/decision.h that this check judges the server's batches by"
            )
        return lambda batch, request: bool(mirror(batch, request, dict(parameters)))
    name = STRATEGY_LIMITS[strategy]
    if name not in parameters:
        raise AssertionError(f"config.pbtxt has no parameter {name}, which batch_strategy {strategy} reads")
    limit = int(parameters[name])
    if strategy == "volume":
        return lambda batch, request: batch.bytes + request.bytes <= limit
    return lambda batch, request: batch.elements + request.elements <= limit


def plan_batches(requests: list[RequestSize], max_batch_size: int, include: Rule) -> list[int]:
    """The batch sizes of the executions core's dynamic batcher forms from ``requests`` queued in this order:
    a request that would pass max_batch_size, or that ``include`` refuses, closes the batch and starts the
    next; the first request of a batch always joins it (a request over a limit runs alone)."""
    batches: list[int] = []
    batch = BatchSoFar()
    for request in requests:
        if batch.requests and (
            batch.batch_size + request.batch_size > max_batch_size or not include(batch, request)
        ):
            batches.append(batch.batch_size)
            batch = BatchSoFar()
        batch = batch.plus(request)
    return batches + ([batch.batch_size] if batch.requests else [])


def request_size(spec: ModelSpec, inputs: Mapping[str, Any], elements_input: str) -> RequestSize:
    """How a strategy measures the request of ``inputs``."""
    datatypes = spec.input_datatypes
    total = 0
    for name, array in inputs.items():
        array = np.asarray(array)
        if datatypes.get(name) == "BYTES":
            total += sum(4 + len(_as_bytes(value)) for value in array.flat)
        else:
            declared = DATATYPES.get(datatypes.get(name, ""))
            total += array.size * (declared.size if declared is not None else array.itemsize)
    first = np.asarray(next(iter(inputs.values())))
    # batcher.cc counts no element of an elements input the request leaves out (an optional one)
    counted = int(np.asarray(inputs[elements_input]).size) if elements_input in inputs else 0
    return RequestSize(int(first.shape[0]), total, counted)


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def batch_sizes_to_send(max_batch_size: int) -> list[int]:
    """The batch sizes of the check's requests: small ones that a limit splits, and one of max_batch_size
    (over most limits: it runs alone) in the middle."""
    sizes = [1, 1, 2, 1, max_batch_size, 1, 2, 1]
    return [min(size, max_batch_size) for size in sizes]


def check_batching_strategy(
    spec: ModelSpec,
    reference: ModuleType,
    strategy: str,
    endpoints: Endpoints,
    log_file: Path | None,
    batch_sizes: list[int] | None = None,
) -> SmokeResult:
    """The check's result (see the module docstring) for requests of ``batch_sizes`` (default:
    batch_sizes_to_send); a server that refuses model control is a ServerError."""
    started = time.monotonic()
    name = f"{CHECK_NAME} ({strategy})"
    try:
        passed, detail = _checked(spec, reference, strategy, endpoints, log_file, batch_sizes)
    except ServerError:
        raise  # batching_strategy_results tells a server without model control from a failed load
    except AssertionError as err:
        passed, detail = False, str(err)
    except Exception as err:  # noqa: BLE001 - a check that breaks is a failed check, with its reason
        passed, detail = False, f"{type(err).__name__}: {error_text(err)}"
    return SmokeResult(name, "grpc", passed, detail, time.monotonic() - started)


def _checked(
    spec: ModelSpec,
    reference: ModuleType,
    strategy: str,
    endpoints: Endpoints,
    log_file: Path | None,
    batch_sizes: list[int] | None,
) -> tuple[bool, str]:
    """(passed, detail) of check_batching_strategy: the model loaded with the long delay, judged, loaded again
    as it was served."""
    with open_client("http", endpoints) as client:
        served = client.get_model_config(spec.name)
    parameters = {key: value.get("string_value", "") for key, value in served.get("parameters", {}).items()}
    first_input = spec.inputs[0].name
    log_offset = log_file.stat().st_size if log_file is not None and log_file.is_file() else 0
    delayed = {**served, "dynamic_batching": {"max_queue_delay_microseconds": QUEUE_DELAY_US}}
    load_model(endpoints.http_url, spec.name, delayed)
    try:
        sizes = batch_sizes or batch_sizes_to_send(spec.max_batch_size)
        passed, detail = _judge(spec, reference, strategy, parameters, endpoints, first_input, sizes)
    finally:
        load_model(endpoints.http_url, spec.name, served)
    if passed and log_file is not None:
        passed, detail = _library_loaded(log_file, log_offset, spec.name, detail)
    return passed, detail


def _judge(
    spec: ModelSpec,
    reference: ModuleType,
    strategy: str,
    parameters: Mapping[str, str],
    endpoints: Endpoints,
    first_input: str,
    batch_sizes: list[int],
) -> tuple[bool, str]:
    """(passed, detail): the requests sent, answered as reference.py says, batched as the rule plans."""
    include = strategy_rule(strategy, parameters, reference)
    # Seeds 0, 6, 12 ... give every variable dim the same size and every optional input (present for even
    # seeds): Triton batches only requests whose variable-size inputs have the same shape.
    requests = [reference.make_inputs(size, seed=6 * index) for index, size in enumerate(batch_sizes)]
    elements_input = parameters.get(ELEMENTS_INPUT_PARAMETER, first_input)
    sizes = [request_size(spec, inputs, elements_input) for inputs in requests]
    expected = plan_batches(sizes, spec.max_batch_size, include)
    _send_in_order(spec, reference, requests, endpoints)
    executed = _executions_by_batch_size(spec.name, endpoints)
    wanted = {size: expected.count(size) for size in sorted(set(expected))}
    sent = ", ".join(f"{s.batch_size}x{s.bytes} B" for s in sizes)
    if executed != wanted:
        return False, (
            f"requests of batch size x bytes [{sent}] ran as executions {_sizes_text(executed)}; the "
            f"strategy's rule makes {_sizes_text(wanted)} (batches {expected})"
        )
    return (
        True,
        f"{len(sizes)} requests [{sent}] ran in {len(expected)} executions {expected}, as the rule says",
    )


def _send_in_order(
    spec: ModelSpec, reference: ModuleType, requests: list[dict], endpoints: Endpoints
) -> None:
    """Every request sent over gRPC, ``SEND_GAP_S`` apart, without waiting for answers; then every answer
    compared with reference.compute."""
    answers: dict[int, Any] = {}
    done = threading.Semaphore(0)

    def callback(index: int, result: Any, error: Any) -> None:
        answers[index] = error if error is not None else result
        done.release()

    with open_client("grpc", endpoints) as client:
        for index, inputs in enumerate(requests):
            client.async_infer(
                spec.name,
                infer_inputs("grpc", inputs, spec.input_datatypes),
                callback=lambda result, error, index=index: callback(index, result, error),
                outputs=[grpcclient.InferRequestedOutput(t.name) for t in spec.outputs],
                client_timeout=REQUEST_TIMEOUT_S,
            )
            time.sleep(SEND_GAP_S)
        for _ in requests:
            if not done.acquire(timeout=REQUEST_TIMEOUT_S + QUEUE_DELAY_US / 1e6):
                raise AssertionError(f"no answer within {REQUEST_TIMEOUT_S:.0f} s to a batched request")
    for index, inputs in enumerate(requests):
        answer = answers[index]
        if isinstance(answer, Exception):
            raise AssertionError(f"request {index} failed: {error_text(answer)}")
        got = output_arrays(answer, spec.output_names)
        assert_outputs_match(got, reference.compute(inputs), reference.TOLERANCE, f"request {index}")


def _executions_by_batch_size(model: str, endpoints: Endpoints) -> dict[int, int]:
    """The model's executions per batch size since it was loaded (statistics' batch_stats)."""
    with open_client("http", endpoints) as client:
        stats = client.get_inference_statistics(model)
    counts: dict[int, int] = {}
    for entry in stats.get("model_stats", []):
        for row in entry.get("batch_stats", []):
            count = int(row.get("compute_infer", {}).get("count", 0))
            if count:
                size = int(row["batch_size"])
                counts[size] = counts.get(size, 0) + count
    return dict(sorted(counts.items()))


def _sizes_text(counts: Mapping[int, int]) -> str:
    return "{" + ", ".join(f"batch size {size}: {count}" for size, count in counts.items()) + "}"


def _library_loaded(log_file: Path, offset: int, model: str, detail: str) -> tuple[bool, str]:
    """Whether the server's log, since ``offset``, says that it loaded ``model``'s strategy library."""
    with log_file.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    lines = [line for line in text.splitlines() if LOADED_LINE in line and f"for model {model}" in line]
    if not lines:
        return False, (
            f"{detail}; but the server's log has no '{LOADED_LINE} ... for model {model}' line: was "
            "batchstrategy.so in the model's directory?"
        )
    library = lines[-1].split(LOADED_LINE, 1)[1].split(" for model")[0].strip()
    return True, f"{detail}; the server loaded {library}"


def batching_strategy_results(
    checked: list[tuple[ModuleType, ModelSpec, str]], endpoints: Endpoints, log_file: Path | None, named: bool
) -> tuple[list[SmokeResult], list[str]]:
    """(a result per model, notes): the check of each (reference, spec, strategy) of ``checked``; a server
    that refuses model control gets a note instead (its queue delay cannot be lengthened)."""
    results, notes = [], []
    for reference, spec, strategy in checked:
        prefix = f"{spec.name}: " if named else ""
        try:
            result = check_batching_strategy(spec, reference, strategy, endpoints, log_file)
        except ServerError as err:
            if not refuses_model_control(err):
                results.append(
                    SmokeResult(f"{prefix}{CHECK_NAME} ({strategy})", "grpc", False, err.message, 0.0)
                )
                continue
            notes.append(
                f"the batching strategy of {spec.name} was not checked: the server does not take model "
                "control requests, and the check loads the model with a long queue delay (start it with "
                "--model-control-mode explicit)"
            )
            continue
        results.append(dataclasses.replace(result, name=prefix + result.name))
    return results, notes
