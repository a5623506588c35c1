"""Composed models (--pattern bls|bls-async|bls-decoupled|ensemble) and `tbgen add model`: the layout and
references they generate, the wiring `tbgen validate` checks, the files `add model` writes (only new ones),
and each pattern passing `tbgen test --fuzz 300` in the embedded server (the C++ BLS: test_cpp_bls.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import fuzz_passes, project_of, read_config, run_tbgen, snapshot, triton_sources_or_skip
from tritonclient.grpc import model_config_pb2

from triton_backend_gen.model_config.tree import validate_tree
from triton_backend_gen.project import load_project, parse_project
from triton_backend_gen.runtime import start_server
from triton_backend_gen.smoke import load_reference, plan_smoke

PYTHON_PATTERNS = [
    ("python-backend", "bls", []),
    ("python-backend", "bls-async", []),
    ("python-backend", "ensemble", []),
    ("decoupled-backend", "bls-decoupled", ["--set", "language=python"]),
]


def new(tmp_path: Path, name: str, *args: str) -> Path:
    result = run_tbgen("new", str(tmp_path / name), "--no-input", "--triton-version", "24.10", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp_path / name


def models(project: Path) -> list[dict]:
    return tomllib.loads((project / "tbgen.toml").read_text())["models"]


# --- what --pattern accepts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["-t", "decoupled-backend", "--pattern", "bls"],
            "--pattern bls composes models of python-backend or cpp-backend",
        ),
        (["-t", "python-backend", "--pattern", "bls-decoupled"], "Use --template decoupled-backend"),
        (
            ["-t", "python-backend", "--pattern", "fan-in"],
            "is not one of bls, bls-async, bls-decoupled, ensemble",
        ),
        (
            ["-t", "python-backend", "--pattern", "bls-async", "--set", "callees=only_one"],
            "takes two or more",
        ),
        (["-t", "python-backend", "--pattern", "ensemble", "--set", "callees=a,b"], "takes three"),
        (["-t", "python-backend", "--set", "callees=a,b"], "Add --pattern bls"),
        (
            ["-t", "python-backend", "--pattern", "bls", "--model-name", "a", "--set", "callees=a,b"],
            "also named as a callee",
        ),
        (["-t", "python-backend", "--pattern", "bls", "--set", "callees=a,a"], "names a model twice"),
        (
            ["-t", "python-backend", "--pattern", "bls", "--set", "native=yes"],
            "cannot be combined with native=yes",
        ),
        (
            ["-t", "cpp-backend", "--pattern", "ensemble", "--framework", "libtorch"],
            "cannot be combined with --framework",
        ),
    ],
)
def test_a_pattern_that_cannot_be_generated_is_refused_before_anything_is_written(tmp_path, args, fragment):
    result = run_tbgen("new", str(tmp_path / "p"), "--no-input", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stdout + result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "p").exists()


# --- what each pattern generates ----------------------------------------------------------------------------


@pytest.mark.parametrize(("template", "pattern", "extra"), PYTHON_PATTERNS)
def test_each_pattern_lists_its_models_top_first_each_with_a_reference(tmp_path, template, pattern, extra):
    project = new(tmp_path, "p", "-t", template, "--pattern", pattern, *extra)
    entries = models(project)
    top = entries[0]
    assert top["pattern"] == pattern and top["reference"] == "reference.py"
    for entry in entries[1:]:
        assert entry["reference"] == f"references/{entry['name']}.py"
        assert (project / entry["reference"]).is_file()
        assert (project / "model_repository" / entry["name"] / "config.pbtxt").is_file()
    assert [f.message for f in validate_tree(project, project_of(project)) if f.severity == "error"] == []
    # every model's reference agrees with its config.pbtxt (the smoke suite's check that needs no server)
    offline = [check for check in plan_smoke(load_project(project)) if check.protocol == "-"]
    assert len(offline) == len(entries)
    for check in offline:
        check.run(None)


def test_the_router_reference_routes_through_the_reference_of_the_callee_it_names(tmp_path):
    project = new(tmp_path, "p", "-t", "python-backend", "--pattern", "bls", "--set", "callees=plus,other")
    callee = project / "references" / "other.py"
    callee.write_text(
        callee.read_text().replace("INPUT0 + INPUT1", "INPUT0 * INPUT1").replace("a + b", "a * b")
    )
    reference = load_reference(project / "reference.py")
    for seed, name in ((0, "plus"), (1, "other")):
        inputs = reference.make_inputs(2, seed=seed)
        assert inputs["MODEL_NAME"].shape == (2, 1) and inputs["MODEL_NAME"][0, 0] == name.encode()
        direct = load_reference(project / "references" / f"{name}.py")
        rest = {k: v for k, v in inputs.items() if k != "MODEL_NAME"}
        for key, value in direct.compute(rest).items():
            np.testing.assert_array_equal(reference.compute(inputs)[key], value)
    a = reference.make_inputs(1, seed=1)
    assert not np.array_equal(
        reference.compute(a)["OUTPUT0"], a["INPUT0"] + a["INPUT1"]
    )  # the edit flowed through


def test_the_ensemble_is_wired_from_the_signature_and_validate_catches_a_miswired_step(tmp_path):
    project = new(
        tmp_path,
        "p",
        "-t",
        "python-backend",
        "--pattern",
        "ensemble",
        "--model-name",
        "pipeline",
        "--set",
        "callees=preprocess,pipeline_core,postprocess",
        "--input",
        "TEXT:BYTES:1",
        "--input",
        "SCALE:FP32:3",
        "--output",
        "SCORES:FP32:3",
    )
    config = project / "model_repository" / "pipeline" / "config.pbtxt"
    text = config.read_text()
    assert 'platform: "ensemble"' in text and 'model_name: "preprocess"' in text
    assert 'key: "TEXT"' in text and 'value: "PREPROCESSED_TEXT"' in text and 'value: "RAW_SCORES"' in text
    assert findings(project) == []
    config.write_text(text.replace('value: "RAW_SCORES"', 'value: "RAW_SCORE"', 1))
    assert any("RAW_SCORE" in message for message in findings(project, "error"))
    config.write_text(text.replace('model_name: "postprocess"', 'model_name: "postprocessing"'))
    assert any('calls model "postprocessing"' in message for message in findings(project))
    config.write_text(text)
    # What editing one step can break: its tensor names, its batching.
    core = project / "model_repository" / "pipeline_core" / "config.pbtxt"
    core_text = core.read_text()
    core.write_text(core_text.replace('name: "SCALE"', 'name: "FACTOR"'))
    assert any(
        'input "FACTOR" of model "pipeline_core" is not mapped' in m for m in findings(project, "error")
    )
    core.write_text(core_text.replace("max_batch_size: 8", "max_batch_size: 4"))
    assert any("exceeds that of step 1" in m for m in findings(project, "error"))


def findings(project: Path, severity: str | None = None) -> list[str]:
    return [f.message for f in validate_tree(project, project_of(project)) if severity in (None, f.severity)]


# --- tbgen add model ----------------------------------------------------------------------------------------


def test_add_model_grows_a_project_without_touching_the_users_files(tmp_path):
    project = new(tmp_path, "p", "-t", "python-backend")
    model_py = project / "model_repository" / "add_sub" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "# my edit\n")
    before = {
        p: p.read_bytes()
        for p in project.rglob("*")
        if p.is_file() and p.name not in ("tbgen.toml", "generated.tar.gz")
    }  # tbgen's own: they learn it
    added = run_tbgen("add", "model", "router", "--pattern", "bls", "--project", str(project))
    assert added.returncode == 0, added.stdout + added.stderr
    assert {p: p.read_bytes() for p in before} == before  # nothing of the user's changed
    names = [m["name"] for m in models(project)]
    assert names == ["add_sub", "router", "add_sub_2"]  # the existing callee is used, the missing one added
    router = load_reference(project / "references" / "router.py")
    assert router.REFERENCES["add_sub"] == "reference.py"

    again = run_tbgen("add", "model", "router", "--project", str(project))
    assert again.returncode == 2 and "has a model 'router' already" in again.stdout + again.stderr
    (project / "references" / "extra.py").write_text("# mine\n")
    clash = run_tbgen("add", "model", "extra", "--project", str(project))
    assert clash.returncode == 2 and "writes only new files" in clash.stdout + clash.stderr
    assert (project / "references" / "extra.py").read_text() == "# mine\n"
    assert not (project / "model_repository" / "extra").exists() and "extra" not in [
        m["name"] for m in models(project)
    ]


def test_add_model_refuses_a_cpp_model_the_projects_library_cannot_serve(tmp_path):
    project = new(tmp_path, "p", "-t", "cpp-backend")
    other = run_tbgen("add", "model", "wide", "--project", str(project), "--set", "dims=32")
    assert other.returncode == 2 and "differs in dims" in other.stdout + other.stderr
    same = run_tbgen("add", "model", "twin", "--project", str(project))
    assert same.returncode == 0, same.stdout + same.stderr
    assert 'backend: "p"' in (project / "model_repository" / "twin" / "config.pbtxt").read_text()
    python = new(tmp_path, "q", "-t", "python-backend")
    refused = run_tbgen("add", "model", "native", "-t", "cpp-backend", "--project", str(python))
    assert refused.returncode == 2 and "library of its own" in refused.stdout + refused.stderr


IMAGE_SIGNATURE = (
    "--input",
    "IMAGE:FP32:3,8,8",
    "--input",
    "SCALE:FP32:1",
    "--input",
    "FLIP:BOOL:1",
    "--output",
    "OUT:FP32:3,8,8",
)


@pytest.mark.parametrize(
    "template", [("-t", "cpp-backend"), ("-t", "decoupled-backend", "--set", "language=cpp")]
)
def test_add_model_refuses_other_tensors_than_the_librarys_and_both_commands_it_prints_run(
    tmp_path, template
):
    project = new(tmp_path, "img", *template, *IMAGE_SIGNATURE)
    before = snapshot(project)
    refused = run_tbgen("add", "model", "other", "--input", "X:FP32:4", "--output", "Y:FP32:4", cwd=project)
    text = refused.stdout + refused.stderr
    assert refused.returncode == 2, text
    assert "must have the library's tensors" in text and "Traceback" not in text
    assert snapshot(project) == before and not list(project.glob(".tbgen-*"))  # nothing written, nothing left
    same, python = re.findall(r"`(tbgen add model [^`]*)`", text)
    assert same == "tbgen add model other " + " ".join(IMAGE_SIGNATURE)
    assert "--input X:FP32:4 --output Y:FP32:4" in python and "python" in python
    twin = shutil.copytree(project, tmp_path / "twin" / "img")
    for command, root in ((same, project), (python, twin)):
        ran = run_tbgen(*shlex.split(command)[1:], cwd=root)  # as printed, in the project
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert [f.message for f in validate_tree(root, project_of(root)) if f.severity == "error"] == []
    assert [t.name for t in read_config(project, "other").input] == ["IMAGE", "SCALE", "FLIP"]
    assert read_config(twin, "other").backend == "python"


def test_add_model_keeps_the_models_before_answers_and_the_tables_that_follow_them(tmp_path):
    project = new(tmp_path, "p", "-t", "python-backend", "--set", "native=yes")
    for args in (
        ["solo"],
        ["router", "--pattern", "bls", "--set", "callees=add_sub,extra", "--set", "native=no"],
    ):
        added = run_tbgen("add", "model", *args, "--project", str(project))
        assert added.returncode == 0, added.stdout + added.stderr
    text = (project / "tbgen.toml").read_text()
    assert [m["name"] for m in tomllib.loads(text)["models"]] == ["add_sub", "solo", "router", "extra"]
    headers = re.findall(r"^\[+([^\]]+)\]+", text, flags=re.MULTILINE)
    assert headers[:2] == ["tbgen", "project"] and headers[-2:] == ["native", "answers"]
    assert set(headers[2:-2]) == {"models"}  # every entry together, as `tbgen new` writes them
    assert "\n\n\n" not in text and text.endswith("\n") and not text.endswith("\n\n")


def test_add_model_takes_the_projects_answers_as_project_py_reads_them(tmp_path):
    project = new(tmp_path, "p", "-t", "python-backend", "--set", "dtype=FP16", "--set", "dims=4")
    answers = load_project(project).answers  # tbgen.toml's [answers], read once by project.py
    assert (answers["dtype"], answers["dims"]) == ("FP16", "4")
    added = run_tbgen("add", "model", "solo", "--project", str(project))
    assert added.returncode == 0, added.stdout + added.stderr
    assert {(t.data_type, tuple(t.dims)) for t in read_config(project, "solo").input} == {
        (model_config_pb2.TYPE_FP16, (4,))
    }  # the new model's defaults are the project's answers
    data = tomllib.loads((project / "tbgen.toml").read_text())
    with pytest.raises(ValueError, match="answers"):
        parse_project(project, {**data, "answers": "dtype=FP16"})  # load_project: a ProjectError, exit 2


def test_a_decoupled_model_added_to_a_python_project_batches_as_its_own_template(tmp_path):
    project = new(tmp_path, "p", "-t", "python-backend")  # max_batch_size 8, dynamic batching
    added = run_tbgen(
        "add",
        "model",
        "streams",
        "-t",
        "decoupled-backend",
        "--set",
        "language=python",
        "--project",
        str(project),
    )
    assert added.returncode == 0, added.stdout + added.stderr
    config = read_config(project, "streams")
    assert config.max_batch_size == 0 and config.model_transaction_policy.decoupled
    assert read_config(project, "add_sub").max_batch_size == 8


# --- served for real ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("template", "pattern", "extra"), PYTHON_PATTERNS)
def test_each_python_pattern_passes_the_smoke_suite_and_the_fuzzer(
    tmp_path, server_or_skip, template, pattern, extra
):
    project = new(tmp_path, "p", "-t", template, "--pattern", pattern, *extra)
    fuzz_passes(project)


@pytest.mark.slow
@pytest.mark.cpp
@pytest.mark.parametrize("pattern", ["ensemble", "bls-async"])
def test_a_cpp_model_composes_with_python_steps(tmp_path, compiler_cache, server_or_skip, pattern):
    triton_sources_or_skip("r24.10")
    project = new(tmp_path, "p", "-t", "cpp-backend", "--pattern", pattern)
    built = run_tbgen("build", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    fuzz_passes(project)


@pytest.mark.slow
def test_the_models_of_tritons_bls_example_answer_as_its_clients_expect(tmp_path, server_or_skip):
    """The names and tensors python_backend's examples/bls clients use: bls_sync routes by MODEL_NAME to
    add_sub and pytorch (FP32 [4], no batching) and names an undefined model in its error; bls_async fans
    out."""
    project = new(
        tmp_path,
        "p",
        "-t",
        "python-backend",
        "--pattern",
        "bls",
        "--model-name",
        "bls_sync",
        "--set",
        "callees=add_sub,pytorch",
        "--set",
        "max_batch_size=0",
        "--set",
        "dims=4",
    )
    added = run_tbgen(
        "add", "model", "bls_async", "--pattern", "bls-async", "--set", "callees=pytorch,add_sub", cwd=project
    )
    assert added.returncode == 0, added.stdout + added.stderr
    a, b = np.random.rand(4).astype(np.float32), np.random.rand(4).astype(np.float32)
    with start_server(load_project(project)) as triton:
        client = httpclient.InferenceServerClient(triton.http_url)

        def infer(model: str, selector: str | None):
            inputs = [
                httpclient.InferInput("INPUT0", [4], "FP32"),
                httpclient.InferInput("INPUT1", [4], "FP32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            if selector is not None:
                inputs.append(httpclient.InferInput("MODEL_NAME", [1], "BYTES"))
                inputs[2].set_data_from_numpy(np.array([selector], dtype=np.object_))
            return client.infer(model, inputs)

        for model, selector in (("bls_sync", "add_sub"), ("bls_sync", "pytorch"), ("bls_async", None)):
            response = infer(model, selector)
            np.testing.assert_allclose(response.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
            np.testing.assert_allclose(response.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
        with pytest.raises(Exception, match="undefined_model"):
            infer("bls_sync", "undefined_model")
        assert client.is_server_live()


# --- --model ------------------------------------------------------------------------------------------------


def test_a_composed_model_needs_what_it_calls(tmp_path):
    project = new(tmp_path, "p", "-t", "python-backend", "--pattern", "ensemble")
    added = run_tbgen(
        "add", "model", "router", "--pattern", "bls", "--set", "callees=ensemble,add_sub", cwd=project
    )
    assert added.returncode == 0, added.stdout + added.stderr
    loaded = load_project(project)
    assert loaded.model("ensemble").calls == ("preprocess", "add_sub", "postprocess")
    assert loaded.needed_by("router") == ["router", "ensemble", "add_sub", "preprocess", "postprocess"]
    assert loaded.needed_by("add_sub") == ["add_sub"]
    built = run_tbgen("build", "--model", "preprocess", cwd=project)
    assert built.returncode == 0 and "Nothing to build for preprocess" in built.stdout
    unknown = run_tbgen("serve", "--model", "nope", cwd=project)
    assert unknown.returncode == 2 and "has no model 'nope'" in unknown.stdout + unknown.stderr


@pytest.mark.slow
def test_serve_model_loads_that_model_and_what_it_calls(tmp_path, server_or_skip):
    project = new(tmp_path, "p", "-t", "python-backend", "--pattern", "bls-async")
    assert run_tbgen("add", "model", "other", cwd=project).returncode == 0
    serve = subprocess.Popen(
        [sys.executable, "-m", "triton_backend_gen", "serve", "--model", "bls_async"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    lines = []
    try:
        for line in serve.stdout:
            lines.append(line)
            if "Serving" in line:
                break
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
    table = lines[lines.index("Models\n") + 1 :]  # off a terminal: "model  version  state" per line
    states = {cells[0]: cells[2] for cells in (row.strip().split("  ") for row in table) if len(cells) >= 3}
    assert states == {
        "bls_async": "READY",
        "add_sub": "READY",
        "add_sub_2": "READY",
        "other": "not loaded",
    }, lines
