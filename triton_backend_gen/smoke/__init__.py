"""The smoke suite and the fuzzer: what `tbgen test` sends to a running server, and how answers are judged.

The suite is planned from a model's ``config.pbtxt`` and the project's ``reference.py`` (see
docs/templates.md): :func:`plan_smoke` is pure (it reads files, it never contacts a server) and returns
:class:`SmokeCheck` objects; :func:`run_smoke` runs them against the endpoints of a running server. A model
whose config.pbtxt leaves its tensors to the backend's auto-complete is planned from its config as served
(:func:`served_configs`, asked once the server is up, passed to the plans as ``served``).

- metadata and config as served match config.pbtxt (over HTTP and gRPC);
- inference over HTTP and gRPC with ``reference.make_inputs``, outputs equal to ``reference.compute``
  (exact for integers, ``reference.TOLERANCE`` for floats), every batch size from 1 to max_batch_size,
  concurrent requests (and, with dynamic batching, proof that the server merged some of them);
- decoupled models over gRPC streaming: count, order and content of the responses against
  ``reference.responses``, the final flag, several requests per stream, concurrent streams, a stream
  cancelled mid-way; the protocol itself, each fault named (``stream_protocol``): a response after the final
  flag, the final flag twice, an error response mid-stream, a stream that never ends (its per-request
  deadline: reference.py's ``STREAM_DEADLINE_S``, else REQUEST_TIMEOUT_S), read from the stream and, for
  what a client cannot see on the server's release, from the lines the server's log gained meanwhile;
- sequence models (config.pbtxt's sequence_batching): every request carries a correlation ID and START/END
  flags (a sequence of its own when a check sends one request); sequences over HTTP and gRPC, interleaved
  from concurrent clients, restarted, for an unknown correlation ID and idle past the timeout, each answer
  against ``reference.compute_sequence``;
- bad requests (wrong dtype, wrong shape, missing input, unknown input, batch larger than max) each get
  an error and leave the server healthy;
- custom metrics a model declares (tbgen.toml ``metrics``) appear on the metrics endpoint with the values the
  run implies (:func:`custom_metrics_results`); request parameters it declares (``parameters``) come back as
  response parameters, and one of the wrong type is refused (:func:`request_parameters_results`).

The fuzzer (:func:`plan_fuzz`, :func:`run_fuzz`) sends deterministic randomised malformed requests over
raw HTTP and gRPC (loopback only) and reports what came back and the server's memory before and after.

Modules: ``model`` (the model's config.pbtxt as a ModelSpec, reference.py), ``compare`` (judging outputs and
served configs), ``clients`` (tritonclient clients and gRPC streams), ``stream_protocol`` (the decoupled
protocol judged: a stream's ledger, what the server's log names), ``checks`` (the checks and
:func:`plan_smoke`), ``sequences`` (the checks of sequence models), ``metrics`` (custom metrics),
``parameters`` (request parameters), ``run`` (:func:`run_smoke`, JUnit XML), ``fuzz`` (:func:`plan_fuzz`,
:func:`run_fuzz`, the report, server memory) and ``fuzz_requests`` (the registry of fuzz kinds and what each
case sends, over raw HTTP and gRPC).
"""

from triton_backend_gen.smoke.checks import UNKNOWN_INPUT, bad_requests, plan_smoke, served_configs
from triton_backend_gen.smoke.clients import (
    REQUEST_TIMEOUT_S,
    Endpoints,
    ModelStatistics,
    output_arrays,
    server_statistics,
)
from triton_backend_gen.smoke.compare import (
    assert_outputs_match,
    config_differences,
    is_exact_dtype,
    output_mismatches,
)
from triton_backend_gen.smoke.fuzz import (
    GRPC_POOL_FACTOR,
    FuzzReport,
    memory_limit,
    memory_of,
    plan_fuzz,
    run_fuzz,
)
from triton_backend_gen.smoke.fuzz_requests import (
    FUZZ_KINDS,
    FUZZ_TIMEOUT_S,
    HUGE_MIB,
    FuzzCase,
    fuzz_tensors,
    run_fuzz_case,
)
from triton_backend_gen.smoke.metrics import custom_metrics_results, scrape
from triton_backend_gen.smoke.model import (
    ModelSpec,
    SmokeError,
    TensorSpec,
    leaves_tensors_to_backend,
    load_model_spec,
    load_model_specs,
    load_reference,
    model_spec,
)
from triton_backend_gen.smoke.parameters import request_parameters_results
from triton_backend_gen.smoke.run import SmokeCheck, SmokeResult, run_smoke, write_junit_xml

__all__ = [
    "FUZZ_KINDS",
    "FUZZ_TIMEOUT_S",
    "GRPC_POOL_FACTOR",
    "HUGE_MIB",
    "REQUEST_TIMEOUT_S",
    "UNKNOWN_INPUT",
    "Endpoints",
    "FuzzCase",
    "FuzzReport",
    "ModelSpec",
    "ModelStatistics",
    "SmokeCheck",
    "SmokeError",
    "SmokeResult",
    "TensorSpec",
    "assert_outputs_match",
    "bad_requests",
    "config_differences",
    "custom_metrics_results",
    "fuzz_tensors",
    "is_exact_dtype",
    "leaves_tensors_to_backend",
    "load_model_spec",
    "load_model_specs",
    "load_reference",
    "memory_limit",
    "memory_of",
    "model_spec",
    "output_arrays",
    "output_mismatches",
    "plan_fuzz",
    "plan_smoke",
    "request_parameters_results",
    "run_fuzz",
    "run_fuzz_case",
    "run_smoke",
    "scrape",
    "served_configs",
    "server_statistics",
    "write_junit_xml",
]
