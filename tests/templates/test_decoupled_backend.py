"""The decoupled-backend template: rendered files per language, their key contents, and a real build.

The build test (marked ``cpp``) compiles the C++ variant against Triton r24.10 from tbgen's source cache
with -Wall -Wextra -Werror and checks that the library exports only the backend API; it skips when the
cache lacks the release. Streaming against a live server is the generated project's own tests/ (and
tbgen's smoke tests), not this file.
"""

from __future__ import annotations

import json
import py_compile
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import TEMPLATES, read_config, template_files, triton_sources_or_skip
from tritonclient.grpc import model_config_pb2

from triton_backend_gen import versions
from triton_backend_gen.commands.templates_check import SIGNATURES as CHECKED_SIGNATURES
from triton_backend_gen.project import BackendKind, load_project
from triton_backend_gen.scaffold import read_answers_file
from triton_backend_gen.scaffold.layout import layout_problems, user_files
from triton_backend_gen.smoke import load_reference
from triton_backend_gen.toolchain.cmake import run_cmake_build

TEMPLATE = "decoupled-backend"
MODEL = "repeat_int32"

COMMON_FILES = {
    ".dockerignore",
    ".github/workflows/ci.yml",
    ".gitignore",
    "Dockerfile",
    "README.md",
    f"model_repository/{MODEL}/config.pbtxt",
    "reference.py",
    "tbgen.toml",
    "tests/conftest.py",
    f"tests/test_{MODEL}.py",
}
LANGUAGE_FILES = {
    "cpp": {
        "CMakeLists.txt",
        "CMakePresets.json",
        "cmake/my_backendConfig.cmake.in",
        f"model_repository/{MODEL}/1/.gitkeep",
        "src/compute.cc",
        "src/libtriton_my_backend.ldscript",
        "src/my_backend.cc",
        "src/tensors.h",
        "tests/unit/cases.h",
        "tests/unit/compute_test.cc",
        "tests/unit/main.cc",
        "tests/unit/write_cases.py",
        "third_party/README.md",
    },
    "python": {
        f"model_repository/{MODEL}/1/model.py",
        f"model_repository/{MODEL}/1/compute.py",
        "tests/test_compute.py",
        "tests/triton_python_backend_utils.py",
    },
}
LANGUAGES = sorted(LANGUAGE_FILES)

# The interface of Triton's repeat example: name -> (data type, dims).
INPUTS = {"IN": ("TYPE_INT32", [-1]), "DELAY": ("TYPE_UINT32", [-1]), "WAIT": ("TYPE_UINT32", [1])}
OUTPUTS = {"OUT": ("TYPE_INT32", [1]), "IDX": ("TYPE_UINT32", [1])}


def tensor_interface(tensors) -> dict[str, tuple[str, list[int]]]:
    return {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensors}


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("language", LANGUAGES)
def test_golden_file_list(render_template, language):
    project = render_template(TEMPLATE, language=language)
    assert project.name == "my-backend"
    assert template_files(project) == COMMON_FILES | LANGUAGE_FILES[language]


def test_defaults_render_the_cpp_variant(render_template):
    project = render_template(TEMPLATE)
    assert template_files(project) == COMMON_FILES | LANGUAGE_FILES["cpp"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_nothing_is_left_unrendered(render_template, language):
    project = render_template(TEMPLATE, language=language)
    for relative in template_files(project):
        text = (project / relative).read_text()
        assert not re.search(r"\{\{|\{%|cookiecutter\.", text), f"unrendered Jinja in {relative}"


@pytest.mark.parametrize("language", LANGUAGES)
def test_rendered_python_compiles(render_template, language, tmp_path):
    project = render_template(TEMPLATE, language=language)
    sources = sorted(project.rglob("*.py"))
    assert sources
    for source in sources:
        py_compile.compile(str(source), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


@pytest.mark.parametrize("language", LANGUAGES)
def test_config_is_decoupled_with_the_repeat_interface(render_template, language):
    config = read_config(render_template(TEMPLATE, language=language))
    assert config.name == MODEL
    assert config.backend == ("my_backend" if language == "cpp" else "python")
    assert config.model_transaction_policy.decoupled
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert tensor_interface(config.input) == INPUTS
    assert tensor_interface(config.output) == OUTPUTS


def test_model_name_answer_names_the_model(render_template):
    project = render_template(TEMPLATE, language="python", model_name="stream_me")
    assert read_config(project, "stream_me").name == "stream_me"
    assert (project / "model_repository/stream_me/1/model.py").is_file()
    assert (project / "tests/test_stream_me.py").is_file()
    assert 'MODEL_NAME = "stream_me"' in (project / "tests/conftest.py").read_text()


@pytest.mark.parametrize("language", LANGUAGES)
def test_tbgen_toml_records_the_project(render_template, language):
    project = load_project(render_template(TEMPLATE, language=language, triton_version="24.10"))
    assert project.template == TEMPLATE
    assert project.kind == (BackendKind.CPP if language == "cpp" else BackendKind.PYTHON)
    assert project.backend == "my_backend"
    assert project.release == versions.resolve("24.10")
    assert project.gpu is False
    assert project.model_repository == project.root / "model_repository"
    assert [(m.name, m.decoupled) for m in project.models] == [(MODEL, True)] and project.decoupled
    assert read_answers_file(project.project_file)["language"] == language


def test_cookiecutter_json_follows_the_contract():
    context = json.loads((TEMPLATES / TEMPLATE / "cookiecutter.json").read_text())
    assert context["model_name"] == MODEL
    assert context["_tbgen_template"] == TEMPLATE
    assert context["language"] == ["cpp", "python"]


def test_cpp_cmakelists_targets_the_release_and_exports_only_the_backend_api(render_template):
    project = render_template(TEMPLATE, triton_version="24.10")
    cmakelists = (project / "CMakeLists.txt").read_text()
    for repo in ("COMMON", "CORE", "BACKEND"):
        assert re.search(rf'set\(TRITON_{repo}_REPO_TAG "r24\.10"', cmakelists), repo
    assert "main" not in re.findall(r'REPO_TAG "([^"]*)"', cmakelists)
    assert re.search(r'option\(TRITON_ENABLE_GPU "[^"]*" OFF\)', cmakelists)
    assert "option(TRITON_ENABLE_STATS" in cmakelists
    assert "OUTPUT_NAME triton_my_backend" in cmakelists
    assert "LIBRARY DESTINATION backends/my_backend" in cmakelists
    assert "CMAKE_EXPORT_COMPILE_COMMANDS ON" in cmakelists
    script = (project / "src/libtriton_my_backend.ldscript").read_text()
    assert re.search(r"global:\s*TRITONBACKEND_\*;\s*local:\s*\*;", script)


@pytest.mark.parametrize("language", LANGUAGES)
def test_dockerfile_has_a_build_stage_only_for_cpp(render_template, language):
    dockerfile = (
        render_template(TEMPLATE, language=language, triton_version="24.10") / "Dockerfile"
    ).read_text()
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3" in dockerfile
    assert ("AS build" in dockerfile) == (language == "cpp")
    assert ("/opt/tritonserver/backends/my_backend" in dockerfile) == (language == "cpp")


@pytest.mark.parametrize("language", LANGUAGES)
def test_generated_tests_stream_with_the_final_flag(render_template, language):
    project = render_template(TEMPLATE, language=language)
    tests = (project / f"tests/test_{MODEL}.py").read_text()
    assert "enable_empty_final_response=True" in tests
    assert "TRITON_GRPC_URL" in (project / "tests/conftest.py").read_text()


def test_post_gen_hook_removes_files_by_explicit_list():
    hook = (TEMPLATES / TEMPLATE / "hooks/post_gen_project.py").read_text()
    assert '"cpp": ["CMakeLists.txt", "CMakePresets.json", "cmake", "src"' in hook
    assert '"python": [str(VERSION_DIR / "model.py"), str(VERSION_DIR / "compute.py")]' in hook


# --------------------------------------------------------------------------- reference.py


@pytest.mark.parametrize("language", LANGUAGES)
def test_reference_streams_one_response_per_element(render_template, language):
    reference = load_reference(render_template(TEMPLATE, language=language))
    inputs = reference.make_inputs(None, seed=0)
    assert {name: array.dtype for name, array in inputs.items()} == {
        "IN": np.dtype(np.int32),
        "DELAY": np.dtype(np.uint32),
        "WAIT": np.dtype(np.uint32),
    }
    assert (
        inputs["IN"].ndim == 1
        and inputs["DELAY"].shape == inputs["IN"].shape
        and inputs["WAIT"].shape == (1,)
    )
    responses = reference.responses(inputs)
    assert len(responses) == inputs["IN"].size
    for index, response in enumerate(responses):
        assert set(response) == {"OUT", "IDX"}
        assert response["OUT"].dtype == np.int32 and response["OUT"].shape == (1,)
        assert response["IDX"].dtype == np.uint32 and response["IDX"].shape == (1,)
        assert response["OUT"][0] == inputs["IN"][index] and response["IDX"][0] == index
    assert reference.TOLERANCE == {"rtol": 0, "atol": 0}


def test_reference_inputs_are_deterministic_per_seed(render_template):
    reference = load_reference(render_template(TEMPLATE))
    first, again, other = (reference.make_inputs(None, seed=s) for s in (0, 0, 1))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["IN"], other["IN"])


def test_reference_of_the_repeat_example_request(render_template):
    reference = load_reference(render_template(TEMPLATE))
    inputs = {
        "IN": np.array([4, 2, 0, 1], np.int32),
        "DELAY": np.full(4, 10, np.uint32),
        "WAIT": np.array([5], np.uint32),
    }
    assert [(r["OUT"][0], r["IDX"][0]) for r in reference.responses(inputs)] == [
        (4, 0),
        (2, 1),
        (0, 2),
        (1, 3),
    ]
    assert reference.responses({**inputs, "IN": np.zeros(0, np.int32), "DELAY": np.zeros(0, np.uint32)}) == []


def test_reference_refuses_a_batch_size_and_a_short_delay(render_template):
    reference = load_reference(render_template(TEMPLATE))
    with pytest.raises(ValueError, match="max_batch_size 0"):
        reference.make_inputs(2)
    inputs = reference.make_inputs(None)
    with pytest.raises(ValueError, match="DELAY"):
        reference.responses({**inputs, "DELAY": inputs["DELAY"][:-1]})


# --------------------------------------------------------------------------- build


@pytest.mark.cpp
@pytest.mark.slow
def test_cpp_variant_builds_against_r24_10(render_template, compiler_cache):
    sources = triton_sources_or_skip("r24.10")
    project = render_template(TEMPLATE, language="cpp", triton_version="24.10")
    install = run_cmake_build(project, project / "build", triton_sources=sources, gpu=False)

    library = install / "backends" / "my_backend" / "libtriton_my_backend.so"
    assert library.is_file()
    log = (project / "build" / "tbgen-build.log").read_text()
    own_sources = str(project / "src")
    assert "-Werror" in (project / "build" / "compile_commands.json").read_text()
    assert not [line for line in log.splitlines() if own_sources in line and "warning" in line]

    nm = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    )
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert exported == {
        "TRITONBACKEND_Initialize",
        "TRITONBACKEND_ModelInitialize",
        "TRITONBACKEND_ModelFinalize",
        "TRITONBACKEND_ModelInstanceInitialize",
        "TRITONBACKEND_ModelInstanceFinalize",
        "TRITONBACKEND_ModelInstanceExecute",
    }
    # The CMake package (lib/ or lib64/, as GNUInstallDirs decides).
    assert list(install.glob("lib*/cmake/my_backend/my_backendConfig.cmake"))
    assert list(install.glob("lib*/cmake/my_backend/my_backendTargets.cmake"))


# --------------------------------------------------------------------------- the C++ backend with a signature

CPP_SIGNATURE = CHECKED_SIGNATURES["mixed"].context()


def test_cpp_with_a_signature_renders_its_tensors_and_the_users_stream(render_template):
    project = render_template(TEMPLATE, signature=CPP_SIGNATURE)
    config = read_config(project)
    assert config.model_transaction_policy.decoupled and config.max_batch_size == 0
    assert tensor_interface(config.input) == {
        "TEXT": ("TYPE_STRING", [1]),
        "LANG": ("TYPE_STRING", [1]),
        "IMG": ("TYPE_FP16", [3, -1]),
        "K": ("TYPE_INT32", [1]),
    }
    assert [t.optional for t in config.input] == [False, True, False, False]
    assert tensor_interface(config.output) == {
        "TOKENS": ("TYPE_INT64", [-1]),
        "LABEL": ("TYPE_STRING", [1]),
        "SCORE": ("TYPE_FP32", [4]),
    }
    # The user's stream in src/compute.cc (the placeholder between its markers), the plumbing apart.
    assert [str(p.relative_to(project)) for p in user_files(project)] == ["src/compute.cc"]
    assert layout_problems(project) == []
    compute = (project / "src" / "compute.cc").read_text()
    assert compute.index("// ---- Your logic ----") < compute.index("StreamResponses(")
    assert compute.index("// ---- End of the placeholder.") < compute.index("// ---- End of your logic ----")


# --------------------------------------------------------------------------- reference.py of a signature


@pytest.mark.parametrize("batching", [0, 4])
def test_reference_streams_k_responses_of_n_plus_i(render_template, batching):
    """K from the first integer input of one element (here K), n over the whole request; the final flag rides
    on the last response; a request with K = 0 streams none."""
    reference = load_reference(render_template(TEMPLATE, signature=CPP_SIGNATURE, max_batch_size=batching))
    assert reference.FINAL_WITH_LAST_RESPONSE and reference.MAX_RESPONSES == 64
    batch = batching or None
    for seed in range(4):
        inputs = reference.make_inputs(batch, seed=seed)
        count = int(inputs["K"].flat[0])
        responses = reference.responses(inputs)
        assert 1 <= count <= 4 and len(responses) == count
        n = int(reference.responses({**inputs, "K": np.ones_like(inputs["K"])})[0]["SCORE"].flat[0])
        for i, response in enumerate(responses):
            assert response["TOKENS"].shape == ((batch,) if batch else ()) + (1,)
            assert response["LABEL"].flat[0] == str(n + i).encode() and response["SCORE"].flat[0] == n + i
    assert len(reference.responses({**inputs, "K": np.full_like(inputs["K"], 1000)})) == 64
    assert reference.responses(reference.no_response_inputs(batch)) == []


def test_reference_without_an_integer_input_streams_the_first_inputs_elements(render_template):
    reference = load_reference(render_template(TEMPLATE, signature=CHECKED_SIGNATURES["bytes-in"].context()))
    assert reference.count_input(reference.make_inputs(None)) is None
    for seed in range(3):
        inputs = reference.make_inputs(None, seed=seed)
        assert len(reference.responses(inputs)) == inputs["TEXT"].size >= 1
    silent = reference.no_response_inputs(None)
    assert silent["TEXT"].size == 0 and reference.responses(silent) == []


# -------------------------------------------------------------------------- the python model with a signature

SIGNATURES = {
    "mixed": CHECKED_SIGNATURES["mixed"].context(),
    "bytes_in": CHECKED_SIGNATURES["bytes-in"].context(),
}


def python_model_file(project: Path) -> Path:
    return project / "model_repository" / load_project(project).models[0].name / "1" / "model.py"


def load_python_model(project: Path):
    """The decoupled model.py as a module, as the python backend's stub imports it: with the real
    triton_python_backend_utils of the embedded server's wheel and its own directory (compute.py) on
    sys.path."""
    import importlib.util
    import sys

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nvidia-pytriton (the embedded server, `pip install .[server]`) is not installed")
    pb_utils_dir = Path(next(iter(spec.submodule_search_locations))) / "tritonserver" / "backends" / "python"
    model_py = python_model_file(project)
    paths = [str(pb_utils_dir), str(model_py.parent)]
    sys.path[:0] = paths
    sys.modules.pop("compute", None)  # each project's own compute.py
    try:
        module_spec = importlib.util.spec_from_file_location(f"decoupled_model_{id(project)}", model_py)
        model = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(model)
        return model
    finally:
        sys.modules.pop("compute", None)
        for path in paths:
            sys.path.remove(path)


@pytest.mark.parametrize("answers", [{}, {"signature": SIGNATURES["mixed"]}, {"sequence": "oldest"}])
def test_python_model_is_plumbing_around_the_users_compute_py(render_template, answers):
    """model.py is generated and imports compute.py beside it, the user's (small, its logic between markers):
    the repeat example's stream(), a signature's stream() or a sequence's step()."""
    project = render_template(TEMPLATE, language="python", **answers)
    yours = f"model_repository/{load_project(project).models[0].name}/1/compute.py"
    assert [str(p.relative_to(project)) for p in user_files(project)] == [yours]
    assert layout_problems(project) == []
    header = python_model_file(project).read_text().splitlines()[1]
    assert header == f"# `tbgen update` rewrites it: put your code in {yours}, which is yours."
    model = load_python_model(project)
    assert Path(model.compute.__file__) == project / yours
    compute = (project / yours).read_text()
    assert compute.index("# ---- Your logic ----") < compute.index("# ---- End of your logic ----")
    assert hasattr(model.compute, "step" if answers.get("sequence") else "stream")


def test_python_repeat_stream_is_the_reference(render_template):
    project = render_template(TEMPLATE, language="python")
    model, reference = load_python_model(project), load_reference(project)
    for seed in range(3):
        inputs = reference.make_inputs(None, seed=seed)
        inputs["DELAY"] = np.zeros_like(inputs["DELAY"])  # no waiting here
        got = list(model.compute.stream(inputs))
        expected = reference.responses(inputs)
        assert [sorted(r) for r in got] == [sorted(r) for r in expected]
        for response, want in zip(got, expected, strict=True):
            for name, array in want.items():
                assert response[name].dtype == array.dtype and response[name].tolist() == array.tolist()


@pytest.mark.parametrize("batching", [0, 4])
@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_python_model_stream_is_the_reference_responses(render_template, name, batching):
    """compute.py's stream() yields reference.responses(): K responses of n + i (optional inputs given or
    left out, K from the count input or the first input's elements, none for K = 0, at most 64)."""
    project = render_template(
        TEMPLATE, language="python", signature=SIGNATURES[name], max_batch_size=batching
    )
    model = load_python_model(project)
    reference = load_reference(project)
    requests = [reference.make_inputs(batching or None, seed=seed) for seed in range(6)]
    silent = reference.no_response_inputs(batching or None)
    requests += [silent] if silent is not None else []
    count = reference.count_input(requests[0])
    if count is not None:
        requests.append({**requests[0], count: np.full_like(requests[0][count], 1000)})  # clamped to 64
    for inputs in requests:
        expected = reference.responses(inputs)
        got = list(model.compute.stream({tensor: inputs.get(tensor) for tensor in model.INPUTS}))
        assert len(got) == len(expected)
        for outputs, want in zip(got, expected, strict=True):
            assert list(outputs) == list(want)
            for tensor, array in want.items():
                value = np.asarray(outputs[tensor])
                assert (value.dtype, value.shape) == (array.dtype, array.shape), tensor
                assert value.tolist() == array.tolist(), tensor


@pytest.mark.slow
def test_python_model_with_a_signature_passes_the_smoke_suite(render_template, server_or_skip):
    """Served by the embedded tritonserver: gRPC streams each get reference.py's responses, the final flag on
    the last one (alone for a request with none), cancelled mid-stream; bad requests are refused."""
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke import Endpoints, plan_smoke, run_smoke

    project = load_project(
        render_template(TEMPLATE, language="python", triton_version="24.10", signature=SIGNATURES["mixed"])
    )
    with prepare_server(project) as triton:
        results = run_smoke(
            plan_smoke(project), Endpoints(http_url=triton.http_url, grpc_url=triton.grpc_url)
        )
    failed = [f"{r.name} [{r.protocol}]: {r.detail}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)
    assert any(r.name == "stream" and r.passed for r in results)
