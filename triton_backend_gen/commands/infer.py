"""``tbgen infer``: one request to a model, inputs from files, JSON or the project's reference.py."""

from __future__ import annotations

import json
import queue
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from triton_backend_gen import signature
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime import start_server
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.smoke import load_reference

# KServe v2 datatype names -> the numpy dtype tritonclient sends (BF16 travels as float32)
_NUMPY = {name: np.dtype(datatype.numpy) for name, datatype in signature.DATATYPES.items()}


def parse_input_option(option: str) -> tuple[str, Any]:
    """``NAME=FILE.npy`` -> (NAME, array); ``NAME=JSON`` -> (NAME, the parsed JSON value)."""
    name, sep, value = option.partition("=")
    if not sep or not name:
        raise UsageError(f"--input expects NAME=FILE.npy or NAME=JSON, got {option!r}.", "Example: --input INPUT0=[1,2,3]")
    if value.endswith(".npy"):
        try:
            return name, np.load(value, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(f"Cannot read {value} for input {name}: {err}", "Save it with numpy.save().") from err
    try:
        return name, json.loads(value)
    except json.JSONDecodeError as err:
        raise UsageError(f"Input {name}: {value!r} is neither a .npy file nor JSON ({err}).",
                         "Example: --input INPUT0='[[1, 2], [3, 4]]'") from err


def build_inputs(metadata: dict, config: dict, given: dict[str, Any], reference: Any | None) -> dict[str, np.ndarray]:
    """Every input of the model: given ones cast to the declared datatype, the rest from reference.make_inputs
    (optional inputs only when it makes them)."""
    declared = {i["name"]: i["datatype"] for i in metadata["inputs"]}
    optional = {i["name"] for i in config.get("input", []) if i.get("optional")}
    inputs = _given_inputs(metadata["name"], declared, given)
    missing = [name for name in declared if name not in inputs and name not in optional]
    if missing and reference is not None:
        generated = reference.make_inputs(1 if int(config.get("max_batch_size", 0)) > 0 else None)
        inputs.update({name: generated[name] for name in declared if name not in inputs and name in generated})
        missing = [name for name in declared if name not in inputs and name not in optional]
    if missing:
        source = " (the project's reference.py makes no value for it)" if reference is not None else ""
        raise UsageError(f"No value for input {', '.join(missing)} of model {metadata['name']}{source}.",
                         "Pass --input NAME=FILE.npy or NAME=JSON for each.")
    return inputs


def _given_inputs(model: str, declared: dict[str, str], given: dict[str, Any]) -> dict[str, np.ndarray]:
    """The --input values as arrays of their declared datatypes; UsageError for unknown names or misfits."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise UsageError(f"Model {model} has no input {', '.join(unknown)}.", f"Its inputs: {', '.join(declared)}")
    try:
        return {name: np.asarray(value, dtype=_NUMPY[declared[name]]) for name, value in given.items()}
    except (ValueError, TypeError, OverflowError) as err:
        raise UsageError(f"An --input value does not fit its declared datatype: {err}",
                         f"Model {model} expects: " + ", ".join(f"{n} {t}" for n, t in declared.items())) from err


def infer_once(
    model: str, input_options: list[str], *, project: Project | None, url: str | None = None,
    server: Path | None = None, instance_kind: str | None = None,
) -> dict[str, np.ndarray]:
    """Run one request against ``url``, or against a server started (and stopped) for ``project``; inputs not
    given come from the project's reference.py (when there is a project)."""
    given = dict(parse_input_option(option) for option in input_options)
    path = _reference_of(project, model) if project is not None else None
    reference = load_reference(path) if path is not None and path.is_file() else None
    if url is None and project is None:
        raise UsageError("No tbgen project here to start a server for, and no --url.",
                         "Run inside a project (or pass --project DIR), or give --url HOST:PORT of a running server.")
    with ExitStack() as stack:
        if url is None:
            stack.enter_context(stop_on_signals())
            triton = stack.enter_context(start_server(project, server=server, instance_kind=instance_kind))
            http_url, grpc_url = triton.http_url, triton.grpc_url
        else:
            http_url, grpc_url = url, None
        http = httpclient.InferenceServerClient(http_url)
        stack.callback(http.close)
        metadata, config = _model_of(http, model, http_url)
        inputs = build_inputs(metadata, config, given, reference)
        outputs = [o["name"] for o in metadata["outputs"]]
        try:
            if not config.get("model_transaction_policy", {}).get("decoupled", False):
                return _infer_http(http, model, inputs, outputs)
            if grpc_url is None:
                raise UsageError("Decoupled models stream over gRPC; --url names an HTTP endpoint.",
                                 "Drop --url to let tbgen start the project's server.")
            return _stream_once(grpcclient, grpc_url, model, inputs, outputs)
        except InferenceServerException as err:
            raise ServerError(f"The request failed: {err.message()}", "Check the inputs' names, shapes and types.") from err


def _infer_http(http: httpclient.InferenceServerClient, model: str, inputs: dict[str, np.ndarray],
                outputs: list[str]) -> dict[str, np.ndarray]:
    tensors = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), _datatype(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = http.infer(model, tensors)
    return {name: result.as_numpy(name) for name in outputs}


def _model_of(http: httpclient.InferenceServerClient, model: str, url: str) -> tuple[dict, dict]:
    """The metadata and config of ``model``; ServerError for a model that is not there or a server that is not."""
    try:
        return http.get_model_metadata(model), http.get_model_config(model)
    except InferenceServerException as err:
        raise ServerError(f"Model {model!r} is not available: {err.message()}",
                          "Check `tbgen serve` for the models and their states.") from err
    except (OSError, ConnectionError) as err:  # nothing listens there, or it hung up
        raise ServerError(f"No Triton server answers at {url}: {err}",
                          "Start one (tbgen serve), or give --url the HTTP host:port of a running server.") from err


def _datatype(array: np.ndarray) -> str:
    return np_to_triton_dtype(array.dtype)


def _stream_once(grpcclient: Any, url: str, model: str, inputs: dict, outputs: list[str]) -> dict[str, np.ndarray]:
    """A decoupled model's responses to one request, each output stacked over the responses."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), _datatype(array))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    responses: list = []
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(model, tensors, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=60)
            if error is not None:
                raise error
            final = result.get_response().parameters.get("triton_final_response")
            if result.get_response().outputs:
                responses.append({name: result.as_numpy(name) for name in outputs})
            if final is not None and final.bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    return {name: np.stack([r[name] for r in responses]) if responses else np.array([]) for name in outputs}


def _reference_of(project: Project, model: str) -> Path:
    """The reference of ``model``: its [[models]] entry's, or the project's reference.py."""
    entry: ModelEntry | None = next((entry for entry in project.models if entry.name == model), None)
    return entry.reference if entry is not None and entry.reference is not None else project.reference_file
