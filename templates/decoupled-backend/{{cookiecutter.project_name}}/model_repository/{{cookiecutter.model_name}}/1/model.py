{%- import "signature.j2" as sig with context -%}
{%- if sig.add_sub -%}
"""{{ cookiecutter.model_name }}: a decoupled Python model with the interface of Triton's "repeat" example.

For each request it streams one response per element of IN (OUT = IN[i], IDX = i), waiting DELAY[i]
milliseconds before each, then closes the stream with TRITONSERVER_RESPONSE_COMPLETE_FINAL. Its worker keeps
the request for at least WAIT milliseconds.

Threading: execute() only checks each request and hands it to a worker thread of its own, so the
instance takes the next request while earlier ones are still streaming. finalize() stops and joins
the workers.
{%- if cookiecutter.custom_metrics %}

Custom metrics (served with Triton's own on the metrics port, /metrics): requests_process_latency_ns, a counter
of the time from the start of `execute` to the end of each request's stream, summed over requests, and
execution_batch_size, a histogram of the requests of each execution. Both are labelled with the model's name
and version.
{%- endif %}
{%- if cookiecutter.request_parameters %}

Request parameters: a request may carry the string parameter "tag" ("untagged" when it has none); a tag
that is not a string gets an INVALID_ARG error. Every data response carries the tag back as its response
parameter "tag" where the python backend supports response parameters (release 25.02 and later; initialize()
checks once and logs when it cannot).
{%- endif %}
"""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
MAX_DELAY_MS = 10000  # the longest DELAY (per element) and WAIT a request may ask for
{%- if cookiecutter.custom_metrics %}
BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128]  # upper bounds of execution_batch_size's buckets
{%- endif %}
{%- if cookiecutter.request_parameters %}


{% set tag_error = "ValueError" %}{% include "python_tag.py.j2" %}
{%- endif %}


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
{%- if cookiecutter.custom_metrics %}
        # Latency of streams finished on worker threads, added to the counter by execute(): the 24.10 python
        # stub is not safe against metric updates from several threads at once.
        self._finished_latency_ns = 0
        # Custom metrics, on Triton's metrics endpoint with its own (the model owns them: see finalize).
        labels = {"model": args["model_name"], "version": args["model_version"]}
        self.latency_family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.latency = self.latency_family.Metric(labels=labels)
        self.batch_size_family = pb_utils.MetricFamily(
            name="execution_batch_size",
            description="Requests per execution",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.batch_size = self.batch_size_family.Metric(labels=labels, buckets=BATCH_SIZE_BUCKETS)
{%- endif %}
{%- if cookiecutter.request_parameters %}
        self.response_parameters = response_parameters_supported()
        if not self.response_parameters:
            self.logger.log_warn(f"{args['model_name']}: this python backend sends no response parameters (they "
                                 "need release 25.02): responses carry no 'tag'")
{%- endif %}

    def execute(self, requests):
{%- if cookiecutter.custom_metrics %}
        started = time.monotonic_ns()
        # The python backend counts every request of the execution (execution_count, inference_count).
        self.batch_size.observe(len(requests))
        with self._workers_lock:
            finished, self._finished_latency_ns = self._finished_latency_ns, 0
        if finished:
            self.latency.increment(finished)
{%- endif %}
        for request in requests:
            sender = request.get_response_sender()
            try:
                values, delays_ms, wait_ms = self._read_request(request)
{%- if cookiecutter.request_parameters %}
                tag = request_tag(request)
{%- endif %}
            except ValueError as err:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
{%- if cookiecutter.custom_metrics %}
                self.latency.increment(time.monotonic_ns() - started)
{%- endif %}
                continue
            worker = threading.Thread(
                target=self._stream, args=(request, sender, values, delays_ms, wait_ms{{ ', tag' if cookiecutter.request_parameters else '' }}{{ ', started' if cookiecutter.custom_metrics else '' }}), daemon=True
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
{%- if cookiecutter.custom_metrics %}
        # The model owns its metrics: removing them (each metric before its family) takes them off /metrics.
        del self.latency, self.batch_size, self.latency_family, self.batch_size_family
{%- endif %}

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

    def _stream(self, request, sender, values, delays_ms, wait_ms{{ ', tag' if cookiecutter.request_parameters else '' }}{{ ', started_ns' if cookiecutter.custom_metrics else '' }}):
        """Runs on a worker thread: the whole response stream of one request, always ending with FINAL.
{%- if cookiecutter.request_parameters %}
        ``tag`` is the request's tag, sent back with every response.
{%- endif %}
{%- if cookiecutter.custom_metrics %}
        ``started_ns`` is when execute began (for requests_process_latency_ns).
{%- endif %}
{%- if cookiecutter.request_parameters or cookiecutter.custom_metrics %}
        """
{%- else %}"""{% endif %}
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
{%- if cookiecutter.request_parameters %}
                if self.response_parameters:
                    sender.send(pb_utils.InferenceResponse(output_tensors=outputs, parameters={TAG: tag}))
                    continue
{%- endif %}
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
{%- if cookiecutter.custom_metrics %}
            with self._workers_lock:
                self._finished_latency_ns += time.monotonic_ns() - started_ns
{%- endif %}
            if error is None:
                self._sleep_until(release_at)  # keep the request until WAIT has passed
            with self._workers_lock:
                self._workers.discard(threading.current_thread())
{%- else -%}
{%- set c = cookiecutter -%}
{%- set mbs = c.max_batch_size|default(0)|int -%}
{%- set batched = mbs > 0 -%}
{%- if sig.accumulator -%}
{%- set direct = sig.sequence == 'direct' -%}
{%- set metrics = c.custom_metrics -%}
{%- set tag = c.request_parameters -%}
{%- set t = sig.inputs[0] -%}
"""{{ c.model_name }}: a decoupled stateful Python model under Triton's sequence batcher ({{ sig.sequence }} strategy).

Inputs:  {{ sig.inputs|map(attribute='name')|join(', ') }}
Outputs: {{ sig.outputs|map(attribute='name')|join(', ') }}, each the running sum of {{ t.name }} over the requests of its sequence

Each request belongs to a sequence and gets exactly one response through its response sender: its outputs
(or its error) with the final flag (TRITONSERVER_RESPONSE_COMPLETE_FINAL) on that same response. Triton's
sequence batcher routes every request of a sequence to the same model instance and sets the control inputs
START, END and READY. This file keeps each sequence's state itself (the python backend has no implicit state):
{%- if direct %}
  direct: a sequence holds one batch slot of the instance from its START to its END, and the request at
  position i of `requests` belongs to slot i. A slot below the highest busy one that has no request in this
  batch is filled with a null request (READY 0, meaningless data), answered with an empty response and
  otherwise ignored. The state is one row per slot, zeroed on START and on END.
{%- else %}
  oldest: the requests of up to max_candidate_sequences sequences are batched together, at most one per
  sequence, so the state is kept per correlation ID: created on START (a correlation ID that starts again
  starts from zero), dropped on END, and dropped once the sequence has been idle long enough that Triton has
  ended it (twice its idle timeout, max_sequence_idle_microseconds).
{%- endif %}

Your logic goes in `step()` below. Keep reference.py's step() in step with it: the project's tests compare the
streamed responses with reference.compute_sequence().
{%- if metrics %}

Custom metrics (served with Triton's own on the metrics port, /metrics): requests_process_latency_ns, a counter
of the time from the start of `execute` to each response, summed over requests, and execution_batch_size, a
histogram of the requests with data of each execution. Both are labelled with the model's name and version.
{%- endif %}
{%- if tag %}

Request parameters: a request may carry the string parameter "tag" ("untagged" when it has none); a tag
that is not a string gets an INVALID_ARG error. Every data response carries the tag back as its response
parameter "tag" where the python backend supports response parameters (release 25.02 and later; initialize()
checks once and logs when it cannot).
{%- endif %}
"""
{%- else -%}
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
{%- endif %}

from __future__ import annotations

import json
{%- if sig.accumulator %}
import time
{%- endif %}

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

# The model's tensors, as config.pbtxt declares them: dims without the batch dimension{{ '' if sig.accumulator else ', -1 = any size' }}.
INPUTS = {  # name: (data type, dims, optional)
{%- for i in sig.inputs %}
    "{{ i.name }}": ("{{ i.config_type }}", [{{ i.dims|join(', ') }}], {{ 'True' if i.optional else 'False' }}),
{%- endfor %}
}
OUTPUTS = {  # name: (data type, dims)
{%- for o in sig.outputs %}
    "{{ o.name }}": ("{{ o.config_type }}", [{{ o.dims|join(', ') }}]),
{%- endfor %}
}
{%- if sig.accumulator %}
MAX_BATCH_SIZE = {{ mbs }}
SUMMED = "{{ t.name }}"  # the input whose running sum every output is: the state has its data type and dims
{%- if metrics %}
BATCH_SIZE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128]  # upper bounds of execution_batch_size's buckets
{%- endif %}
{%- endif %}


# ---- Your computation ------------------------------------------------------------------------------
{%- if sig.accumulator %}
def step(state: np.ndarray, inputs: dict[str, np.ndarray | None]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One request of a sequence: ``state`` is the sequence's state before it (zeros on START), {{ t.datatype }}
    {{ t.dims }}, and ``inputs`` the request's inputs without the batch axis. Returns the new state (the same
    shape and data type) and the request's outputs (without the batch axis)."""
    # Your logic goes here. The running sum below is what reference.step() computes{{ ' (the other inputs are not used)' if sig.inputs|length > 1 else '' }}.
{%- if t.datatype == 'FP16' %}
    # Added in float32 and rounded to half precision after each request.
    state = (state.astype(np.float32) + inputs[SUMMED].astype(np.float32)).astype(np.float16)
{%- elif t.datatype.startswith('INT') or t.datatype.startswith('UINT') %}
    state = np.add(state, inputs[SUMMED], dtype=state.dtype)  # {{ t.datatype }} sums wrap around
{%- else %}
    state = np.add(state, inputs[SUMMED], dtype=state.dtype)
{%- endif %}
    return state, {name: state for name in OUTPUTS}
{%- else %}
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
{%- endif %}
# -----------------------------------------------------------------------------------------------------


class BadRequest(Exception):
    """A problem with one request{{ "" if sig.accumulator else "'s inputs" }}; it is answered with an error, the other requests are not."""


def error_response(message: str, code=None) -> pb_utils.InferenceResponse:
    """An error response; INVALID_ARG unless ``code`` says otherwise."""
    return pb_utils.InferenceResponse(
        error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG if code is None else code)
    )
{%- if sig.accumulator and tag %}


{% set tag_error = "BadRequest" %}{% include "python_tag.py.j2" %}
{%- endif %}


class TritonPythonModel:
    def initialize(self, args):
{%- if sig.accumulator %}
        """Check that the model is decoupled and under the sequence batcher; read the tensors' data types."""
{%- else %}
        """Check that the model is decoupled; read the data types of the tensors once."""
{%- endif %}
        self.model_name = args["model_name"]
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                f"model_transaction_policy.decoupled must be true for model '{self.model_name}'"
            )
        self.input_dtypes = {name: self._config_dtype(config, name, is_input=True) for name in INPUTS}
        self.output_dtypes = {name: self._config_dtype(config, name, is_input=False) for name in OUTPUTS}
{%- if sig.accumulator %}
        # The sequence batcher's control inputs by kind (config.pbtxt's sequence_batching.control_input).
        batcher = config.get("sequence_batching", {})
        controls = {control["kind"]: tensor["name"]
                    for tensor in batcher.get("control_input", []) for control in tensor.get("control", [])}
        missing = [kind for kind in ("START", "END", "READY") if f"CONTROL_SEQUENCE_{kind}" not in controls]
        if missing:
            raise ValueError(f"config.pbtxt of model '{self.model_name}' declares no {'/'.join(missing)} control "
                             "input in sequence_batching")
        self.start = controls["CONTROL_SEQUENCE_START"]
        self.end = controls["CONTROL_SEQUENCE_END"]
        self.ready = controls["CONTROL_SEQUENCE_READY"]
        self.zero_state = np.zeros(INPUTS[SUMMED][1], dtype=self.input_dtypes[SUMMED])
{%- if direct %}
        # direct: one state per batch slot of this instance (max_batch_size slots, 1 without batching).
        self.slots = [self.zero_state.copy() for _ in range(max(MAX_BATCH_SIZE, 1))]
{%- else %}
        # oldest: correlation ID -> (state, time.monotonic() of its last request). The ID is the CORRID control
        # input's value where config.pbtxt declares one, else the request's own correlation_id() (int or str).
        self.corrid = controls.get("CONTROL_SEQUENCE_CORRID")
        self.sequences = {}
        # Triton ends a sequence idle this long (its default without max_sequence_idle_microseconds: 1 s).
        self.idle_timeout_s = int(batcher.get("max_sequence_idle_microseconds", 1_000_000)) / 1e6
        self.next_sweep = time.monotonic() + self.idle_timeout_s
{%- endif %}
{%- if metrics %}
        # Custom metrics, on Triton's metrics endpoint with its own (the model owns them: see finalize).
        labels = {"model": self.model_name, "version": args["model_version"]}
        self.latency_family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.latency = self.latency_family.Metric(labels=labels)
        self.batch_size_family = pb_utils.MetricFamily(
            name="execution_batch_size",
            description="Requests per execution",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.batch_size = self.batch_size_family.Metric(labels=labels, buckets=BATCH_SIZE_BUCKETS)
{%- endif %}
{%- if tag %}
        self.response_parameters = response_parameters_supported()
        if not self.response_parameters:
            pb_utils.Logger.log_warn(f"{self.model_name}: this python backend sends no response parameters (they "
                                     "need release 25.02): responses carry no 'tag'")
{%- endif %}
{%- endif %}

    @staticmethod
    def _config_dtype(config, name, is_input):
        find = pb_utils.get_input_config_by_name if is_input else pb_utils.get_output_config_by_name
        tensor = find(config, name)
        if tensor is None:
            kind = "input" if is_input else "output"
            raise ValueError(f"config.pbtxt of model '{config['name']}' declares no {kind} '{name}'")
        return pb_utils.triton_string_to_numpy(tensor["data_type"])
{%- if sig.accumulator %}

    def execute(self, requests):
        """One response per request, each flagged final, sent in order through the requests' senders."""
{%- if metrics %}
        started = time.monotonic_ns()
        executed = 0  # requests with data (a sequence's request is one row)
{%- endif %}
        for position, request in enumerate(requests):
            ready = self._control(request, self.ready)
            response = self._respond(position, request) if ready else pb_utils.InferenceResponse()
            # Your streaming logic goes here: to stream, send partial results with sender.send(response)
            # first and put the final flag on the last one only.
            request.get_response_sender().send(response, flags=FINAL)
{%- if metrics %}
            if ready:
                executed += 1
                self.latency.increment(time.monotonic_ns() - started)
{%- endif %}
{%- if not direct %}
        self._drop_idle(time.monotonic())
{%- endif %}
{%- if metrics %}
        self.batch_size.observe(executed)
{%- endif %}
        # A decoupled model returns None: the responses went through the senders.
        return None

    def _respond(self, position, request):
        """The response to one request with data (READY 1): step() on its sequence's state."""
        if request.is_cancelled():
            return error_response("request cancelled", pb_utils.TritonError.CANCELLED)
        start = self._control(request, self.start)
        end = self._control(request, self.end)
{%- if direct %}
        key = position  # direct: the request's batch slot
{%- else %}
        key = self._correlation_id(request)
{%- endif %}
        try:
{%- if tag %}
            tag = request_tag(request)
{%- endif %}
            inputs = self._read_inputs(request)
{%- if direct %}
            state = self.zero_state if start else self.slots[key]
{%- else %}
            if not start and key not in self.sequences:
                raise BadRequest(f"sequence {key!r} has no state: it was not started (START), or it was idle for "
                                 "longer than max_sequence_idle_microseconds")
            state = self.zero_state if start else self.sequences[key][0]
{%- endif %}
            state, outputs = step(state, inputs)
        except BadRequest as err:
            return error_response(str(err))
        except Exception as err:  # noqa: BLE001 - report it to this request, keep serving the others
            pb_utils.Logger.log_error(f"{self.model_name}: step failed: {err}")
            return error_response(f"step failed: {err}", pb_utils.TritonError.INTERNAL)
        finally:
{%- if direct %}
            if end:
                self.slots[key] = self.zero_state.copy()  # END: the slot is free for the next sequence
{%- else %}
            if end:
                self.sequences.pop(key, None)  # END: the sequence's state is released
{%- endif %}
{%- if direct %}
        if not end:
            self.slots[key] = state
{%- else %}
        if not end:
            self.sequences[key] = (state, time.monotonic())
{%- endif %}
        tensors = [
            pb_utils.Tensor(name, np.asarray(outputs[name]).astype(self.output_dtypes[name], copy=False){{ '[np.newaxis]' if batched else '' }})
            for name in OUTPUTS
        ]
{%- if tag %}
        if self.response_parameters:
            return pb_utils.InferenceResponse(output_tensors=tensors, parameters={TAG: tag})
{%- endif %}
        return pb_utils.InferenceResponse(output_tensors=tensors)
{%- else %}

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
{%- endif %}

    def _read_inputs(self, request):
{%- if sig.accumulator %}
        """The request's inputs without the batch axis (None for an optional input it leaves out)."""
{%- else %}
        """The inputs of one request as numpy arrays by name, each read once (None for an optional input
        the request leaves out); BadRequest if unusable."""
{%- endif %}
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
{%- if sig.accumulator and batched %}
            if array.shape[0] != 1:
                raise BadRequest(f"input '{name}': a request of a sequence is one row, got batch size {array.shape[0]}")
            inputs[name] = array[0]
{%- else %}
            inputs[name] = array
{%- endif %}
        return inputs
{%- if sig.accumulator and not direct %}

    def _drop_idle(self, now):
        """Release the state of sequences that Triton has ended for being idle (it tells the backend nothing).
        A sequence is taken as ended once unseen for twice the idle timeout: the margin keeps one whose next
        request Triton still holds in its queue."""
        if now < self.next_sweep:
            return
        self.next_sweep = now + self.idle_timeout_s
        for key in [key for key, (_, seen) in self.sequences.items() if now - seen > 2 * self.idle_timeout_s]:
            del self.sequences[key]

    def _correlation_id(self, request):
        """The request's correlation ID: the CORRID control input's value (an int, or bytes for a string
        ID), or without one in config.pbtxt the request's own (an int or a str)."""
        if self.corrid is None:
            return request.correlation_id()
        value = pb_utils.get_input_tensor_by_name(request, self.corrid).as_numpy().flat[0]
        return value if isinstance(value, bytes) else int(value)
{%- endif %}
{%- if sig.accumulator %}

    @staticmethod
    def _control(request, name):
        """A control input's value as a bool (config.pbtxt's int32_false_true: [0, 1])."""
        return bool(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flat[0])
{%- endif %}

    def finalize(self):
{%- if sig.accumulator and metrics %}
        # The model owns its metrics: removing them (each metric before its family) takes them off /metrics.
        del self.latency, self.batch_size, self.latency_family, self.batch_size_family
{%- endif %}
        pb_utils.Logger.log_info(f"{self.model_name}: finalized")
{%- endif %}
