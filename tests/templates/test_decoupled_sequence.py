"""decoupled-backend with sequence=direct|oldest (a stateful accumulator answering each request with one
response flagged final), custom_metrics=yes and request_parameters=yes, in C++ and Python.

The built tests serve each variant in the embedded tritonserver (release 24.10): `tbgen test` and `tbgen test
--fuzz 300`, then 8 sequences interleaved over 8 gRPC streams, each request answered by exactly one response
(its running sum, flagged final: no separate empty final) carrying its tag back (C++; the 24.10 python backend
sets no response parameters).
"""

from __future__ import annotations

import queue
from pathlib import Path

import pytest
from conftest import fuzz_passes, interleaved_sequences, run_tbgen, triton_sources_or_skip

from triton_backend_gen.errors import AnswerError
from triton_backend_gen.scaffold import get_template, resolve_answers
from triton_backend_gen.scaffold.render import render_into


def answers(**given):
    template = get_template("decoupled-backend")
    return template, resolve_answers(template, {"project_name": "dseq", "triton_version": "24.10", **given})


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize(
    ("given", "batch"),
    [
        ({}, 0),
        ({"sequence": "direct"}, 8),
        ({"sequence": "oldest"}, 8),
        ({"sequence": "direct", "max_batch_size": 0}, 0),
    ],
)
def test_max_batch_size_defaults_to_8_for_sequence_models_only(given, batch):
    assert int(answers(**given)[1]["max_batch_size"]) == batch


def test_the_repeat_example_is_unchanged_by_the_new_options_when_off(tmp_path):
    template, resolved = answers()
    project = render_into(template, resolved, tmp_path)
    config = (project / "model_repository" / "repeat_int32" / "config.pbtxt").read_text()
    assert "max_batch_size: 0" in config and "sequence_batching" not in config
    toml = (project / "tbgen.toml").read_text()
    for absent in ("metrics =", "parameters =", "sequence ="):
        assert absent not in toml, absent
    source = (project / "src" / "dseq.cc").read_text()
    for absent in ("ModelMetrics", "ReadRequestParameters", "SequenceStates", "ExecutionMetrics"):
        assert absent not in source, absent


@pytest.mark.parametrize(
    ("given", "present", "absent"),
    [
        (
            {"sequence": "direct", "custom_metrics": True, "request_parameters": True},
            [
                "using Key = uint32_t;",
                "void\nStep(",
                "TRITONBACKEND_ResponseNewFromFactory",
                "ObserveBatchSize",
                "TRITONBACKEND_ResponseSetStringParameter",
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL, err",
            ],
            ["BatchExecutor", "TRITONBACKEND_StateNew", "{kCorrId,"],
        ),
        (
            {"sequence": "oldest", "correlation_id": "string", "implicit_state": True},
            ["TRITONBACKEND_StateNew", "{kCorrId,"],
            ["SequenceStates", "ModelMetrics", "ReadRequestParameters"],
        ),
        (
            {"custom_metrics": True, "request_parameters": True},
            [
                "ExecutionMetrics",
                "ObserveBatchSize",
                "ReadRequestParameters(model_name, request_, &parameters_)",
            ],
            ["SequenceStates"],
        ),
    ],
)
def test_cpp_renders_its_code(tmp_path, given, present, absent):
    """In the plumbing (src/dseq.cc) or the user's src/compute.cc (Step)."""
    template, resolved = answers(**given)
    src = render_into(template, resolved, tmp_path) / "src"
    source = (src / "dseq.cc").read_text() + (src / "compute.cc").read_text()
    for text in present:
        assert text in source, text
    for text in absent:
        assert text not in source, text


def test_python_sequence_renders_and_refuses_implicit_state(tmp_path):
    template, resolved = answers(
        language="python",
        sequence="oldest",
        correlation_id="string",
        custom_metrics=True,
        request_parameters=True,
    )
    project = render_into(template, resolved, tmp_path)
    model = (project / "model_repository" / "accumulate" / "1" / "model.py").read_text()
    yours = (project / "model_repository" / "accumulate" / "1" / "compute.py").read_text()
    compile(model, "model.py", "exec")
    compile(yours, "compute.py", "exec")
    for text in ("request.correlation_id()", "flags=FINAL", "response_parameters_supported", "compute.step("):
        assert text in model, text
    assert "def step(" in yours  # the user's, beside the plumbing
    config = (project / "model_repository" / "accumulate" / "config.pbtxt").read_text()
    assert "oldest" in config and "CORRID" not in config and "decoupled: true" in config
    toml = (project / "tbgen.toml").read_text()
    assert 'parameters = { tag = "untagged" }' in toml and "execution_batch_size" in toml
    with pytest.raises(AnswerError, match="implicit state"):
        answers(language="python", sequence="direct", implicit_state=True)


# --------------------------------------------------------------------------- built and served


def new_project(tmp_path: Path, *sets: str) -> Path:
    """`tbgen new` (release 24.10); a C++ project is built too, asserted warning-free under -Werror."""
    project = tmp_path / "dseq"
    args = ["new", str(project), "-t", "decoupled-backend", "--no-input", "--triton-version", "24.10"]
    for item in sets:
        args += ["--set", item]
    created = run_tbgen(*args)
    assert created.returncode == 0, created.stdout + created.stderr
    if "language=python" not in sets:
        built = run_tbgen("build", str(project))
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        log = (project / "build" / "tbgen-build.log").read_text()
        assert not [line for line in log.splitlines() if str(project / "src") in line and "warning" in line]
    return project


def tbgen_test_passes(project: Path) -> str:
    result = run_tbgen("test", str(project))
    assert result.returncode == 0 and " 0 failed" in result.stdout, (
        result.stdout[-6000:] + result.stderr[-3000:]
    )
    return result.stdout


def interleaved_over_streams(project: Path, *, tags: bool) -> None:
    """8 sequences, each on its own gRPC stream, their requests interleaved (conftest.interleaved_sequences):
    every request gets exactly one response, flagged final, holding its own sequence's running sum (and its
    tag back)."""
    import tritonclient.grpc as grpcclient

    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke import load_reference

    reference = load_reference(project)
    model = load_project(project).models[0].name
    string_ids = reference.SEQUENCE["correlation_id"] == "string"
    ((name, (datatype, _, _)),) = reference.INPUTS.items()
    lengths = [3, 5, 4, 6, 2, 5, 3, 4]
    with prepare_server(load_project(project)) as triton:
        clients, answers_of = [], []

        def send(index: int, inputs: dict, start: bool, end: bool) -> dict:
            tensor = grpcclient.InferInput(name, list(inputs[name].shape), datatype)
            tensor.set_data_from_numpy(inputs[name])
            clients[index].async_stream_infer(
                model,
                [tensor],
                request_id=f"s{index}",
                sequence_id=f"seq-{index}" if string_ids else 500 + index,
                sequence_start=start,
                sequence_end=end,
                parameters={"tag": f"tag-{index}"} if tags else None,
                enable_empty_final_response=True,
            )
            result, error = answers_of[index].get(timeout=30)
            assert error is None, error
            response = result.get_response()
            assert response.parameters["triton_final_response"].bool_param, "the data response is final"
            if tags:
                assert response.parameters["tag"].string_param == f"tag-{index}"
            return {output: result.as_numpy(output) for output in reference.OUTPUTS}

        try:
            for _ in range(len(lengths)):
                client = grpcclient.InferenceServerClient(triton.grpc_url)
                answers_of.append(queue.Queue())
                client.start_stream(callback=lambda result, error, q=answers_of[-1]: q.put((result, error)))
                clients.append(client)
            interleaved_sequences(reference, lengths, send)
            for answers_queue in answers_of:  # nothing more: no separate empty final response
                assert answers_queue.empty()
        finally:
            for client in clients:
                client.stop_stream()
                client.close()


@pytest.mark.cpp
@pytest.mark.slow
def test_cpp_direct_sequence_with_metrics_and_parameters(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    project = new_project(
        tmp_path, "sequence=direct", "correlation_id=uint64", "custom_metrics=yes", "request_parameters=yes"
    )
    report = tbgen_test_passes(project)
    assert (
        "8 interleaved sequences" in report and "custom metrics" in report and "request parameters" in report
    )
    fuzz_passes(project)
    interleaved_over_streams(project, tags=True)


@pytest.mark.slow
def test_python_oldest_string_sequence_with_metrics(tmp_path, server_or_skip):
    project = new_project(
        tmp_path, "language=python", "sequence=oldest", "correlation_id=string", "custom_metrics=yes"
    )
    report = tbgen_test_passes(project)
    assert "8 interleaved sequences" in report and "custom metrics" in report
    fuzz_passes(project)
    interleaved_over_streams(project, tags=False)  # the 24.10 python backend sends no response parameters


@pytest.mark.slow
@pytest.mark.parametrize("language", [pytest.param("cpp", marks=pytest.mark.cpp), "python"])
def test_repeat_example_with_metrics_and_parameters(tmp_path, compiler_cache, server_or_skip, language):
    if language == "cpp":
        triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, f"language={language}", "custom_metrics=yes", "request_parameters=yes")
    report = tbgen_test_passes(project)
    assert "custom metrics" in report and "request parameters" in report
