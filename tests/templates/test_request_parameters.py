"""request_parameters=yes in cpp-backend and python-backend: the backend reads the request parameter "tag" (a
string; "untagged" when absent), answers it in every response as the response parameter "tag", and refuses a
"tag" of another type with INVALID_ARG naming the parameter and the type it got.

The served tests send requests over HTTP and gRPC with tag="x", with no tag and with an integer tag (HTTP: a
JSON number, gRPC: int64_param) to a built C++ backend (stateless, and a sequence model) and to Python models
in the embedded 24.10 server, whose python backend answers without response parameters (they came in 25.02).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import new_project, read_config, run_tbgen, triton_sources_or_skip

from triton_backend_gen.scaffold import get_template, resolve_answers
from triton_backend_gen.scaffold.render import render_into

TAG_ERROR = "request parameter 'tag' must be a string, got INT"


def render(directory: Path, template: str, **given) -> Path:
    answers = resolve_answers(
        get_template(template), {"project_name": "rp", "triton_version": "24.10", **given}
    )
    return render_into(get_template(template), answers, directory)


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize(
    "given",
    [{}, {"sequence": "oldest"}, {"pattern": "bls", "model_name": "router"}, {"framework": "opencv-dnn"}],
)
def test_cpp_backend_reads_and_answers_the_tag_only_when_asked(tmp_path, given):
    off = (render(tmp_path / "off", "cpp-backend", **given) / "src" / "rp.cc").read_text()
    on_project = render(tmp_path / "on", "cpp-backend", request_parameters=True, **given)
    on = (on_project / "src" / "rp.cc").read_text()
    for text in (
        "TRITONBACKEND_RequestParameter",
        "TRITONBACKEND_ResponseSetStringParameter",
        "kTagParameter",
    ):
        assert text not in off, text
        assert text in on, text
    assert on.count("AnswerRequestParameters(") == 2  # defined, and called where the responses are made
    assert "Read your own parameters here" in on
    assert "## Request parameters" in (on_project / "README.md").read_text()
    assert 'parameters = { tag = "untagged" }' in (on_project / "tbgen.toml").read_text()


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"batching": "vectorized"},
        {"sequence": "direct"},
        {"sequence": "oldest"},
        {"python_based_backend": True},
        {"native": True},
    ],
)
def test_python_backend_reads_the_tag_and_detects_response_parameters(tmp_path, given):
    off_project = render(tmp_path / "off", "python-backend", **given)
    on_project = render(tmp_path / "on", "python-backend", request_parameters=True, **given)
    off, on = (min(p.rglob("model.py")).read_text() for p in (off_project, on_project))
    assert "request_tag" not in off and "parameters=" not in off
    assert "request.parameters()" in on and "except TypeError:" in on
    # defined, checked with the inputs (before the computation) and answered back in the response
    assert on.count("request_tag(request)") == 3
    compile(on, "model.py", "exec")
    readme = (on_project / "README.md").read_text()
    assert "## Request parameters" in readme and "25.02" in readme and "24.10" in readme


# -------------------------------------------------------------------- model.py with a stand-in python backend


def stand_in_pb_utils(response_parameters: bool) -> types.ModuleType:
    """Enough of the python backend's triton_python_backend_utils for execute(): its InferenceResponse takes
    ``parameters`` as from release 25.02 on (``response_parameters``), or refuses them as before
    (TypeError)."""
    pb = types.ModuleType("triton_python_backend_utils")

    class TritonError:
        INVALID_ARG, INTERNAL, CANCELLED = "INVALID_ARG", "INTERNAL", "CANCELLED"

        def __init__(self, message, code=INVALID_ARG):
            self.message, self.code = message, code

    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, np.asarray(array)

        def as_numpy(self):
            return self.array

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None, **parameters):
            if parameters and (not response_parameters or set(parameters) != {"parameters"}):
                raise TypeError("__init__(): incompatible constructor arguments")
            self.outputs = {t.name: t.array for t in output_tensors}
            self.error, self.parameters = error, parameters.get("parameters")

    def find(section):
        return lambda config, name: next((t for t in config.get(section, []) if t["name"] == name), None)

    pb.TritonError, pb.Tensor, pb.InferenceResponse = TritonError, Tensor, InferenceResponse
    pb.get_input_config_by_name, pb.get_output_config_by_name = find("input"), find("output")
    pb.triton_string_to_numpy = lambda name: np.dtype(
        name.removeprefix("TYPE_").lower().replace("fp", "float")
    )
    pb.get_input_tensor_by_name = lambda request, name: request.tensors.get(name)
    pb.Logger = types.SimpleNamespace(
        **{f"log_{level}": lambda *_: None for level in ("info", "warn", "error", "verbose")}
    )
    return pb


class StandInRequest:
    def __init__(self, inputs: dict, parameters: dict, **controls):
        self.tensors = {
            name: types.SimpleNamespace(as_numpy=lambda a=array: a)
            for name, array in {
                **inputs,
                **{k: np.array([[int(v)]], np.int32) for k, v in controls.items()},
            }.items()
        }
        self._parameters = json.dumps(parameters)

    def parameters(self):
        return self._parameters

    def is_cancelled(self):
        return False

    def correlation_id(self):
        return 17


@pytest.mark.parametrize("response_parameters", [True, False], ids=["25.02", "24.10"])
@pytest.mark.parametrize("given", [{}, {"batching": "vectorized"}, {"sequence": "direct"}])
def test_python_model_answers_the_tag_where_the_backend_can(
    tmp_path, monkeypatch, given, response_parameters
):
    from google.protobuf.json_format import MessageToDict

    from triton_backend_gen.smoke import load_reference

    project = render(tmp_path, "python-backend", request_parameters=True, **given)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stand_in_pb_utils(response_parameters))
    model_py = next(project.rglob("model.py"))
    monkeypatch.syspath_prepend(str(model_py.parent))  # as the stub does: model.py imports compute.py
    monkeypatch.delitem(sys.modules, "compute", raising=False)
    spec = importlib.util.spec_from_file_location("rp_model", model_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:  # with the enums left at their default (CONTROL_SEQUENCE_START is 0), as Triton writes the config
        config = MessageToDict(
            read_config(project), preserving_proto_field_name=True, including_default_value_fields=True
        )
    except TypeError:  # protobuf >= 26 renamed the option
        config = MessageToDict(
            read_config(project), preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    model = module.TritonPythonModel()
    model.initialize(
        {
            "model_name": config["name"],
            "model_config": json.dumps(config),
            "model_version": "1",
            "model_instance_name": "rp_0",
        }
    )
    assert model.response_parameters is response_parameters
    reference = load_reference(project)
    inputs = reference.make_inputs(1, seed=5)
    controls = {"START": 1, "END": 1, "READY": 1} if given.get("sequence") else {}
    sent = [{"tag": "x"}, {}, {"tag": 5}, {"tag": True}]
    responses = model.execute([StandInRequest(inputs, parameters, **controls) for parameters in sent])
    expected = reference.compute_sequence([inputs])[-1] if controls else reference.compute(inputs)
    for response, tag in zip(responses[:2], ("x", "untagged"), strict=True):
        assert response.error is None
        for name, array in expected.items():
            np.testing.assert_allclose(response.outputs[name], array)
        assert response.parameters == ({"tag": tag} if response_parameters else None)
    assert TAG_ERROR in responses[2].error.message and responses[2].error.code == "INVALID_ARG"
    assert "got BOOL" in responses[3].error.message


# --------------------------------------------------------------------------- served


def tensors(module, reference, batch, seed=3):
    """The reference's inputs as ``module``'s InferInputs (tritonclient.http or .grpc), and the inputs."""
    inputs = reference.make_inputs(batch, seed=seed)
    made = []
    for name, array in inputs.items():
        tensor = module.InferInput(name, list(array.shape), reference.INPUTS[name][0])
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made, inputs


def response_tag(result, protocol: str):
    """The response parameter "tag" of a tritonclient result, or None."""
    response = result.get_response()
    if protocol == "http":
        return (response.get("parameters") or {}).get("tag")
    return response.parameters["tag"].string_param if "tag" in response.parameters else None


def check_round_trip(triton, model: str, reference, *, answers_tag: bool, sequence: bool = False) -> None:
    """tag="x", no tag and an integer tag over HTTP and gRPC: the outputs as the reference computes them, the
    tag answered back (when ``answers_tag``), and INVALID_ARG for the integer."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    batch = 1 if reference.MAX_BATCH_SIZE > 0 else None
    for protocol, module, url in (
        ("http", httpclient, triton.http_url),
        ("grpc", grpcclient, triton.grpc_url),
    ):
        client = module.InferenceServerClient(url)
        try:
            for n, (sent, expected) in enumerate((("x", "x"), (None, "untagged"))):
                made, inputs = tensors(module, reference, batch)
                options = (
                    {"sequence_id": 7000 + n, "sequence_start": True, "sequence_end": True}
                    if sequence
                    else {}
                )
                parameters = None if sent is None else {"tag": sent}
                result = client.infer(model, made, parameters=parameters, **options)
                outputs = reference.compute_sequence([inputs])[-1] if sequence else reference.compute(inputs)
                for name, array in outputs.items():
                    np.testing.assert_allclose(
                        result.as_numpy(name).astype(np.float64), array.astype(np.float64)
                    )
                assert response_tag(result, protocol) == (expected if answers_tag else None), (protocol, sent)
            made, _ = tensors(module, reference, batch)
            options = {"sequence_id": 7100, "sequence_start": True, "sequence_end": True} if sequence else {}
            with pytest.raises(InferenceServerException) as refused:
                client.infer(model, made, parameters={"tag": 5}, **options)
            assert TAG_ERROR in refused.value.message(), (protocol, refused.value)
            assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT"), refused.value.status()
        finally:
            client.close()


def new_built(tmp_path: Path, name: str, *sets: str) -> Path:
    """A cpp-backend project with request_parameters, built warning-free (-Wall -Wextra -Werror)."""
    project = new_project(tmp_path, "cpp-backend", "request_parameters=yes", *sets, name=name)
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    log = (project / "build" / "tbgen-build.log").read_text()
    assert "-Werror" in (project / "build" / "compile_commands.json").read_text()
    assert not [line for line in log.splitlines() if str(project / "src") in line and "warning" in line]
    return project


@pytest.mark.cpp
@pytest.mark.slow
def test_cpp_backend_answers_the_tag(tmp_path, compiler_cache, server_or_skip):
    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import start_server
    from triton_backend_gen.smoke import load_reference

    triton_sources_or_skip("r24.10")
    project = new_built(tmp_path, "tagged")
    with start_server(load_project(project)) as triton:
        check_round_trip(
            triton, load_project(project).models[0].name, load_reference(project), answers_tag=True
        )


@pytest.mark.cpp
@pytest.mark.slow
def test_cpp_sequence_model_answers_the_tag_and_keeps_its_state(tmp_path, compiler_cache, server_or_skip):
    """A refused tag leaves the sequence's state as it was: the sequence goes on from the sum before it."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import start_server
    from triton_backend_gen.smoke import load_reference

    triton_sources_or_skip("r24.10")
    project = new_built(tmp_path, "tagged_seq", "sequence=oldest", "dims=4")
    reference = load_reference(project)
    model = load_project(project).models[0].name
    with start_server(load_project(project)) as triton:
        check_round_trip(triton, model, reference, answers_tag=True, sequence=True)
        with grpcclient.InferenceServerClient(triton.grpc_url) as client:
            history = []
            for step, (tag, last) in enumerate((("a", False), (5, False), (None, False), ("c", True))):
                made, inputs = tensors(grpcclient, reference, 1, seed=step)
                call = {
                    "sequence_id": 4242,
                    "sequence_start": step == 0,
                    "sequence_end": last,
                    "parameters": None if tag is None else {"tag": tag},
                }
                if isinstance(tag, int):
                    with pytest.raises(InferenceServerException, match=TAG_ERROR):
                        client.infer(model, made, **call)
                    continue
                history.append(inputs)
                result = client.infer(model, made, **call)
                for name, array in reference.compute_sequence(history)[-1].items():
                    np.testing.assert_allclose(result.as_numpy(name), array)
                assert response_tag(result, "grpc") == (tag or "untagged")


@pytest.mark.slow
@pytest.mark.parametrize(
    "sets", [[], ["batching=vectorized"], ["sequence=direct"]], ids=["per_request", "vectorized", "direct"]
)
def test_python_backend_reads_the_tag_on_24_10(tmp_path, server_or_skip, sets):
    """The 24.10 python backend has no response parameters: answered right, without the tag, and the bad tag
    refused."""
    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import start_server
    from triton_backend_gen.smoke import load_reference

    project = new_project(tmp_path, "python-backend", "request_parameters=yes", *sets, name="pytagged")
    with start_server(load_project(project)) as triton:
        check_round_trip(
            triton,
            load_project(project).models[0].name,
            load_reference(project),
            answers_tag=False,
            sequence=bool(sets and sets[0].startswith("sequence")),
        )
