"""``tbgen infer``: one request to a model, inputs from files, JSON or the project's reference.py."""

from __future__ import annotations

import json
import queue
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_backend_gen import signature
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime import TritonServer, start_server
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.smoke import load_reference, output_arrays
from triton_backend_gen.smoke.model import sequence_spec

json_format = lazy_module("google.protobuf.json_format")
np = lazy_module("numpy")
grpcclient = lazy_module("tritonclient.grpc")
model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")
httpclient = lazy_module("tritonclient.http")
tritonutils = lazy_module("tritonclient.utils")


def parse_input_option(option: str) -> tuple[str, Any]:
    """``NAME=FILE.npy`` -> (NAME, array); ``NAME=JSON`` -> (NAME, the parsed JSON value)."""
    name, sep, value = option.partition("=")
    if not sep or not name:
        raise UsageError(
            f"--input expects NAME=FILE.npy or NAME=JSON, got {option!r}.", "Example: --input INPUT0=[1,2,3]"
        )
    if value.endswith(".npy"):
        try:
            return name, np.load(value, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(
                f"Cannot read {value} for input {name}: {err}", "Save it with numpy.save()."
            ) from err
    try:
        return name, json.loads(value)
    except json.JSONDecodeError as err:
        raise UsageError(
            f"Input {name}: {value!r} is neither a .npy file nor JSON ({err}).",
            "Example: --input INPUT0='[[1, 2], [3, 4]]'",
        ) from err


def build_inputs(
    metadata: dict, config: dict, given: dict[str, Any], reference: Any | None
) -> dict[str, np.ndarray]:
    """Every input of the model: given ones cast to the declared datatype, the rest from reference.make_inputs
    (optional inputs only when it makes them)."""
    declared = {i["name"]: i["datatype"] for i in metadata["inputs"]}
    optional = {i["name"] for i in config.get("input", []) if i.get("optional")}
    inputs = _given_inputs(metadata["name"], declared, given)

    def missing() -> list[str]:
        return [name for name in declared if name not in inputs and name not in optional]

    if missing() and reference is not None:
        generated = reference.make_inputs(1 if int(config.get("max_batch_size", 0)) > 0 else None)
        inputs.update(
            {name: generated[name] for name in declared if name not in inputs and name in generated}
        )
    if missing():
        source = " (the project's reference.py makes no value for it)" if reference is not None else ""
        raise UsageError(
            f"No value for input {', '.join(missing())} of model {metadata['name']}{source}.",
            "Pass --input NAME=FILE.npy or NAME=JSON for each.",
        )
    return inputs


def _given_inputs(model: str, declared: dict[str, str], given: dict[str, Any]) -> dict[str, np.ndarray]:
    """The --input values as arrays of their declared datatypes; UsageError for unknown names or misfits."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise UsageError(
            f"Model {model} has no input {', '.join(unknown)}.", f"Its inputs: {', '.join(declared)}"
        )
    try:
        return {
            name: np.asarray(value, dtype=np.dtype(signature.DATATYPES[declared[name]].numpy))
            for name, value in given.items()
        }
    except (ValueError, TypeError, OverflowError) as err:
        raise UsageError(
            f"An --input value does not fit its declared datatype: {err}",
            f"Model {model} expects: " + ", ".join(f"{n} {t}" for n, t in declared.items()),
        ) from err


def parse_param_option(option: str) -> tuple[str, bool | int | str]:
    """``KEY=VALUE`` -> (key, value): true/false as a bool, an integer as an int, anything else a string."""
    key, sep, text = option.partition("=")
    if not sep or not key.strip():
        raise UsageError(
            f"--param expects KEY=VALUE, got {option!r}.", "Example: --param scale=2 --param mode=fast"
        )
    key, text = key.strip(), text.strip()
    if key.startswith("sequence_") or key in ("priority", "timeout", "binary_data_output"):
        raise UsageError(
            f"--param {key} is a parameter Triton reserves for itself.",
            "Use --sequence-id/--start/--end for sequences, or another parameter name.",
        )
    if text.lower() in ("true", "false"):
        return key, text.lower() == "true"
    try:
        return key, int(text)
    except ValueError:
        return key, text


@dataclass(frozen=True)
class Sequencing:
    """What `tbgen infer` says of the request's sequence: its correlation ID (None: a fresh one of the model's
    kind) and its START/END flags. A request to a sequence model is by default a sequence of its own."""

    id: int | str | None = None
    start: bool = True
    end: bool = True


def infer_once(
    model: str,
    input_options: list[str],
    *,
    project: Project | None,
    url: str | None = None,
    server: Path | None = None,
    instance_kind: str | None = None,
    param_options: list[str] = (),
    sequencing: Sequencing = Sequencing(),
    on_parameters: Callable[[dict], None] = lambda parameters: None,
    on_server: Callable[[TritonServer], None] = lambda triton: None,
) -> dict[str, np.ndarray]:
    """Run one request against ``url``, or against a server started (and stopped) for ``project``; inputs not
    given come from the project's reference.py (when there is a project). ``param_options`` (KEY=VALUE) are
    sent as request parameters; the response's parameters go to ``on_parameters``. A request to a sequence
    model carries ``sequencing``. ``on_server`` hears of the server started for the request (its notes)."""
    given = dict(parse_input_option(option) for option in input_options)
    parameters = dict(parse_param_option(option) for option in param_options)
    path = _reference_of(project, model) if project is not None else None
    reference = load_reference(path) if path is not None and path.is_file() else None
    if url is None and project is None:
        raise UsageError(
            "No tbgen project here to start a server for, and no --url.",
            "Run inside a project (or pass --project DIR), or give --url HOST:PORT of a running server.",
        )
    with ExitStack() as stack:
        if url is None:
            stack.enter_context(stop_on_signals())
            triton = stack.enter_context(start_server(project, server=server, instance_kind=instance_kind))
            on_server(triton)
            http_url, grpc_url = triton.http_url, triton.grpc_url
        else:
            http_url, grpc_url = url, None
        http = httpclient.InferenceServerClient(http_url)
        stack.callback(http.close)
        metadata, config = _model_of(http, model, http_url)
        inputs = build_inputs(metadata, config, given, reference)
        outputs = [o["name"] for o in metadata["outputs"]]
        sequence = _sequence_kwargs(config, sequencing)
        try:
            if not config.get("model_transaction_policy", {}).get("decoupled", False):
                return _infer_http(http, model, inputs, outputs, parameters, sequence, on_parameters)
            if grpc_url is None:
                raise UsageError(
                    "Decoupled models stream over gRPC; --url names an HTTP endpoint.",
                    "Drop --url to let tbgen start the project's server.",
                )
            return _stream_once(grpcclient, grpc_url, model, inputs, outputs, parameters)
        except tritonutils.InferenceServerException as err:
            raise ServerError(
                f"The request failed: {err.message()}", "Check the inputs' names, shapes and types."
            ) from err


def _sequence_kwargs(config: dict, sequencing: Sequencing) -> dict[str, Any]:
    """tritonclient's sequence arguments for a model with sequence batching ({} for other models)."""
    if "sequence_batching" not in config:
        if sequencing.id is not None:
            raise UsageError(
                "--sequence-id is for a model with sequence batching; this one has none.",
                "Drop --sequence-id/--start/--end.",
            )
        return {}
    parsed = json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
    string_ids = sequence_spec(parsed).string_ids
    sequence_id = sequencing.id if sequencing.id is not None else ("tbgen-infer" if string_ids else 1)
    if not string_ids and not (isinstance(sequence_id, int) and sequence_id > 0):
        raise UsageError(
            f"This model's correlation IDs are unsigned integers, got --sequence-id {sequence_id!r}.",
            "Example: --sequence-id 42",
        )
    return {
        "sequence_id": sequence_id if not string_ids else str(sequence_id),
        "sequence_start": sequencing.start,
        "sequence_end": sequencing.end,
    }


def _infer_http(
    http: httpclient.InferenceServerClient,
    model: str,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    parameters: dict[str, Any],
    sequence: dict[str, Any],
    on_parameters: Callable[[dict], None],
) -> dict[str, np.ndarray]:
    tensors = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), _datatype(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = http.infer(model, tensors, parameters=parameters or None, **sequence)
    if result.get_response().get("parameters"):
        on_parameters(result.get_response()["parameters"])
    return output_arrays(result, outputs)


def _model_of(http: httpclient.InferenceServerClient, model: str, url: str) -> tuple[dict, dict]:
    """The metadata and config of ``model``; ServerError for a model that is not there or a server that is
    not."""
    try:
        return http.get_model_metadata(model), http.get_model_config(model)
    except tritonutils.InferenceServerException as err:
        raise ServerError(
            f"Model {model!r} is not available: {err.message()}",
            "Check `tbgen serve` for the models and their states.",
        ) from err
    except (OSError, ConnectionError) as err:  # nothing listens there, or it hung up
        raise ServerError(
            f"No Triton server answers at {url}: {err}",
            "Start one (`tbgen serve`), or give --url the HTTP host:port of a running server.",
        ) from err


def _datatype(array: np.ndarray) -> str:
    return tritonutils.np_to_triton_dtype(array.dtype)


def _stream_once(
    grpcclient: Any, url: str, model: str, inputs: dict, outputs: list[str], parameters: dict[str, Any]
) -> dict[str, np.ndarray]:
    """A decoupled model's responses to one request, each output stacked over the responses."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), _datatype(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    responses: list = []
    finished = False
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(
            model, tensors, enable_empty_final_response=True, parameters=parameters or None
        )
        while True:
            result, error = results.get(timeout=60)
            if error is not None:
                raise error
            final = result.get_response().parameters.get("triton_final_response")
            if result.get_response().outputs:
                responses.append(output_arrays(result, outputs))
            if final is not None and final.bool_param:
                break
        finished = True
    finally:
        # On an error or Ctrl-C, cancel what is in flight rather than wait for the model to finish streaming.
        client.stop_stream(cancel_requests=not finished)
        client.close()
    return {name: np.stack([r[name] for r in responses]) if responses else np.array([]) for name in outputs}


def _reference_of(project: Project, model: str) -> Path:
    """The reference of ``model``: its [[models]] entry's, or the project's reference.py."""
    entry: ModelEntry | None = next((entry for entry in project.models if entry.name == model), None)
    return entry.reference if entry is not None and entry.reference is not None else project.reference_file
