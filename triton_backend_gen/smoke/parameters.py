"""Request parameters: a model that reads request parameters and answers each back as a response parameter
(tbgen.toml's ``parameters = { name = "default" }``), checked over HTTP and gRPC (a decoupled model over a
gRPC stream)."""

from __future__ import annotations

import itertools
from types import ModuleType

from triton_backend_gen import versions
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.clients import (
    Endpoints,
    Stream,
    assert_healthy,
    error_text,
    infer_result,
    open_client,
    output_arrays,
    response_parameters,
)
from triton_backend_gen.smoke.compare import assert_outputs_match
from triton_backend_gen.smoke.model import ModelSpec
from triton_backend_gen.smoke.run import SmokeResult

tritonutils = lazy_module("tritonclient.utils")

# The first release whose python backend sets response parameters
# (pb_utils.InferenceResponse(parameters=...)).
PYTHON_RESPONSE_PARAMETERS = (25, 2)
_values = itertools.count(1)


def python_backend_sets_response_parameters(endpoints: Endpoints) -> bool:
    """Whether the running server's python backend can set response parameters (its release, asked of the
    server)."""
    with open_client("http", endpoints) as client:
        version = str(client.get_server_metadata().get("version", ""))
    try:
        release = versions.resolve(version)
    except Exception:  # noqa: BLE001 - a server tbgen does not know: a newer one
        return True
    year, month = (int(part) for part in release.container.split("."))
    return (year, month) >= PYTHON_RESPONSE_PARAMETERS


def _send(
    spec: ModelSpec, protocol: str, endpoints: Endpoints, inputs: dict, parameters: dict | None
) -> tuple[dict, list[dict]]:
    """(outputs, the parameters of each response with data) of one request sent with ``parameters``;
    InferenceServerException or AssertionError (a stream's error) when it is refused."""
    if spec.decoupled:
        with Stream(endpoints) as stream:
            results = stream.infer_results(spec, inputs, "parameters", parameters=parameters)
        if not results:
            raise AssertionError("no response with data")
    else:
        with open_client(protocol, endpoints) as client:
            results = [infer_result(protocol, client, spec, inputs, parameters=parameters)]
    return output_arrays(results[0], spec.output_names), [response_parameters(r) for r in results]


def _check_answered(
    spec: ModelSpec,
    protocol: str,
    endpoints: Endpoints,
    inputs: dict,
    expected: dict,
    tolerance: dict,
    name: str,
    sent: str | None,
    want: str,
    answers_back: bool,
) -> None:
    """Send ``name`` with the value ``sent`` (None: left out): the outputs must match ``expected`` and, when
    ``answers_back``, every response parameter ``name`` must equal ``want``."""
    outputs, each = _send(spec, protocol, endpoints, inputs, {name: sent} if sent is not None else None)
    what = f"a request with {name}={sent!r}" if sent is not None else f"a request without {name}"
    assert_outputs_match(outputs, expected, tolerance, what)
    wrong = [found for found in each if found.get(name) != want]
    if answers_back and wrong:
        raise AssertionError(
            f"{what} was answered with response parameter {name}={wrong[0].get(name)!r}, "
            f"expected {want!r} (response parameters: {wrong[0]})"
        )


def _check_wrong_type_refused(
    spec: ModelSpec, protocol: str, endpoints: Endpoints, inputs: dict, name: str
) -> None:
    """Send ``name`` as an integer: it must be refused with a message naming the parameter, and the model stay
    healthy afterwards (a decoupled model is asked over gRPC, the protocol its stream used)."""
    try:
        _send(spec, protocol, endpoints, inputs, {name: 7})
    except (tritonutils.InferenceServerException, AssertionError) as err:
        refusal = error_text(err) if isinstance(err, tritonutils.InferenceServerException) else str(err)
    else:
        raise AssertionError(
            f"a request with {name}=7 (an integer, not a string) was answered instead of refused"
        )
    if name not in refusal:
        raise AssertionError(f"the refusal of {name}=7 does not name the parameter: {refusal[:200]}")
    health_protocol = "grpc" if spec.decoupled else protocol
    with open_client(health_protocol, endpoints) as client:
        assert_healthy(client, spec, health_protocol, f"a request with {name}=7")


def _parameters_summary(parameters: tuple[tuple[str, str], ...], answers_back: bool) -> str:
    """The detail line of a passed request-parameters check."""
    names = ", ".join(name for name, _ in parameters)
    if not answers_back:
        return (
            f"{names} accepted and the answers right; not answered back: this server's python backend "
            "sets no response parameters (25.02 and later do); a wrong type refused"
        )
    return (
        f"{names} answered back as response parameters (the value sent, or the default); a wrong type refused"
    )


def check_request_parameters(
    spec: ModelSpec,
    reference: ModuleType,
    parameters: tuple[tuple[str, str], ...],
    protocol: str,
    endpoints: Endpoints,
    answers_back: bool,
) -> str:
    """Each parameter sent with a value of its own, left out, and with a value of the wrong type (an integer):
    the first two answered as reference.py says with the response parameter equal to the value sent, or to its
    default (when ``answers_back``: the python backend before 25.02 sets no response parameters), the third
    refused."""
    batch = 1 if spec.max_batch_size > 0 else None
    inputs = reference.make_inputs(batch, seed=3)
    expected = reference.responses(inputs)[0] if spec.decoupled else reference.compute(inputs)
    for name, default in parameters:
        sent = f"tbgen-{next(_values)}"
        _check_answered(
            spec, protocol, endpoints, inputs, expected, reference.TOLERANCE, name, sent, sent, answers_back
        )
        _check_answered(
            spec,
            protocol,
            endpoints,
            inputs,
            expected,
            reference.TOLERANCE,
            name,
            None,
            default,
            answers_back,
        )
        _check_wrong_type_refused(spec, protocol, endpoints, inputs, name)
    return _parameters_summary(parameters, answers_back)


def request_parameters_results(
    endpoints: Endpoints, models: list[tuple[ModuleType, ModelSpec, bool, tuple]], named: bool = False
) -> list[SmokeResult]:
    """One result per protocol per model that declares request parameters: (reference, spec, whether the
    python backend serves it, parameters) each; ``named``: each result's name starts with its model's."""
    python_answers = None
    results = []
    for reference, spec, python, parameters in models:
        if python and python_answers is None:
            python_answers = python_backend_sets_response_parameters(endpoints)
        answers_back = not python or bool(python_answers)
        for protocol in ("grpc",) if spec.decoupled else ("http", "grpc"):
            try:
                passed, detail = (
                    True,
                    check_request_parameters(spec, reference, parameters, protocol, endpoints, answers_back),
                )
            except AssertionError as err:
                passed, detail = False, str(err)
            except Exception as err:  # noqa: BLE001 - a check that breaks is a failed check, with its reason
                passed, detail = False, f"{type(err).__name__}: {error_text(err)}"
            prefix = f"{spec.name}: " if named else ""
            results.append(SmokeResult(f"{prefix}request parameters", protocol, passed, detail, 0.0))
    return results
