"""decoupled-backend in C++ streaming the user's tensors, built and served by the embedded tritonserver 24.10.

One project of the user's own signature (TEXT BYTES, N INT32 -> TOKEN BYTES, INDEX INT32) serves every check
of the module: `tbgen test --fuzz 300` passes on it, a client's requests get N responses each (the last
carrying the final flag, a request with N = 0 the flag alone), and src/compute.cc replaced by another
computation (with reference.py to match) builds and passes `tbgen test`. The repeat example (no signature)
answers the client of Triton's repeat example as it is written. decoupled-backend's whole matrix is built and
smoke-tested by tests/cli/test_server_commands.py::test_templates_check_smoke.
"""

from __future__ import annotations

import queue
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import fuzz_passes, run_tbgen, triton_sources_or_skip

from triton_backend_gen.project import load_project

pytestmark = [pytest.mark.slow, pytest.mark.cpp, pytest.mark.xdist_group("decoupled-streams")]

SIGNATURE = (
    "--input",
    "TEXT:BYTES:1",
    "--input",
    "N:INT32:1",
    "--output",
    "TOKEN:BYTES:1",
    "--output",
    "INDEX:INT32:1",
)
TIMEOUT_S = 30


def new_project(path: Path, *flags: str) -> Path:
    created = run_tbgen(
        "new", str(path), "-t", "decoupled-backend", "--no-input", "--triton-version", "24.10", *flags
    )
    assert created.returncode == 0, created.stdout + created.stderr
    return path


@pytest.fixture(scope="module")
def streaming(tmp_path_factory) -> Path:
    """The project of the user's own signature, built."""
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path_factory.mktemp("streams") / "d", *SIGNATURE)
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return project


def stream_results(project: Path, requests: dict[str, dict[str, np.ndarray]], **send) -> dict[str, list]:
    """Each request's results on one gRPC stream to the project's model, served by the embedded server, up to
    its final flag (an empty final response included)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    from triton_backend_gen.runtime import prepare_server

    loaded = load_project(project)
    model = loaded.models[0].name
    results: queue.Queue = queue.Queue()
    answers: dict[str, list] = {request_id: [] for request_id in requests}
    with prepare_server(loaded) as triton, grpcclient.InferenceServerClient(triton.grpc_url) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        for request_id, inputs in requests.items():
            tensors = []
            for name, array in inputs.items():
                tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            client.async_stream_infer(model, tensors, request_id=request_id, **send)
        pending = set(requests)
        while pending:
            result, error = results.get(timeout=TIMEOUT_S)
            assert error is None, error
            response = result.get_response()
            answers[response.id].append(result)
            if response.parameters["triton_final_response"].bool_param:
                pending.discard(response.id)
        client.stop_stream()
    return answers


def test_tbgen_test_and_the_fuzzer_pass(streaming):
    report = fuzz_passes(streaming, 300)
    assert "request without responses" in report and " 0 failed" in report


def test_each_request_streams_n_responses_the_last_one_final(streaming):
    """n = the bytes of TEXT plus the non-zero elements of N; response i holds n + i in both outputs."""
    requests = {
        f"n{count}": {"TEXT": np.array([b"abcd"], dtype=object), "N": np.array([count], dtype=np.int32)}
        for count in (3, 1, 0)
    }
    answers = stream_results(streaming, requests, enable_empty_final_response=True)
    for count in (3, 1):
        results = answers[f"n{count}"]
        assert len(results) == count, "one result per response: the final flag comes with the last"
        for i, result in enumerate(results):
            assert result.as_numpy("TOKEN").tolist() == [str(5 + i).encode()]
            assert result.as_numpy("INDEX").tolist() == [5 + i]
    (alone,) = answers["n0"]  # no response: the final flag alone, an empty response
    assert (
        alone.as_numpy("TOKEN") is None
        and alone.get_response().parameters["triton_final_response"].bool_param
    )


# Another computation in src/compute.cc (and reference.py): the first N bytes of TEXT, one per response.
TOKENIZER = """\
// Your logic: the first N bytes of TEXT, one per response (TOKEN the byte, INDEX its position).
#include "tensors.h"

namespace triton { namespace backend { namespace d {

TRITONSERVER_Error*
StreamResponses(const Inputs& in, size_t, ResponseStream* stream)
{
  const std::string_view text = in.TEXT[0];
  const size_t count = std::min<size_t>(text.size(), std::max(in.N[0], 0));
  for (size_t i = 0; i < count; ++i) {
    Outputs& out = stream->Next();
    out.TOKEN.Append(text.substr(i, 1));
    out.INDEX[0] = static_cast<int32_t>(i);
    if (!stream->Send(i + 1 == count)) {
      break;
    }
  }
  return nullptr;
}

}}}  // namespace triton::backend::d
"""
TOKENIZER_REFERENCE = """\
FINAL_WITH_LAST_RESPONSE = True


def responses(inputs):
    text, count = bytes(inputs["TEXT"].flat[0]), max(int(inputs["N"].flat[0]), 0)
    return [
        {"TOKEN": np.array([text[i : i + 1]], dtype=np.object_), "INDEX": np.array([i], dtype=np.int32)}
        for i in range(min(len(text), count))
    ]
"""


def test_another_computation_in_compute_cc_alone_passes_tbgen_test(streaming):
    """Only the user's files change (the last test of the module: it edits the shared project)."""
    (streaming / "src" / "compute.cc").write_text(TOKENIZER)
    reference = streaming / "reference.py"
    placeholder = re.compile(
        r"# ---- The placeholder computation.*# ---- End of the placeholder computation\.\n", re.S
    )
    text, replaced = placeholder.subn(TOKENIZER_REFERENCE, reference.read_text())
    assert replaced == 1
    reference.write_text(text)
    result = run_tbgen("test", str(streaming))
    assert result.returncode == 0 and " 0 failed" in result.stdout, (
        result.stdout[-6000:] + result.stderr[-3000:]
    )
    assert "responses [" in result.stdout


def test_the_repeat_example_answers_tritons_repeat_client(tmp_path):
    """The client of Triton's repeat example (python_backend's examples/decoupled/repeat_client.py), as it is
    written: no empty final responses asked for; it counts len(IN) responses and checks OUT = IN[IDX]."""
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path / "repeats")
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    # What the client sends (its in_value, delay_value, wait_value), model repeat_int32.
    in_value, delay_value, wait_value = [4, 2, 0, 1], [1, 2, 3, 4], 5
    request = {
        "IN": np.array(in_value, dtype=np.int32),
        "DELAY": np.array(delay_value, dtype=np.uint32),
        "WAIT": np.array([wait_value], dtype=np.uint32),
    }
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    from triton_backend_gen.runtime import prepare_server

    completed: queue.Queue = queue.Queue()
    with (
        prepare_server(load_project(project)) as triton,
        grpcclient.InferenceServerClient(triton.grpc_url) as client,
    ):
        inputs = []
        for name, array in request.items():
            inputs.append(grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype)))
            inputs[-1].set_data_from_numpy(array)
        outputs = [grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")]
        client.start_stream(callback=lambda result, error: completed.put(error or result))
        client.async_stream_infer(model_name="repeat_int32", inputs=inputs, request_id="0", outputs=outputs)
        received = [completed.get(timeout=TIMEOUT_S) for _ in in_value]
        client.stop_stream()
    for index, item in enumerate(received):
        assert not isinstance(item, Exception), item
        assert item.get_response().id == "0"
        this_idx = item.as_numpy("IDX")[0]
        assert this_idx == index and item.as_numpy("OUT")[0] == in_value[this_idx]
    assert completed.empty(), "the final flag alone reaches no client that did not ask for it"
