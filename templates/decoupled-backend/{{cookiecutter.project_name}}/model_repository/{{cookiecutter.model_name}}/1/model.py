{%- import "signature.j2" as sig with context -%}
{%- if sig.add_sub -%}
"""{{ cookiecutter.model_name }}: a decoupled Python model with the interface of Triton's "repeat" example.

For each request it streams one response per element of IN (OUT = IN[i], IDX = i), waiting DELAY[i]
milliseconds before each, then closes the stream with TRITONSERVER_RESPONSE_COMPLETE_FINAL. Its worker keeps
the request for at least WAIT milliseconds.

Threading: execute() only checks each request and hands it to a worker thread of its own, so the
instance takes the next request while earlier ones are still streaming. finalize() stops and joins
the workers.
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
MAX_DELAY_MS = 10000  # the longest DELAY (per element) and WAIT a request may ask for


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                f"model_transaction_policy.decoupled must be true for model '{args['model_name']}'"
            )
        self._stopping = threading.Event()
        self._workers_lock = threading.Lock()
        self._workers = set()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                values, delays_ms, wait_ms = self._read_request(request)
            except ValueError as err:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
                continue
            worker = threading.Thread(
                target=self._stream, args=(request, sender, values, delays_ms, wait_ms), daemon=True
            )
            with self._workers_lock:
                self._workers.add(worker)
            worker.start()
        # A decoupled model returns None: the responses go through the senders.
        return None

    def finalize(self):
        self._stopping.set()
        with self._workers_lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join()

    @staticmethod
    def _read_request(request):
        """IN, DELAY and WAIT of one request; Triton has already checked their data types and shapes."""
        values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
        delays_ms = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().reshape(-1)
        wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy().reshape(-1)
        if delays_ms.size != values.size:
            raise ValueError(
                f"input 'DELAY' must have one element per element of 'IN' ({values.size}), got {delays_ms.size}"
            )
        if wait.size != 1:
            raise ValueError(f"input 'WAIT' must have exactly one element, got {wait.size}")
        # A client chooses how long the model sleeps: bounded, so that no request can hold a stream (or a
        # model that waits for one) for hours.
        if delays_ms.size and delays_ms.max() > MAX_DELAY_MS:
            raise ValueError(f"input 'DELAY' must be at most {MAX_DELAY_MS} ms per element, got {delays_ms.max()}")
        if wait[0] > MAX_DELAY_MS:
            raise ValueError(f"input 'WAIT' must be at most {MAX_DELAY_MS} ms, got {wait[0]}")
        return values, delays_ms, int(wait[0])

    def _sleep_until(self, deadline):
        """Sleep until the monotonic time ``deadline``; False when the model is shutting down."""
        return not self._stopping.wait(max(0.0, deadline - time.monotonic()))

    def _stream(self, request, sender, values, delays_ms, wait_ms):
        """Runs on a worker thread: the whole response stream of one request, always ending with FINAL."""
        error = None
        start = time.monotonic()
        release_at = start + wait_ms / 1000.0
        send_at = start
        try:
            for i, value in enumerate(values):
                send_at += int(delays_ms[i]) / 1000.0
                if not self._sleep_until(send_at):
                    error = pb_utils.TritonError("the model is shutting down", pb_utils.TritonError.UNAVAILABLE)
                    break
                if sender.is_cancelled():
                    self.logger.log_verbose(f"stream cancelled by the client after {i} of {len(values)} responses")
                    error = pb_utils.TritonError("request cancelled by the client", pb_utils.TritonError.CANCELLED)
                    break
                # Your streaming logic goes here: produce the i-th result (a token, a chunk, a partial
                # result...) and send it. This example repeats IN[i].
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        except Exception as err:  # noqa: BLE001 - any failure must still close the stream
            self.logger.log_error(f"{request.request_id()}: stream failed: {err}")
            error = pb_utils.TritonError(f"stream failed: {err}")
        finally:
            try:
                if error is None:
                    sender.send(flags=FINAL)
                else:
                    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
            except Exception as err:  # noqa: BLE001 - nothing more can be sent to this client
                self.logger.log_error(f"{request.request_id()}: cannot close the stream: {err}")
            if error is None:
                self._sleep_until(release_at)  # keep the request until WAIT has passed
            with self._workers_lock:
                self._workers.discard(threading.current_thread())
{%- else -%}
{%- set c = cookiecutter -%}
{%- set mbs = c.max_batch_size|default(0)|int -%}
{%- set batched = mbs > 0 -%}
{#- A python variable for every tensor: its name in lower case, made unique and kept off keywords and the
    names compute() uses. -#}
{%- set taken = ['and', 'as', 'assert', 'async', 'await', 'break', 'class', 'continue', 'def', 'del', 'elif',
    'else', 'except', 'finally', 'for', 'from', 'global', 'if', 'import', 'in', 'is', 'lambda', 'nonlocal', 'not',
    'or', 'pass', 'raise', 'return', 'try', 'while', 'with', 'yield', 'match', 'case', 'type', 'np', 'pb_utils',
    'json', 'inputs', 'outputs', 'n', 'compute', 'filled', 'nonzero_count', 'byte_count', 'len', 'sum', 'str',
    'int', 'bytes', 'object'] -%}
{%- set var = {} -%}
{%- for t in sig.inputs + sig.outputs -%}
{%- set v = t.name|lower -%}
{%- set v = v ~ '_' if v in taken or v in var.values() else v -%}
{%- set v = v ~ loop.index if v in taken or v in var.values() else v -%}
{%- set _ = var.update({t.name: v}) -%}
{%- endfor -%}
{%- macro shape(t) -%}[{{ 'batch, ' if batched else '' }}{{ t.backend_dims|join(', ') }}]{%- endmacro -%}
{%- macro fill_dims(t) -%}
({% for d in t.backend_dims %}{{ 1 if d == -1 else d }}{{ ', ' if not loop.last else (',' if loop.length == 1 else '') }}{% endfor %})
{%- endmacro -%}
"""{{ c.model_name }}: a decoupled Python model, {{ sig.inputs|map(attribute='name')|join(', ') }} -> {{ sig.outputs|map(attribute='name')|join(', ') }}.

For each request it sends one response, computed by compute(), and puts the final flag
(TRITONSERVER_RESPONSE_COMPLETE_FINAL) on that same response. To stream, send several responses through
the request's sender and put the final flag on the last one (see execute()).

Your logic goes in `compute()` below. Keep reference.py in step with it: the project's tests and
`tbgen test` compare the streamed responses with reference.responses().
"""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

# The model's tensors, as config.pbtxt declares them: dims without the batch dimension, -1 = any size.
INPUTS = {  # name: (data type, dims, optional)
{%- for t in sig.inputs %}
    "{{ t.name }}": ("{{ t.config_type }}", [{{ t.dims|join(', ') }}], {{ 'True' if t.optional else 'False' }}),
{%- endfor %}
}
OUTPUTS = {  # name: (data type, dims)
{%- for t in sig.outputs %}
    "{{ t.name }}": ("{{ t.config_type }}", [{{ t.dims|join(', ') }}]),
{%- endfor %}
}


# ---- Your computation ------------------------------------------------------------------------------
def compute(inputs: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """The outputs of one response to a request, from the request's inputs.
{% if batched %}
    Every array has the batch axis first. BYTES tensors are numpy object arrays of bytes objects.
{%- else %}
    The arrays have the dims of config.pbtxt (the model does not batch). BYTES tensors are numpy object
    arrays of bytes objects.
{%- endif %}
    """
{%- for t in sig.inputs %}
    {{ var[t.name] }} = inputs["{{ t.name }}"]  # {{ t.datatype }} {{ shape(t) }}{{ ', optional: None when the request leaves it out' if t.optional else '' }}
{%- endfor %}

    # Your logic goes here: compute every output from the inputs above.
{%- set text = (sig.inputs|selectattr('datatype', 'equalto', 'BYTES')|list) %}
{%- if text %}
    # Strings arrive as bytes; decode them where you need text, e.g.
    #     strings = [s.decode("utf-8", "replace") for s in {{ var[text[0].name] }}.flat]
{%- endif %}
    # The placeholder below (reference.py computes the same): n = the number of non-zero elements of
    # every input given{{ ' in each batch row' if batched else '' }}, a BYTES element counting its length in bytes; every
    # element of every output is n, in the output's data type (a -1 in its dims has size 1).
{%- for t in sig.inputs %}
{%- set count = ('byte_count(' if t.datatype == 'BYTES' else 'nonzero_count(') ~ var[t.name] ~ ')' %}
{%- if loop.first %}
{%- if t.optional %}
    n = {{ count }} if {{ var[t.name] }} is not None else 0
{%- else %}
    n = {{ count }}
{%- endif %}
{%- elif t.optional %}
    if {{ var[t.name] }} is not None:
        n = n + {{ count }}
{%- else %}
    n = n + {{ count }}
{%- endif %}
{%- endfor %}
{% for t in sig.outputs %}
    {{ var[t.name] }} = filled(n, {{ fill_dims(t) }}, np.{{ t.np }})  # {{ t.datatype }} {{ shape(t) }}
{%- endfor %}
    return {
{%- for t in sig.outputs %}
        "{{ t.name }}": {{ var[t.name] }},
{%- endfor %}
    }


# Helpers of the placeholder computation.
{%- if batched %}
def nonzero_count(array: np.ndarray) -> np.ndarray:
    """The number of non-zero elements of each batch row."""
    return np.count_nonzero(array, axis=tuple(range(1, array.ndim))).astype(np.int64)


def byte_count(strings: np.ndarray) -> np.ndarray:
    """The total length in bytes of the BYTES elements of each batch row."""
    return np.array([sum(len(s) for s in row.flat) for row in strings], dtype=np.int64)
{%- else %}
def nonzero_count(array: np.ndarray) -> np.ndarray:
    """The number of non-zero elements of the request's array."""
    return np.int64(np.count_nonzero(array))


def byte_count(strings: np.ndarray) -> np.ndarray:
    """The total length in bytes of the request's BYTES elements."""
    return np.int64(sum(len(s) for s in strings.flat))
{%- endif %}


def filled(n: np.ndarray, dims: tuple[int, ...], dtype) -> np.ndarray:
    """An output of ``dims`` {{ 'per batch row, every element the row\'s n' if batched else 'with every element n' }}, in ``dtype``: integers wrap around,
    bool is n != 0, BYTES (object) the decimal string of n."""
    n = np.asarray(n, dtype=np.int64)
    if dtype is np.object_:
        value = np.array([str(v).encode() for v in n.flat], dtype=np.object_).reshape(n.shape)
    elif dtype is np.bool_:
        value = n != 0
    else:
        value = n.astype(dtype)
    return np.ascontiguousarray(np.broadcast_to(value.reshape(n.shape + (1,) * len(dims)), n.shape + dims))
# -----------------------------------------------------------------------------------------------------


class BadRequest(Exception):
    """A problem with one request's inputs; it is answered with an error, the other requests are not."""


def error_response(message: str, code=None) -> pb_utils.InferenceResponse:
    """An error response; INVALID_ARG unless ``code`` says otherwise."""
    return pb_utils.InferenceResponse(
        error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG if code is None else code)
    )


class TritonPythonModel:
    def initialize(self, args):
        """Check that the model is decoupled; read the data types of the tensors once."""
        self.model_name = args["model_name"]
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                f"model_transaction_policy.decoupled must be true for model '{self.model_name}'"
            )
        self.input_dtypes = {name: self._config_dtype(config, name, is_input=True) for name in INPUTS}
        self.output_dtypes = {name: self._config_dtype(config, name, is_input=False) for name in OUTPUTS}

    @staticmethod
    def _config_dtype(config, name, is_input):
        find = pb_utils.get_input_config_by_name if is_input else pb_utils.get_output_config_by_name
        tensor = find(config, name)
        if tensor is None:
            kind = "input" if is_input else "output"
            raise ValueError(f"config.pbtxt of model '{config['name']}' declares no {kind} '{name}'")
        return pb_utils.triton_string_to_numpy(tensor["data_type"])

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            # One response per request, the final flag on it. To stream, send each partial result with
            # sender.send(response) and flags=FINAL on the last one only; a final flag sent alone
            # (sender.send(flags=FINAL)) is an empty response that gRPC streams drop unless the client
            # asks for empty final responses.
            sender.send(self._respond(request), flags=FINAL)
        # A decoupled model returns None: the responses go through the senders.
        return None

    def _respond(self, request):
        if request.is_cancelled():
            return error_response("request cancelled", pb_utils.TritonError.CANCELLED)
        try:
            inputs = self._read_inputs(request)
        except BadRequest as err:
            return error_response(str(err))
        try:
            outputs = compute(inputs)
            return pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(name, np.asarray(outputs[name]).astype(self.output_dtypes[name], copy=False))
                    for name in OUTPUTS
                ]
            )
        except Exception as err:  # noqa: BLE001 - report it to this request, keep serving the others
            pb_utils.Logger.log_error(f"{self.model_name}: compute failed: {err}")
            return error_response(f"compute failed: {err}", pb_utils.TritonError.INTERNAL)

    def _read_inputs(self, request):
        """The inputs of one request as numpy arrays by name, each read once (None for an optional input
        the request leaves out); BadRequest if unusable."""
        inputs = {}
        for name, (_, _, optional) in INPUTS.items():
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                if not optional:
                    raise BadRequest(f"missing input '{name}'")
                inputs[name] = None
                continue
            array = tensor.as_numpy()
            if array.dtype != self.input_dtypes[name]:
                expected = np.dtype(self.input_dtypes[name]).name
                raise BadRequest(f"input '{name}' has data type {array.dtype.name}, expected {expected}")
            inputs[name] = array
        return inputs

    def finalize(self):
        pb_utils.Logger.log_info(f"{self.model_name}: finalized")
{%- endif %}
