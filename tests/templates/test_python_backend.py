"""The python-backend template: rendered files per option, their key contents, and the native extension.

The native tests build the rendered pybind11 extension with CMake (-Wall -Wextra -Werror) for this Python,
import it and compare it with the project's reference.py. auto_complete_config runs against the real
``triton_python_backend_utils`` shipped with the embedded server (the nvidia-pytriton wheel).
"""

from __future__ import annotations

import importlib.util
import json
import py_compile
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from conftest import build_native, read_config, template_files
from tritonclient.grpc import model_config_pb2

from triton_backend_gen import versions
from triton_backend_gen.commands.templates_check import SIGNATURES as CHECKED_SIGNATURES
from triton_backend_gen.project import BackendKind, load_project
from triton_backend_gen.scaffold import read_answers_file

TEMPLATE = "python-backend"

COMMON_FILES = {
    ".dockerignore",
    ".github/workflows/ci.yml",
    ".gitignore",
    "Dockerfile",
    "README.md",
    "model_repository/add_sub/config.pbtxt",
    "reference.py",
    "tbgen.toml",
    "tests/conftest.py",
    "tests/test_add_sub.py",
}
STOCK_MODEL_FILES = {"model_repository/add_sub/1/model.py"}
PYTHON_BASED_BACKEND_FILES = {"backends/my_backend/model.py", "model_repository/add_sub/1/.gitkeep"}
NATIVE_FILES = {"native/CMakeLists.txt", "native/src/my_backend_native.cc"}

OPTION_MATRIX = [
    {"native": native, "python_based_backend": pbb, "batching": batching}
    for native in (False, True)
    for pbb in (False, True)
    for batching in ("per_request", "vectorized")
]


def option_id(options: dict) -> str:
    return "-".join(f"{key}={value}" for key, value in options.items())


def model_file(project: Path) -> Path:
    backend = project / "backends" / "my_backend" / "model.py"
    if backend.is_file():
        return backend
    return project / "model_repository" / load_project(project).models[0].name / "1" / "model.py"


def load_module(path: Path, name: str | None = None):
    spec = importlib.util.spec_from_file_location(name or f"{path.stem}_{id(path)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("options", OPTION_MATRIX, ids=option_id)
def test_golden_file_list(render_template, options):
    project = render_template(TEMPLATE, **options)
    expected = set(COMMON_FILES)
    expected |= PYTHON_BASED_BACKEND_FILES if options["python_based_backend"] else STOCK_MODEL_FILES
    expected |= NATIVE_FILES if options["native"] else set()
    assert template_files(project) == expected


@pytest.mark.parametrize("options", OPTION_MATRIX, ids=option_id)
def test_rendered_files_are_code_without_jinja(render_template, options, tmp_path):
    project = render_template(TEMPLATE, **options)
    for name in template_files(project):
        text = (project / name).read_text()
        assert "{{" not in text and "{%" not in text and "cookiecutter" not in text, name
    for path in project.rglob("*.py"):
        py_compile.compile(str(path), cfile=str(tmp_path / "pyc" / (path.name + "c")), doraise=True)


@pytest.mark.parametrize("dtype", ["FP32", "FP16", "INT32", "INT64"])
@pytest.mark.parametrize("dims,max_batch_size", [("16", 8), ("2,3", 0), ("-1", 4)])
def test_every_dtype_and_shape_renders_compiling_python(
    render_template, dtype, dims, max_batch_size, tmp_path
):
    project = render_template(
        TEMPLATE, dtype=dtype, dims=dims, max_batch_size=max_batch_size, batching="vectorized", native=True
    )
    for path in project.rglob("*.py"):
        py_compile.compile(str(path), cfile=str(tmp_path / "pyc" / (path.name + "c")), doraise=True)


# --------------------------------------------------------------------------- config.pbtxt and tbgen.toml


def test_default_config_is_a_batching_python_model(render_template):
    project = render_template(TEMPLATE)
    config = read_config(project)
    assert config.name == "add_sub"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert config.HasField("dynamic_batching")
    assert [t.name for t in config.input] == ["INPUT0", "INPUT1"]
    assert [t.name for t in config.output] == ["OUTPUT0", "OUTPUT1"]
    for tensor in [*config.input, *config.output]:
        assert tensor.data_type == model_config_pb2.TYPE_FP32
        assert list(tensor.dims) == [16]
    assert [(g.kind, g.count) for g in config.instance_group] == [
        (model_config_pb2.ModelInstanceGroup.KIND_CPU, 1)
    ]


def test_config_follows_the_answers(render_template):
    project = render_template(
        TEMPLATE,
        dtype="INT64",
        dims="2,-1",
        max_batch_size=0,
        dynamic_batching=True,
        instance_count=3,
        input0_name="A",
        input1_name="B",
        output0_name="SUM",
        output1_name="DIFF",
        python_based_backend=True,
    )
    config = read_config(project)
    assert config.backend == "my_backend"
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")  # no batching, no dynamic batcher
    assert [t.name for t in config.input] == ["A", "B"]
    assert [t.name for t in config.output] == ["SUM", "DIFF"]
    assert {t.data_type for t in [*config.input, *config.output]} == {model_config_pb2.TYPE_INT64}
    assert {tuple(t.dims) for t in [*config.input, *config.output]} == {(2, -1)}
    assert config.instance_group[0].count == 3
    model = model_file(project).read_text()
    for name in ("A", "B", "SUM", "DIFF"):
        assert f'= "{name}"' in model


@pytest.mark.parametrize("options", OPTION_MATRIX, ids=option_id)
def test_tbgen_toml_is_the_contract(render_template, options):
    project = render_template(TEMPLATE, **options)
    loaded = load_project(project)
    assert loaded.template == TEMPLATE
    based = options["python_based_backend"]
    assert loaded.kind == (BackendKind.PYTHON_BASED if based else BackendKind.PYTHON)
    assert loaded.python_based_dir == (project / "backends" / "my_backend" if based else None)
    assert loaded.backend == "my_backend"
    answers = read_answers_file(loaded.project_file)
    assert loaded.release == versions.resolve(answers["triton_version"])
    assert f"tritonserver:{loaded.release.container}-py3" in (project / "Dockerfile").read_text()
    assert not loaded.gpu
    assert loaded.model_repository == project / "model_repository"
    assert [(m.name, m.decoupled) for m in loaded.models] == [("add_sub", False)]
    assert (loaded.native is not None) == options["native"]
    for key, value in options.items():
        assert answers[key] == value
    raw = tomllib.loads((project / "tbgen.toml").read_text())
    if options["native"]:
        native = raw["native"]
        assert (project / native["source_dir"] / "CMakeLists.txt").is_file()
        assert native["module"] == "my_backend_native"
        assert (project / native["install_dir"]) == model_file(project).parent
    else:
        assert "native" not in raw
    if options["python_based_backend"]:
        assert (project / raw["python_based_backend"]["dir"] / "model.py").is_file()
    else:
        assert "python_based_backend" not in raw


# --------------------------------------------------------------------------- model.py


def test_default_model_is_the_lean_per_request_path(render_template):
    model = model_file(render_template(TEMPLATE)).read_text()
    for needle in (
        "def auto_complete_config",
        "def initialize",
        "def execute",
        "def finalize",
        "pb_utils.Logger",
        "request.is_cancelled()",
        "pb_utils.TritonError.CANCELLED",
        "triton_string_to_numpy",
        "get_input_tensor_by_name",
        "def compute(",
    ):
        assert needle in model, needle
    assert model.count("get_input_tensor_by_name") == 1  # one read per input, in one loop
    assert "np.concatenate" not in model
    assert "native" not in model


def test_vectorized_model_concatenates_and_documents_the_trade_off(render_template):
    model = model_file(render_template(TEMPLATE, batching="vectorized")).read_text()
    assert "np.concatenate" in model and "np.split" in model
    assert "10-25%" in model


def test_native_model_imports_the_extension_with_a_numpy_fallback(render_template):
    model = model_file(render_template(TEMPLATE, native=True)).read_text()
    assert "import my_backend_native as native_ext" in model
    assert "except ImportError:" in model
    assert "COMPUTE_PATH" in model and "compute path:" in model


def test_python_based_backend_keeps_only_gitkeep_in_the_version_dir(render_template):
    project = render_template(TEMPLATE, python_based_backend=True)
    assert [p.name for p in (project / "model_repository" / "add_sub" / "1").iterdir()] == [".gitkeep"]
    assert "class TritonPythonModel" in (project / "backends" / "my_backend" / "model.py").read_text()


@pytest.fixture(scope="module")
def pb_utils_dir() -> Path:
    """The python backend's triton_python_backend_utils.py, from the embedded server's wheel."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nvidia-pytriton (the embedded server, `pip install .[server]`) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "tritonserver" / "backends" / "python"
    if not (path / "triton_python_backend_utils.py").is_file():
        pytest.skip(f"no triton_python_backend_utils.py in {path}")
    return path


def auto_complete(model_py: Path, pb_utils_dir: Path, config: dict) -> dict:
    """Run the model's auto_complete_config on ``config`` as the python backend's stub would."""
    sys.path.insert(0, str(pb_utils_dir))
    try:
        pb_utils = importlib.import_module("triton_python_backend_utils")
        model = load_module(model_py)
        completed = model.TritonPythonModel.auto_complete_config(pb_utils.ModelConfig(json.dumps(config)))
        return completed.as_dict()
    finally:
        sys.path.remove(str(pb_utils_dir))


def test_auto_complete_fills_a_config_less_model(render_template, pb_utils_dir):
    project = render_template(TEMPLATE, dtype="FP16", dims="2,3", max_batch_size=4)
    config = auto_complete(
        model_file(project), pb_utils_dir, {"name": "add_sub", "max_batch_size": 0, "input": [], "output": []}
    )
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    tensors = {t["name"]: (t["data_type"], t["dims"]) for t in config["input"] + config["output"]}
    assert tensors == {name: ("TYPE_FP16", [2, 3]) for name in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")}


def test_auto_complete_keeps_what_the_config_declares(render_template, pb_utils_dir):
    project = render_template(TEMPLATE)
    declared = {
        "name": "add_sub",
        "max_batch_size": 0,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [5]}],
        "output": [],
    }
    config = auto_complete(model_file(project), pb_utils_dir, json.loads(json.dumps(declared)))
    assert config["max_batch_size"] == 0  # declared inputs: the file's batching choice stands
    assert "dynamic_batching" not in config
    assert config["input"][0] == declared["input"][0]
    assert [t["name"] for t in config["input"]] == ["INPUT0", "INPUT1"]
    assert [t["name"] for t in config["output"]] == ["OUTPUT0", "OUTPUT1"]


# --------------------------------------------------------------------------- other files


def test_dockerfile_builds_on_the_release_image(render_template):
    plain = (
        render_template(TEMPLATE, project_name="plain", triton_version="24.10") / "Dockerfile"
    ).read_text()
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3" in plain
    assert "AS build" not in plain and "backends/" not in plain
    combined = render_template(TEMPLATE, project_name="both", native=True, python_based_backend=True)
    dockerfile = (combined / "Dockerfile").read_text()
    assert "FROM ${BASE_IMAGE} AS build" in dockerfile
    assert "COPY backends/both/ /opt/tritonserver/backends/both/" in dockerfile
    assert "COPY --from=build /out/ /opt/tritonserver/backends/both/" in dockerfile


def test_readme_and_ci_describe_the_project(render_template):
    project = render_template(TEMPLATE, native=True)
    readme = (project / "README.md").read_text()
    assert "model_repository/add_sub/1/model.py" in readme
    assert "cmake -S native" in readme and "compute path: native" in readme
    ci = (project / ".github" / "workflows" / "ci.yml").read_text()
    assert "docker build" in ci and "pytest" in ci and "cmake -S native" in ci
    assert "*.so" in (project / ".gitignore").read_text()


def test_project_tests_skip_with_a_reason_without_a_server(render_template, tmp_path):
    project = render_template(TEMPLATE)
    closed = "127.0.0.1:9"  # discard port: nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": str(Path(sys.executable).parent), "TRITON_HTTP_URL": closed, "TRITON_GRPC_URL": closed},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no Triton server answers over HTTP at 127.0.0.1:9" in result.stdout
    assert " passed" not in result.stdout and "failed" not in result.stdout


# --------------------------------------------------------------------------- reference.py


@pytest.mark.parametrize("dtype", ["FP32", "FP16", "INT32", "INT64"])
def test_reference_inputs_and_outputs(render_template, dtype):
    reference = load_module(render_template(TEMPLATE, dtype=dtype, dims="2,-1") / "reference.py")
    expected_dtype = {"FP32": np.float32, "FP16": np.float16, "INT32": np.int32, "INT64": np.int64}[dtype]
    inputs = reference.make_inputs(5, seed=1)
    assert set(inputs) == {"INPUT0", "INPUT1"}
    for array in inputs.values():
        assert array.dtype == expected_dtype
        assert array.shape == (5, 2, reference.VARIABLE_DIM_SIZE)
    again = reference.make_inputs(5, seed=1)
    assert all(np.array_equal(inputs[name], again[name]) for name in inputs)
    other = reference.make_inputs(5, seed=2)
    assert not np.array_equal(inputs["INPUT0"], other["INPUT0"])
    assert not np.array_equal(inputs["INPUT0"], inputs["INPUT1"])

    outputs = reference.compute(inputs)
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    in0, in1 = (inputs[n].astype(np.float64) for n in ("INPUT0", "INPUT1"))
    tolerance = reference.TOLERANCE
    np.testing.assert_allclose(outputs["OUTPUT0"].astype(np.float64), in0 + in1, **tolerance)
    np.testing.assert_allclose(outputs["OUTPUT1"].astype(np.float64), in0 - in1, **tolerance)
    if np.issubdtype(expected_dtype, np.integer):
        assert tolerance == {"rtol": 0, "atol": 0}
    else:
        assert tolerance["rtol"] > 0


def test_reference_without_batching(render_template):
    reference = load_module(render_template(TEMPLATE, max_batch_size=0, dims="4") / "reference.py")
    assert reference.MAX_BATCH_SIZE == 0
    assert reference.make_inputs(None)["INPUT0"].shape == (4,)


# --------------------------------------------------------------------------- the native extension


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["FP32", "FP16"])
def test_native_extension_builds_warning_free_and_matches_reference(
    render_template, require_pybind11, dtype, tmp_path
):
    # A backend name per dtype, so that each build is a distinct extension module in this process.
    backend = f"native_{dtype.lower()}"
    project = render_template(TEMPLATE, project_name=backend, dtype=dtype, dims="3,-1", native=True)
    commands = json.loads(build_native(project).read_text())
    flags = " ".join(entry["command"] for entry in commands)
    for flag in ("-Wall", "-Wextra", "-Werror"):
        assert flag in flags
    version_dir = project / "model_repository" / "add_sub" / "1"
    modules = list(version_dir.glob(f"{backend}_native.*.so"))
    assert len(modules) == 1, (
        f"the module was not installed next to model.py: {sorted(version_dir.iterdir())}"
    )

    native = load_module(modules[0], f"{backend}_native")
    reference = load_module(project / "reference.py")
    assert np.dtype(native.DTYPE) == np.dtype(reference.DTYPE)

    for batch_size in (1, 4):
        inputs = reference.make_inputs(batch_size, seed=batch_size)
        out0, out1 = native.add_sub(inputs["INPUT0"], inputs["INPUT1"])
        expected = reference.compute(inputs)
        for name, actual in (("OUTPUT0", out0), ("OUTPUT1", out1)):
            assert actual.dtype == expected[name].dtype and actual.shape == expected[name].shape
            np.testing.assert_allclose(actual, expected[name], **reference.TOLERANCE, err_msg=name)

    if dtype == "FP16":  # the half <-> float conversions agree with numpy's on every finite value
        every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
        every_half = every_half[np.isfinite(every_half)]
        out0, out1 = native.add_sub(every_half, np.zeros_like(every_half))
        assert np.array_equal(out0.view(np.uint16), (every_half + np.float16(0)).view(np.uint16))
        rng = np.random.default_rng(0)
        a, b = (rng.normal(0, 1e3, 100_000).astype(np.float16) for _ in range(2))
        with np.errstate(over="ignore"):
            assert np.array_equal(native.add_sub(a, b)[0], a + b, equal_nan=True)
            assert np.array_equal(native.add_sub(a, b)[1], a - b, equal_nan=True)

    wrong = np.zeros(3, dtype=np.float64)
    with pytest.raises(TypeError, match=native.DTYPE):
        native.add_sub(wrong, wrong)
    good = reference.make_inputs(1)["INPUT0"]
    with pytest.raises(ValueError, match="same shape"):
        native.add_sub(good, np.concatenate([good, good], axis=-1))


# --------------------------------------------------------------------------- signatures of your own

MIXED = CHECKED_SIGNATURES["mixed"].context()
BYTES_IN = CHECKED_SIGNATURES["bytes-in"].context()
# Tensor names whose lower case is a keyword, a name compute() uses, or another tensor's.
AWKWARD = {
    "inputs": [
        {"name": "IN", "datatype": "BOOL", "dims": [2]},
        {"name": "In", "datatype": "UINT8", "dims": [-1], "optional": True},
        {"name": "N", "datatype": "FP64", "dims": [1]},
    ],
    "outputs": [
        {"name": "NP", "datatype": "BOOL", "dims": [2]},
        {"name": "inputs", "datatype": "INT8", "dims": [-1, 2]},
        {"name": "FILLED", "datatype": "UINT16", "dims": [1]},
    ],
}


def load_model(model_py: Path, pb_utils_dir: Path):
    """The rendered model.py as a module, importing the real triton_python_backend_utils."""
    sys.path.insert(0, str(pb_utils_dir))
    try:
        return load_module(model_py)
    finally:
        sys.path.remove(str(pb_utils_dir))


def assert_same_outputs(actual: dict, expected: dict, tolerance: dict) -> None:
    assert list(actual) == list(expected)
    for name, want in expected.items():
        got = np.asarray(actual[name])
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(got, want, **tolerance, err_msg=name)
        else:
            assert got.tolist() == want.tolist(), name


@pytest.mark.parametrize("batching", ["per_request", "vectorized"])
def test_signature_model_names_each_tensor_and_shows_the_decoding(render_template, batching, tmp_path):
    project = render_template(TEMPLATE, signature=MIXED, batching=batching)
    model = model_file(project).read_text()
    for line in (
        'text = inputs["TEXT"]  # BYTES [batch, 1]',
        'lang = inputs["LANG"]',
        'img = inputs["IMG"]',
        'k = inputs["K"]',
        "if lang is not None:",
        'strings = [s.decode("utf-8", "replace") for s in text.flat]',
        '"TOKENS": ("TYPE_INT64", [-1])',
        "tokens = filled(n, (1,), np.int64)",
        '"LABEL": label,',
    ):
        assert line in model, line
    assert ("np.concatenate" in model) == (batching == "vectorized")
    assert "INPUT0" not in model and "OUTPUT0" not in model
    py_compile.compile(str(model_file(project)), cfile=str(tmp_path / "model.pyc"), doraise=True)
    config = read_config(project)
    assert [(t.name, t.optional) for t in config.input] == [
        ("TEXT", False),
        ("LANG", True),
        ("IMG", False),
        ("K", False),
    ]
    assert [t.name for t in config.output] == ["TOKENS", "LABEL", "SCORE"]


@pytest.mark.parametrize("signature", [MIXED, BYTES_IN, AWKWARD], ids=["mixed", "bytes_in", "awkward_names"])
@pytest.mark.parametrize("max_batch_size", [8, 0])
def test_signature_compute_equals_the_reference(render_template, pb_utils_dir, signature, max_batch_size):
    """compute() of model.py gives reference.compute()'s outputs, optional inputs present or not (None)."""
    project = render_template(TEMPLATE, signature=signature, max_batch_size=max_batch_size)
    model = load_model(model_file(project), pb_utils_dir)
    reference = load_module(project / "reference.py")
    assert list(model.INPUTS) == list(reference.INPUTS) and list(model.OUTPUTS) == list(reference.OUTPUTS)
    for seed in range(6):
        inputs = reference.make_inputs(1 + seed if max_batch_size else None, seed=seed)
        given = {name: inputs.get(name) for name in model.INPUTS}  # None: left out, as the model reads it
        assert_same_outputs(model.compute(given), reference.compute(inputs), reference.TOLERANCE)


@pytest.mark.parametrize("dtype", ["BYTES", "BOOL", "UINT8", "INT8", "UINT64", "FP16", "FP64"])
def test_add_sub_compute_equals_the_reference_in_every_dtype(render_template, pb_utils_dir, dtype):
    project = render_template(TEMPLATE, dtype=dtype, dims="2,-1")
    model = load_model(model_file(project), pb_utils_dir)
    reference = load_module(project / "reference.py")
    for batch_size in (1, 5):
        inputs = reference.make_inputs(batch_size, seed=batch_size)
        assert_same_outputs(model.compute(inputs), reference.compute(inputs), reference.TOLERANCE)
    if dtype == "BYTES":  # an element that is no decimal integer is the request's fault
        words = np.array([[b"12", b"twelve"]], dtype=np.object_)
        with pytest.raises(model.BadRequest, match="decimal integer"):
            model.compute({"INPUT0": words, "INPUT1": words})


def test_auto_complete_leaves_tensors_and_batching_to_model_py(render_template, pb_utils_dir):
    project = render_template(TEMPLATE, signature=MIXED, auto_complete=True)
    config = read_config(project)
    assert (config.backend, config.max_batch_size) == ("python", 0)
    assert not config.input and not config.output and not config.HasField("dynamic_batching")
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    # What the server hands auto_complete_config for this config.pbtxt: no tensors, max_batch_size 0.
    completed = auto_complete(
        model_file(project),
        pb_utils_dir,
        {"name": config.name, "backend": "python", "max_batch_size": 0, "input": [], "output": []},
    )
    assert completed["max_batch_size"] == 8 and "dynamic_batching" in completed
    tensors = {t["name"]: (t["data_type"], t["dims"], t.get("optional", False)) for t in completed["input"]}
    assert tensors == {
        "TEXT": ("TYPE_STRING", [1], False),
        "LANG": ("TYPE_STRING", [1], True),
        "IMG": ("TYPE_FP16", [3, -1], False),
        "K": ("TYPE_INT32", [1], False),
    }
    assert [(t["name"], t["data_type"], t["dims"]) for t in completed["output"]] == [
        ("TOKENS", "TYPE_INT64", [-1]),
        ("LABEL", "TYPE_STRING", [1]),
        ("SCORE", "TYPE_FP32", [4]),
    ]
    # Without auto_complete the config declares everything itself.
    assert (
        read_config(render_template(TEMPLATE, project_name="declared", signature=MIXED)).max_batch_size == 8
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "answers",
    [
        {"signature": MIXED, "batching": "vectorized"},
        {"signature": MIXED, "auto_complete": True},
        {"dtype": "BYTES", "dims": "-1"},
    ],
    ids=["mixed-vectorized", "mixed-auto_complete", "add_sub-BYTES"],
)
def test_signature_projects_pass_the_smoke_suite_in_the_embedded_server(
    render_template, server_or_skip, answers
):
    """Rendered, served by the embedded tritonserver and smoke-tested: outputs equal reference.py's over HTTP
    and gRPC, every batch size, concurrent (dynamically batched) requests, bad requests refused."""
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke import Endpoints, plan_smoke, run_smoke, served_configs

    project = load_project(render_template(TEMPLATE, triton_version="24.10", **answers))
    with prepare_server(project) as triton:
        endpoints = Endpoints(http_url=triton.http_url, grpc_url=triton.grpc_url)
        served = served_configs(project, endpoints)
        assert bool(served) == bool(answers.get("auto_complete"))
        results = run_smoke(plan_smoke(project, served=served), endpoints)
    failed = [f"{r.name} [{r.protocol}]: {r.detail}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)
    assert any(r.name.startswith("concurrent requests") for r in results)


def _without(text: str, start: str, end: str, instead: str = "") -> str:
    """``text`` with ``instead`` for its lines from the one holding ``start`` through the one holding
    ``end``."""
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if start in line)
    last = next(i for i, line in enumerate(lines) if end in line and i >= first)
    return "".join(lines[:first]) + instead + "".join(lines[last + 1 :])


@pytest.mark.parametrize("batching", ["per_request", "vectorized"])
def test_the_placeholder_and_its_helpers_go_together(render_template, pb_utils_dir, batching):
    """Deleting the marked placeholder (its computation and its helpers) and writing a computation of one's
    own leaves model.py and reference.py working: no helper is left behind as dead code, nothing else needed
    one."""
    project = render_template(TEMPLATE, signature=MIXED, batching=batching)
    own = (
        '    return {"TOKENS": np.zeros((len(text), 2), np.int64), "LABEL": np.full((len(text), 1), b"x", '
        'object),\n            "SCORE": np.ones((len(text), 4), np.float32)}\n'
    )
    model = model_file(project)
    text = _without(
        model.read_text(), "# ---- The placeholder's helpers", "# ---- End of the placeholder's helpers"
    )
    model.write_text(
        _without(text, "    # ---- The placeholder", "    }", own)
    )  # the placeholder, down to its return
    reference = project / "reference.py"
    text = _without(
        reference.read_text(), "# ---- The placeholder computation", "# ---- End of the placeholder"
    )
    reference.write_text(text + '\n\ndef compute(inputs):\n    text = inputs["TEXT"]\n' + own)
    served, expected = load_model(model, pb_utils_dir), load_module(reference)
    for name in ("nonzero_count", "byte_count", "filled"):
        assert not hasattr(served, name)
    assert not hasattr(expected, "row_counts") and not hasattr(expected, "as_datatype")
    inputs = expected.make_inputs(3, seed=1)
    assert_same_outputs(
        served.compute({n: inputs.get(n) for n in served.INPUTS}),
        expected.compute(inputs),
        expected.TOLERANCE,
    )
