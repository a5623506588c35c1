"""The cpp-backend template: rendered files per option, their key contents, and real builds.

The builds here (marked ``cpp``) check what a build leaves behind: no warning from the backend's own
sources, only TRITONBACKEND_* exports, libcudart for a GPU build; they skip when the cache lacks the release.
Every variant at every release is built, loaded and smoke-tested by `tbgen templates check --smoke`
(tests/templates/test_template_check.py).
"""

from __future__ import annotations

import py_compile
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import cmake_fits_or_skip, grpc_infer, read_config, template_files, triton_sources_or_skip
from tritonclient.grpc import model_config_pb2

from triton_backend_gen import signature, versions
from triton_backend_gen.project import BackendKind, load_project
from triton_backend_gen.scaffold import get_template, read_answers_file
from triton_backend_gen.smoke import load_reference
from triton_backend_gen.toolchain import symbols
from triton_backend_gen.toolchain.cmake import cmake_build

DTYPES = ["FP32", "FP16", "INT32", "INT64"]
# Every dtype the add/sub example takes (the CUDA kernel serves DTYPES).
ALL_DTYPES = list(signature.DATATYPES)
# The signature of a model that is not the example: every kind of tensor the generated code handles.
MIXED = {
    "inputs": [
        {"name": "TEXT", "datatype": "BYTES", "dims": [1]},
        {"name": "LANG", "datatype": "BYTES", "dims": [1], "optional": True},
        {"name": "IMG", "datatype": "FP16", "dims": [3, -1]},
        {"name": "K", "datatype": "INT32", "dims": [1]},
    ],
    "outputs": [
        {"name": "TOKENS", "datatype": "INT64", "dims": [-1]},
        {"name": "LABEL", "datatype": "BYTES", "dims": [1]},
        {"name": "SCORE", "datatype": "BF16", "dims": [4]},
    ],
}

COMMON_FILES = {
    ".dockerignore",
    ".github/workflows/ci.yml",
    ".gitignore",
    "CMakeLists.txt",
    "CMakePresets.json",
    "Dockerfile",
    "README.md",
    "cmake/my_backendConfig.cmake.in",
    "model_repository/add_sub/1/.gitkeep",
    "model_repository/add_sub/config.pbtxt",
    "reference.py",
    "src/libtriton_my_backend.ldscript",
    "src/compute.cc",
    "src/my_backend.cc",
    "src/tensors.h",
    "tbgen.toml",
    "tests/conftest.py",
    "tests/test_add_sub.py",
    "tests/unit/cases.h",
    "tests/unit/compute_test.cc",
    "tests/unit/main.cc",
    "tests/unit/write_cases.py",
    "third_party/README.md",
}
GPU_FILES = {"src/kernels.cu", "src/kernels.h"}


def cmake_cache_default(cmakelists: str, variable: str) -> str:
    match = re.search(rf'set\({variable} "([^"]*)"', cmakelists)
    assert match, f"{variable} is not set in CMakeLists.txt"
    return match.group(1)


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("gpu", [False, True])
def test_golden_file_list(render_template, gpu):
    project = render_template("cpp-backend", gpu=gpu)
    assert project.name == "my-backend"
    assert template_files(project) == COMMON_FILES | (GPU_FILES if gpu else set())


@pytest.mark.parametrize("gpu", [False, True])
def test_nothing_is_left_unrendered(render_template, gpu):
    project = render_template("cpp-backend", gpu=gpu, dtype="FP16")
    for name in template_files(project):
        text = (project / name).read_text()
        assert "{{" not in text and "{%" not in text and "cookiecutter" not in text, name


@pytest.mark.parametrize("gpu", [False, True])
def test_rendered_python_compiles(render_template, gpu):
    project = render_template("cpp-backend", gpu=gpu)
    for path in project.rglob("*.py"):
        py_compile.compile(str(path), doraise=True)


def test_cmakelists_defaults_follow_the_answers(render_template):
    cmakelists = (render_template("cpp-backend", triton_version="24.10") / "CMakeLists.txt").read_text()
    for repo in ("COMMON", "CORE", "BACKEND"):
        assert cmake_cache_default(cmakelists, f"TRITON_{repo}_REPO_TAG") == "r24.10"
    assert (
        cmake_cache_default(cmakelists, "TRITON_REPO_ORGANIZATION")
        == "https://github.com/triton-inference-server"
    )
    assert "main" not in re.findall(r'REPO_TAG "([^"]*)"', cmakelists)
    assert 'option(TRITON_ENABLE_GPU "Build the CUDA path for KIND_GPU instances" OFF)' in cmakelists
    assert "option(TRITON_ENABLE_STATS" in cmakelists
    assert "set(CMAKE_CXX_STANDARD 17)" in cmakelists
    assert "set(CMAKE_EXPORT_COMPILE_COMMANDS ON)" in cmakelists
    assert "enable_language(CUDA)" in cmakelists  # guarded by TRITON_ENABLE_GPU
    assert "kernels.cu" not in cmakelists
    for repo in ("repo-common", "repo-core", "repo-backend"):
        assert f"FetchContent_Declare(\n  {repo}\n" in cmakelists
    assert "FetchContent_MakeAvailable(repo-common repo-core repo-backend)" in cmakelists
    assert "--version-script=${VERSION_SCRIPT}" in cmakelists
    assert "LIBRARY DESTINATION backends/my_backend" in cmakelists
    assert "OUTPUT_NAME triton_my_backend" in cmakelists
    assert "install(\n  EXPORT my_backend-targets" in cmakelists


def test_gpu_cmakelists_builds_the_kernel_for_the_chosen_architectures(render_template):
    project = render_template("cpp-backend", gpu=True, cuda_architectures="80;90")
    cmakelists = (project / "CMakeLists.txt").read_text()
    assert 'option(TRITON_ENABLE_GPU "Build the CUDA path for KIND_GPU instances" ON)' in cmakelists
    assert 'set(CMAKE_CUDA_ARCHITECTURES "80;90")' in cmakelists
    assert "target_sources(${BACKEND_TARGET} PRIVATE src/kernels.cu src/kernels.h)" in cmakelists
    # Backend r24.10..r25.07 hard-code architectures on kernel_library_new that nvcc 13 rejects.
    fix = cmakelists.index("kernel_library_new PROPERTIES CUDA_ARCHITECTURES")
    assert cmakelists.index("FetchContent_MakeAvailable(") < fix
    assert "if(TRITON_ENABLE_GPU AND TARGET kernel_library_new)" in cmakelists
    presets = (project / "CMakePresets.json").read_text()
    assert '"TRITON_ENABLE_GPU": "ON"' in presets


def test_version_script_exports_only_the_backend_api(render_template):
    project = render_template("cpp-backend")
    script = (project / "src" / "libtriton_my_backend.ldscript").read_text()
    assert re.sub(r"\s+", " ", script).strip() == "{ global: TRITONBACKEND_*; local: *; };"


def test_names_follow_the_backend_name(render_template):
    project = render_template(
        "cpp-backend",
        project_name="fancy-adder",
        backend_name="fancy_adder",
        model_name="adder",
        triton_version="24.10",
    )
    source = (project / "src" / "fancy_adder.cc").read_text()
    assert "namespace triton { namespace backend { namespace fancy_adder {" in source
    assert "class ModelState : public BackendModel" in source
    assert "class ModelInstanceState : public BackendModelInstance" in source
    assert read_config(project, "adder").backend == "fancy_adder"
    dockerfile = (project / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3" in dockerfile
    assert "FROM ${BASE_IMAGE} AS build" in dockerfile
    assert "/opt/tritonserver/backends/fancy_adder/" in dockerfile
    assert "COPY model_repository/ /models/" in dockerfile
    assert (project / "tests" / "test_adder.py").is_file()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_config_follows_the_answers(render_template, dtype):
    project = render_template(
        "cpp-backend",
        dtype=dtype,
        dims="2,3",
        max_batch_size=4,
        instance_count=2,
        input0_name="A",
        output1_name="DIFF",
    )
    config = read_config(project)
    assert config.backend == "my_backend"
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [t.name for t in config.input] == ["A", "INPUT1"]
    assert [t.name for t in config.output] == ["OUTPUT0", "DIFF"]
    type_name = model_config_pb2.DataType.Name
    config_type = signature.DATATYPES[dtype].config
    assert {type_name(t.data_type) for t in [*config.input, *config.output]} == {config_type}
    assert {tuple(t.dims) for t in [*config.input, *config.output]} == {(2, 3)}
    (group,) = config.instance_group
    assert (model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind), group.count) == ("KIND_CPU", 2)
    source = (project / "src" / "my_backend.cc").read_text()
    # The tensor table the backend checks config.pbtxt and every request against.
    table = re.sub(r"\s+", " ", source)
    assert f'{{"A", TRITONSERVER_TYPE_{dtype}, "{config_type}", {{2, 3}}, std::nullopt, false}},' in table
    assert f'{{"DIFF", TRITONSERVER_TYPE_{dtype}, "{config_type}", {{2, 3}}, std::nullopt, false}},' in table
    # Compute adds and subtracts in the dtype's own arithmetic.
    user = (project / "src" / "compute.cc").read_text()
    compute = user[
        user.index("\nCompute(") : user.index("// ---- End of your logic", user.index("\nCompute("))
    ]
    marker = {
        "FP16": "FloatToHalf(x + y)",
        "BF16": "FloatToBF16(x + y)",
        "BOOL": "(a[i] != 0) != (b[i] != 0)",
        "BYTES": "AppendDecimal(static_cast<int64_t>(ux + uy))",
        "FP32": "sum[i] = a[i] + b[i];",
        "FP64": "sum[i] = a[i] + b[i];",
    }.get(dtype, "using Bits = std::make_unsigned_t<")
    assert marker in compute, compute
    assert "sum = out->OUTPUT0" in compute or "out->OUTPUT0.AppendDecimal" in compute


def test_config_without_batching_or_dynamic_batching(render_template):
    assert not read_config(render_template("cpp-backend", max_batch_size=0)).HasField("dynamic_batching")


def test_config_with_dynamic_batching_turned_off(render_template):
    config = read_config(render_template("cpp-backend", dynamic_batching=False))
    assert config.max_batch_size == 8 and not config.HasField("dynamic_batching")


def test_gpu_defaults_to_gpu_instances(render_template):
    (group,) = read_config(render_template("cpp-backend", gpu=True)).instance_group
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU


def test_tbgen_toml_records_the_project(render_template):
    project = load_project(
        render_template("cpp-backend", gpu=True, dtype="INT64", max_batch_size=0, triton_version="r24.10")
    )
    assert (project.template, project.template_version) == (
        "cpp-backend",
        get_template("cpp-backend").version,
    )
    assert (project.name, project.backend, project.kind) == ("my-backend", "my_backend", BackendKind.CPP)
    assert (project.release, project.gpu) == (versions.resolve("24.10"), True)
    assert project.model_repository == project.root / "model_repository"
    assert [(m.name, m.decoupled, m.directory) for m in project.models] == [
        ("add_sub", False, project.model_repository / "add_sub")
    ]
    assert project.library == project.root / "build/install/backends/my_backend/libtriton_my_backend.so"
    answers = read_answers_file(project.project_file)  # the [answers] table, for `tbgen new --answers`
    assert answers["dtype"] == "INT64"
    assert answers["max_batch_size"] == 0
    assert answers["gpu"] is True
    assert answers["cuda_architectures"] == ";".join(versions.resolve("24.10").cuda_architectures)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_computes_add_sub(render_template, dtype):
    reference = load_reference(render_template("cpp-backend", dtype=dtype, dims="3,-1"))
    inputs = reference.make_inputs(5, seed=7)
    assert inputs["INPUT0"].shape == (5, 3, reference.VARIABLE_DIM_SIZE)
    assert inputs["INPUT0"].dtype == reference.DTYPE
    assert (reference.make_inputs(5, seed=7)["INPUT1"] == inputs["INPUT1"]).all()  # deterministic
    outputs = reference.compute(inputs)
    wide = {name: array.astype("float64") for name, array in inputs.items()}
    for name, expected in (
        ("OUTPUT0", wide["INPUT0"] + wide["INPUT1"]),
        ("OUTPUT1", wide["INPUT0"] - wide["INPUT1"]),
    ):
        assert outputs[name].dtype == reference.DTYPE
        assert abs(outputs[name].astype("float64") - expected).max() <= 0.01 * abs(expected).max()
    float_type = dtype.startswith("FP")
    assert (reference.TOLERANCE["rtol"] > 0) == float_type


def test_reference_without_batching_has_no_batch_dimension(render_template):
    reference = load_reference(render_template("cpp-backend", max_batch_size=0, dims="4"))
    assert reference.make_inputs(None)["INPUT1"].shape == (4,)


def test_post_gen_hook_removes_gpu_files_by_explicit_list():
    hook = (
        Path(__file__).resolve().parents[2] / "templates/cpp-backend/hooks/post_gen_project.py"
    ).read_text()
    assert 'GPU_ONLY_FILES = ["src/kernels.cu", "src/kernels.h"]' in hook


def backend_source(project) -> str:
    """The backend's whole C++: the generated header, the user's logic and the generated plumbing."""
    return "\n".join(
        (project / "src" / name).read_text() for name in ("tensors.h", "compute.cc", "my_backend.cc")
    )


def test_a_signature_generates_the_tensor_table_and_typed_views(render_template):
    project = render_template("cpp-backend", signature=MIXED, max_batch_size=4)
    source = backend_source(project)
    for entry in (
        '{"TEXT", TRITONSERVER_TYPE_BYTES, "TYPE_STRING", {1}, std::nullopt, false},',
        '{"LANG", TRITONSERVER_TYPE_BYTES, "TYPE_STRING", {1}, std::nullopt, true},',
        '{"IMG", TRITONSERVER_TYPE_FP16, "TYPE_FP16", {3, -1}, std::nullopt, false},',
        '{"SCORE", TRITONSERVER_TYPE_BF16, "TYPE_BF16", {4}, std::nullopt, false},',
    ):
        assert entry in source, entry
    inputs = source[source.index("struct Inputs {") : source.index("};", source.index("struct Inputs {"))]
    assert re.findall(r"^  (\S+) (\w+);", inputs, re.MULTILINE) == [
        ("BytesView", "TEXT"),
        ("BytesView", "LANG"),
        ("TensorView<uint16_t>", "IMG"),
        ("TensorView<int32_t>", "K"),
    ]
    outputs = source[source.index("struct Outputs {") : source.index("};", source.index("struct Outputs {"))]
    assert re.findall(r"^  (\S+) (\w+);", outputs, re.MULTILINE) == [
        ("TensorOutput<int64_t>", "TOKENS"),
        ("BytesOutput", "LABEL"),
        ("TensorOutput<uint16_t>", "SCORE"),
    ]
    assert "void\nCompute(\n    const Inputs& in, Outputs* out, const size_t batch_size," in source
    assert "Your computation goes here." in source
    # The placeholder of reference.py: optional inputs counted when present, -1 output dims of size 1.
    assert "if (in.LANG.present) {" in source and "out->LABEL.Append(decimal, out->LABEL.row_size);" in source
    assert "FloatToBF16(static_cast<float>(n))" in source
    # Read in place, copied or gathered by the collector; written in place or copied into each response; BYTES
    # parsed in place and serialized per request.
    for piece in (
        "std::optional<BackendInputCollector> collector;",
        "CopyBuffer(",
        "ParseBytes(",
        "TRITONBACKEND_ResponseOutput(",
        "SameLayout(",
    ):
        assert piece in source, piece
    assert "kernels.h" not in source and "AddSub" not in source
    assert [t.name for t in read_config(project).input] == ["TEXT", "LANG", "IMG", "K"]


def test_tensor_names_cpp_reserves_get_an_underscore_and_reshape_is_in_the_table(render_template):
    project = render_template(
        "cpp-backend",
        signature={
            "inputs": [
                {"name": "class", "datatype": "BOOL", "dims": [-1]},
                {"name": "X", "datatype": "FP32", "dims": [2, 3], "reshape": [6]},
            ],
            "outputs": [{"name": "linux", "datatype": "UINT8", "dims": [1], "reshape": []}],
        },
    )
    source = backend_source(project)
    assert re.search(r"TensorView<uint8_t> class_;", source)  # BOOL inputs are bytes: non-zero is true
    assert re.search(r"TensorOutput<uint8_t> linux_;", source)
    table = re.sub(r"\s+", " ", source)
    assert '{"class", TRITONSERVER_TYPE_BOOL, "TYPE_BOOL", {-1}, std::nullopt, false},' in table
    assert '{"X", TRITONSERVER_TYPE_FP32, "TYPE_FP32", {2, 3}, std::vector<int64_t>{6}, false},' in table
    assert '{"linux", TRITONSERVER_TYPE_UINT8, "TYPE_UINT8", {1}, std::vector<int64_t>{}, false},' in table


@pytest.mark.parametrize(
    ("dtype", "kernel"), [("FP16", True), ("INT64", True), ("BYTES", False), ("BF16", False)]
)
def test_gpu_instances_run_the_kernel_only_where_there_is_one(render_template, dtype, kernel):
    project = render_template("cpp-backend", gpu=True, dtype=dtype)
    source = (project / "src" / "my_backend.cc").read_text()
    assert ('#include "kernels.h"' in source) == kernel
    assert ("ExecuteOnGpu(" in source) == kernel
    assert ("LaunchAddSub(" in (project / "src" / "kernels.cu").read_text()) == kernel
    assert ("LaunchAddSub(" in (project / "src" / "kernels.h").read_text()) == kernel


# --------------------------------------------------------------------------- builds


def build_and_check(project: Path, branch: str, *, gpu: bool, extra_defines: dict | None = None) -> Path:
    """Build ``project`` for ``branch`` (warning-free, only TRITONBACKEND_* exported, the readiness entry
    point exactly where the release's core asks it, and the symbol check saying which); returns the
    library."""
    sources = triton_sources_or_skip(branch)
    if gpu and shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH; the gpu variant needs the CUDA toolkit")
    build = project / "build"
    install = cmake_build(
        project, build, triton_sources=sources, gpu=gpu, extra_defines=extra_defines or {}
    ).install_dir
    library = install / "backends" / "my_backend" / "libtriton_my_backend.so"
    assert library.is_file()
    log = (project / "build" / "tbgen-build.log").read_text()
    # -Werror already fails the build on a warning in the backend's own sources; this also catches a
    # warning flag that went missing. (Triton's own sources are not ours to judge.)
    own_sources = str(project / "src")
    warnings = [line for line in log.splitlines() if own_sources in line and "warning" in line]
    assert not warnings
    nm = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    )
    exported = [line.split()[-1] for line in nm.stdout.splitlines() if line.strip()]
    assert exported, "the library exports nothing"
    assert all(name.startswith("TRITONBACKEND_") for name in exported), exported
    assert {"TRITONBACKEND_Initialize", "TRITONBACKEND_ModelInstanceExecute"} <= set(exported)
    release = versions.resolve(branch)
    ready = symbols.READY_ENTRY_POINT
    assert (ready in exported) == release.has("instance_ready"), exported
    [said] = [f.message for f in symbols.check_library(library, None, release) if ready in f.message]
    verb = "exports" if release.has("instance_ready") else "does not export"
    assert said.startswith(f"libtriton_my_backend.so {verb} {ready}") and release.container in said, said
    return library


@pytest.mark.cpp
@pytest.mark.slow
def test_gpu_build_against_r24_10_links_the_cuda_runtime(render_template, compiler_cache):
    project = render_template("cpp-backend", dtype="FP16", gpu=True, triton_version="24.10")
    library = build_and_check(project, "r24.10", gpu=True)
    needed = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    assert "libcudart" in needed


# Test-only sources that ask a built backend's TRITONBACKEND_ModelInstanceReady after every execution, as
# Triton's core does on every readiness probe from r25.12, and log the answer (see readiness_probe/*).
READINESS_PROBE = Path(__file__).resolve().parent / "readiness_probe" / "probe_readiness.cmake"
# Its log lines, as the server quotes them: "probe_readiness: ready" or "... not ready (<code>): <message>".
PROBED = re.compile(r'probe_readiness: (ready|not ready \((\w+)\): (.*?))"?$', re.M)
POISON = -12345.0  # an INPUT0 value for which the test's Compute throws Unrecoverable


@pytest.mark.cpp
@pytest.mark.slow
def test_default_project_builds_against_the_default_release_and_reports_readiness(
    render_template, compiler_cache, server_or_skip
):
    """`tbgen new` with no --triton-version targets the default release ($TBGEN_TRITON_VERSION, which the
    tests set to the newest release whose sources are at hand; the newest of the matrix otherwise): that
    project builds, GPU on where nvcc is. From r25.12 it exports TRITONBACKEND_ModelInstanceReady
    (build_and_check).

    Served by the embedded 2.51 server (backend API 1.19, as every release since 24.03), with a probe linked
    in that asks TRITONBACKEND_ModelInstanceReady after each execution as a newer core would: the instance is
    ready until Compute throws Unrecoverable, whose requests get the reason (UNAVAILABLE); then it reports
    not ready with that reason, and a later request gets it without Compute running."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_backend_gen.runtime import prepare_server

    release = versions.default_release()
    cmake_fits_or_skip(release)
    gpu = shutil.which("nvcc") is not None
    project = render_template("cpp-backend", gpu=gpu)
    assert f'TRITON_BACKEND_REPO_TAG "{release.branch}"' in (project / "CMakeLists.txt").read_text()
    # Your code (src/compute.cc) says the instance cannot recover when INPUT0 starts with POISON.
    compute = project / "src" / "compute.cc"
    body = "  const auto& a = in.INPUT0;\n"
    assert body in compute.read_text()
    compute.write_text(
        compute.read_text().replace(
            body,
            body + f"  if (batch_size > 0 && a[0] == {POISON}f) {{\n"
            '    throw Unrecoverable("the device was lost");\n  }\n',
        )
    )
    probe = {"CMAKE_PROJECT_INCLUDE": str(READINESS_PROBE)} if release.has("instance_ready") else {}
    build_and_check(project, release.branch, gpu=gpu, extra_defines=probe)
    if not probe:
        return  # no readiness entry point to ask (build_and_check saw it absent)
    assert "probe_readiness: probing the readiness" in (project / "build" / "tbgen-build.log").read_text()
    reference = load_reference(project)
    served = prepare_server(load_project(project), instance_kind="cpu")
    with served as triton, grpcclient.InferenceServerClient(triton.grpc_url) as client:
        inputs = reference.make_inputs(1, seed=0)
        got = grpc_infer(client, "add_sub", reference, inputs)
        assert np.array_equal(got["OUTPUT0"], reference.compute(inputs)["OUTPUT0"])
        poisoned = {**inputs, "INPUT0": np.full_like(inputs["INPUT0"], POISON)}
        with pytest.raises(InferenceServerException) as failed:
            grpc_infer(client, "add_sub", reference, poisoned)
        with pytest.raises(InferenceServerException) as refused:
            grpc_infer(client, "add_sub", reference, inputs)
    log = triton.log_file.read_text()  # complete once the server has stopped (the probe logs after a reply)
    reason = "model 'add_sub': instance 'add_sub_0_0' cannot serve requests: the device was lost"
    for error in (failed.value, refused.value):
        assert error.status() == "StatusCode.UNAVAILABLE" and reason in error.message(), error
    verdicts = [
        (match.group(1) if match.group(2) is None else match.group(2), match.group(3))
        for match in PROBED.finditer(log)
    ]
    assert verdicts == [("ready", None), ("Unavailable", reason), ("Unavailable", reason)], verdicts
    logged = [line for line in log.splitlines() if line.startswith("E") and reason in line]
    assert len(logged) == 1, logged  # an error in the server's log, once, when it happened


# Test-only sources that count the input bytes a built backend copies (see copy_counter/*): the generated
# project has no counting hook of its own.
COPY_COUNTER = Path(__file__).resolve().parent / "copy_counter" / "count_input_copies.cmake"
COPIES_LOGGED = re.compile(r"count_input_copies: (\d+) request\(s\), (\d+) input bytes copied")


@pytest.mark.cpp
@pytest.mark.slow
def test_a_contiguous_input_is_used_in_place_and_gathered_batches_are_counted(
    render_template, compiler_cache, server_or_skip
):
    """Built with copy_counter/ linked in, the backend logs the input bytes each execution copied: none for
    one gRPC request (its tensors arrive contiguous and are used in place), exactly the batch's bytes when the
    collector gathers several requests."""
    from concurrent.futures import ThreadPoolExecutor

    import tritonclient.grpc as grpcclient

    from triton_backend_gen.runtime import prepare_server

    sources = triton_sources_or_skip("r24.10")
    project = render_template("cpp-backend", triton_version="24.10")
    build = project / "build"
    cmake_build(
        project,
        build,
        triton_sources=sources,
        gpu=False,
        install_dir=build / "install",
        extra_defines={"CMAKE_PROJECT_INCLUDE": str(COPY_COUNTER)},
    )
    assert "count_input_copies: counting the input copies of" in (build / "tbgen-build.log").read_text()
    # A long queue delay makes the concurrent requests below wait for each other: batches are gathered.
    config = project / "model_repository" / "add_sub" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "dynamic_batching { }", "dynamic_batching { max_queue_delay_microseconds: 200000 }"
        )
    )
    reference = load_reference(project)
    with prepare_server(load_project(project)) as triton:
        client = grpcclient.InferenceServerClient(triton.grpc_url)

        def infer(seed: int) -> None:
            inputs = []
            for name, array in reference.make_inputs(1, seed).items():
                tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
                tensor.set_data_from_numpy(array)
                inputs.append(tensor)
            client.infer("add_sub", inputs)

        for seed in range(3):
            infer(seed)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(infer, range(64)))
        client.close()
    # Read once the server has stopped: while it runs, the last executions' lines may not be written yet.
    log = triton.log_file.read_text()
    executions = [(int(n), int(b)) for n, b in COPIES_LOGGED.findall(log)]
    request_bytes = 2 * 16 * 4  # two FP32 [1, 16] inputs
    assert executions[:3] == [(1, 0)] * 3
    assert sum(n for n, _ in executions) == 3 + 64
    assert any(n > 1 for n, _ in executions[3:]), executions
    for requests, copied in executions:
        assert copied == (0 if requests == 1 else requests * request_bytes)


# Served by the embedded tritonserver: a signature that is not the example, and the add/sub example over
# BYTES.


def build_and_gather(project: Path, delay_us: int = 100_000) -> None:
    """Build ``project`` (r24.10, warning-free) with a queue delay that lets concurrent requests meet in one
    execution."""
    build_and_check(project, "r24.10", gpu=False)
    config = next((project / "model_repository").glob("*/config.pbtxt"))
    config.write_text(
        config.read_text().replace(
            "dynamic_batching { }", f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}"
        )
    )


def model_counts(client, model: str) -> tuple[int, int]:
    (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


@pytest.mark.cpp
@pytest.mark.slow
def test_a_mixed_signature_serves_the_reference(render_template, compiler_cache, server_or_skip):
    """BYTES, FP16 and INT32 inputs (one optional), INT64 (-1 dims), BYTES and BF16 outputs: each request is
    answered as reference.py computes, also when concurrent requests of different shapes and optional inputs
    reach one execution (the backend runs each arrangement as a batch of its own)."""
    from concurrent.futures import ThreadPoolExecutor

    import tritonclient.grpc as grpcclient

    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke.compare import output_mismatches

    project = render_template("cpp-backend", signature=MIXED, max_batch_size=8, triton_version="24.10")
    build_and_gather(project)
    reference = load_reference(project)
    model = load_project(project).models[0].name
    config = project / "model_repository" / model / "config.pbtxt"
    # A queue delay lets concurrent requests meet even on a loaded machine.
    config.write_text(
        config.read_text().replace(
            "dynamic_batching { }", "dynamic_batching { max_queue_delay_microseconds: 200000 }"
        )
    )
    with (
        prepare_server(load_project(project)) as triton,
        grpcclient.InferenceServerClient(triton.grpc_url) as client,
    ):
        for seed in range(4):  # odd seeds leave LANG out, and the -1 dim of IMG varies
            for batch in (1, 3):
                inputs = reference.make_inputs(batch, seed=seed)
                got = grpc_infer(client, model, reference, inputs)
                assert not output_mismatches(got, reference.compute(inputs), reference.TOLERANCE), (
                    seed,
                    batch,
                )
        before = model_counts(client, model)
        # Four arrangements (shapes, LANG present or not), six requests each, sent one arrangement after the
        # other: Triton's dynamic batcher closes a batch at the first queued request of another shape, so
        # requests merge only with neighbours of their arrangement in the queue (interleaved, they merged only
        # when thread timing happened to reorder them, and never on a loaded machine).
        requests = [reference.make_inputs(2, seed=100 + i // 6) for i in range(24)]
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda inputs: grpc_infer(client, model, reference, inputs), requests))
        for inputs, got in zip(requests, answers, strict=True):
            assert not output_mismatches(got, reference.compute(inputs), reference.TOLERANCE)
        inferences, executions = (
            after - first for after, first in zip(model_counts(client, model), before, strict=True)
        )
    assert inferences == 48 and executions < 24, (inferences, executions)  # requests met in executions


@pytest.mark.cpp
@pytest.mark.slow
def test_add_sub_over_bytes_serves_the_reference_and_fails_only_the_bad_request(
    render_template, compiler_cache, server_or_skip
):
    """The example over BYTES (decimal integers as strings): outputs equal reference.py's; in a batch, a
    request whose element is not a decimal integer gets its error and the others their answers."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke.compare import output_mismatches

    project = render_template("cpp-backend", dtype="BYTES", dims="-1", triton_version="24.10")
    build_and_gather(project, delay_us=200_000)
    reference = load_reference(project)
    with (
        prepare_server(load_project(project)) as triton,
        grpcclient.InferenceServerClient(triton.grpc_url) as client,
    ):
        for batch in (1, 8):
            inputs = reference.make_inputs(batch, seed=batch)
            got = grpc_infer(client, "add_sub", reference, inputs)
            assert not output_mismatches(got, reference.compute(inputs), reference.TOLERANCE), batch
            assert got["OUTPUT0"].dtype == np.object_

        def send(seed: int):
            inputs = reference.make_inputs(1, seed=seed)
            if seed == 3:
                inputs["INPUT1"].flat[2] = b"12a"
            try:
                return inputs, grpc_infer(client, "add_sub", reference, inputs)
            except InferenceServerException as err:
                return inputs, err

        before = model_counts(client, "add_sub")
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(send, range(6)))
        inferences, executions = (
            after - first for after, first in zip(model_counts(client, "add_sub"), before, strict=True)
        )
    for seed, (inputs, got) in enumerate(answers):
        if seed == 3:
            assert isinstance(got, InferenceServerException), got
            assert "element 2 of INPUT0 or INPUT1 is not a decimal integer" in str(got)
        else:
            assert not output_mismatches(got, reference.compute(inputs), reference.TOLERANCE), seed
    assert inferences == 5 and executions < 6, (inferences, executions)
