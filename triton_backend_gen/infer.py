"""``tbgen infer``: one request to a model, inputs from files, JSON or the project's reference.py."""

from __future__ import annotations

import json
import queue
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from triton_backend_gen.errors import ServerError, UsageError

# KServe v2 datatype names -> numpy
_NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
    "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_,
}


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
    """Every input of the model: given ones cast to the declared datatype, the rest from reference.make_inputs."""
    declared = {i["name"]: i["datatype"] for i in metadata["inputs"]}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise UsageError(f"Model {metadata['name']} has no input {', '.join(unknown)}.",
                         f"Its inputs: {', '.join(declared)}")
    inputs = {name: np.asarray(value, dtype=_NUMPY[declared[name]]) for name, value in given.items()}
    missing = [name for name in declared if name not in inputs]
    if missing:
        if reference is None:
            raise UsageError(f"No value for input {', '.join(missing)}.", "Pass --input NAME=FILE.npy or NAME=JSON.")
        batch = 1 if int(config.get("max_batch_size", 0)) > 0 else None
        generated = reference.make_inputs(batch)
        inputs.update({name: generated[name] for name in missing})
    return inputs


def infer_once(
    model: str, input_options: list[str], *, project: Path, url: str | None = None, server: Path | None = None
) -> dict[str, np.ndarray]:
    """Run one request against ``url``, or against a server started (and stopped) for ``project``."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    from triton_backend_gen.project import find_project_root
    from triton_backend_gen.smoke import load_reference

    given = dict(parse_input_option(option) for option in input_options)
    root = find_project_root(project)
    reference = load_reference(root) if root and (root / "reference.py").is_file() else None
    with ExitStack() as stack:
        if url is None:
            from triton_backend_gen.runtime.server import start_server, stop_on_signals

            stack.enter_context(stop_on_signals())
            triton = stack.enter_context(start_server(project, server=server))
            http_url, grpc_url = triton.http_url, triton.grpc_url
        else:
            http_url, grpc_url = url, None
        http = httpclient.InferenceServerClient(http_url)
        stack.callback(http.close)
        try:
            metadata = http.get_model_metadata(model)
            config = http.get_model_config(model)
        except InferenceServerException as err:
            raise ServerError(f"Model {model!r} is not available: {err.message()}",
                              "Check `tbgen serve` for the models and their states.") from err
        inputs = build_inputs(metadata, config, given, reference)
        decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)
        try:
            if not decoupled:
                tensors = []
                for name, array in inputs.items():
                    tensor = httpclient.InferInput(name, list(array.shape), _datatype(array))
                    tensor.set_data_from_numpy(array)
                    tensors.append(tensor)
                result = http.infer(model, tensors)
                return {o["name"]: result.as_numpy(o["name"]) for o in metadata["outputs"]}
            if grpc_url is None:
                raise UsageError("Decoupled models stream over gRPC; --url names an HTTP endpoint.",
                                 "Drop --url to let tbgen start the project's server.")
            return _stream_once(grpcclient, grpc_url, model, inputs, [o["name"] for o in metadata["outputs"]])
        except InferenceServerException as err:
            raise ServerError(f"The request failed: {err.message()}", "Check the inputs' names, shapes and types.") from err


def _datatype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

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
