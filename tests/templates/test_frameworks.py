"""cpp-backend --framework libtorch|opencv-dnn: the backend wraps a real inference library (Debian's libtorch
1.13 and OpenCV 4.6 DNN), loads the example model that `tbgen new` exported, passes `tbgen test --fuzz 300` in
the embedded server, serves another model of the same signature after only the model file and reference.py
change, and refuses a model file that disagrees with config.pbtxt at load, naming both sides."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import fuzz_passes, run_tbgen, triton_sources_or_skip

from triton_backend_gen import frameworks, signature
from triton_backend_gen.errors import AnswerError
from triton_backend_gen.scaffold import example_model


def python_with_or_skip(module: str) -> str:
    python = example_model.python_with(module)
    if python is None:
        pytest.skip(f"no Python here imports {module} (scripts/setup installs python3-torch and onnx<1.18)")
    return python


def new_framework_project(tmp_path: Path, framework: str, *args: str, name: str = "fw") -> Path:
    project = tmp_path / name
    result = run_tbgen(
        "new",
        str(project),
        "-t",
        "cpp-backend",
        "--no-input",
        "--triton-version",
        "24.10",
        "--framework",
        framework,
        *args,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Example model: wrote" in result.stdout, result.stdout
    return project


def load_failure(project: Path) -> str:
    result = run_tbgen("test", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stderr + (project / "build" / "tbgen" / "server.log").read_text(errors="replace")


# --- what a framework can serve -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("framework", "flags", "fragment"),
    [
        (
            "libtorch",
            ["--input", "T:BYTES:1", "--output", "O:INT32:1"],
            "no tensor type for BYTES (tensor T)",
        ),
        ("libtorch", ["--set", "dtype=UINT32"], "no tensor type for UINT32"),
        ("opencv-dnn", ["--set", "dtype=FP16"], "no tensor type for FP16"),
        (
            "opencv-dnn",
            ["--input", "X:FP32:4:optional", "--input", "Y:FP32:4", "--output", "O:FP32:1"],
            "X cannot be optional",
        ),
        ("opencv-dnn", ["--input", "X:FP32:-1", "--output", "O:FP32:2"], "X is not"),
        (
            "opencv-dnn",
            ["--input", "X:FP32:4", "--output", "O:FP32:2", "--set", "max_batch_size=0"],
            "needs a batch dimension",
        ),
    ],
)
def test_a_signature_the_framework_cannot_serve_exits_2_before_anything_is_written(
    tmp_path, framework, flags, fragment
):
    result = run_tbgen(
        "new", str(tmp_path / "p"), "-t", "cpp-backend", "--no-input", "--framework", framework, *flags
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr and "hint:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "p").exists()


def test_every_framework_takes_its_datatypes_and_nothing_else():
    for name, chosen in frameworks.FRAMEWORKS.items():
        for wire in signature.DATATYPES:
            tensors = signature.from_flags([f"X:{wire}:4"], [f"Y:{wire}:4"])
            if wire in chosen.datatypes:
                frameworks.check_signature(name, tensors, own=True, batching=True)
            else:
                with pytest.raises(AnswerError, match=f"no tensor type for {wire}"):
                    frameworks.check_signature(name, tensors, own=True, batching=True)


def test_an_unknown_framework_is_a_usage_error(tmp_path):
    result = run_tbgen(
        "new", str(tmp_path / "p"), "-t", "cpp-backend", "--no-input", "--framework", "tensorflow"
    )
    assert result.returncode == 2 and "framework" in result.stderr and "libtorch" in result.stderr
    assert not (tmp_path / "p").exists()


# --- the example model --------------------------------------------------------------------------------------
def test_an_existing_model_file_is_never_replaced(tmp_path):
    model_dir = tmp_path / "model_repository" / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.pt").write_bytes(b"the user's model")
    result = example_model.write_example_model(tmp_path, model_dir, frameworks.FRAMEWORKS["libtorch"])
    assert not result.written and "left as it is" in result.message
    assert (model_dir / "1" / "model.pt").read_bytes() == b"the user's model"


def test_without_a_python_that_has_the_framework_nothing_is_written_and_the_way_is_said(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(example_model, "python_with", lambda module: None)
    model_dir = tmp_path / "model_repository" / "m"
    result = example_model.write_example_model(tmp_path, model_dir, frameworks.FRAMEWORKS["opencv-dnn"])
    assert not result.written and not model_dir.exists()
    assert "imports onnx" in result.message and f"python3 {tmp_path / 'export_model.py'}" in result.message


def test_the_export_script_keeps_a_model_file_unless_forced(tmp_path):
    python = python_with_or_skip("onnx")
    project = new_framework_project(tmp_path, "opencv-dnn")
    model = project / "model_repository" / "add_sub" / "1" / "model.onnx"
    model.write_bytes(b"mine")
    kept = subprocess.run(
        [python, "export_model.py"], cwd=project, capture_output=True, text=True, check=False
    )
    assert kept.returncode == 0 and "left as it is" in kept.stdout and model.read_bytes() == b"mine"
    forced = subprocess.run(
        [python, "export_model.py", "--force"], cwd=project, capture_output=True, text=True, check=False
    )
    assert forced.returncode == 0 and model.read_bytes() != b"mine"
    assert not list(model.parent.glob("*.partial"))


# --- libtorch, end to end -----------------------------------------------------------------------------------
TORCH_MODELS = {
    # The same signature computing a product instead of the sum.
    "product": """
import sys, torch
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a * b, a - b
torch.jit.script(M()).save(sys.argv[1])
""",
    "three_inputs": """
import sys, torch
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
        return a + b, a - c
torch.jit.script(M()).save(sys.argv[1])
""",
    "int_outputs": """
import sys, torch
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return (a + b).to(torch.int32), a - b
torch.jit.script(M()).save(sys.argv[1])
""",
}


def save_torch_model(python: str, source: str, path: Path) -> None:
    script = path.parent.parent.parent.parent / "write_model.py"  # torch.jit.script reads the source file
    script.write_text(source)
    subprocess.run([python, str(script), str(path)], check=True, capture_output=True, timeout=300)


@pytest.mark.slow
@pytest.mark.cpp
def test_libtorch_backend_serves_its_example_and_a_replacement_model(
    tmp_path, compiler_cache, server_or_skip
):
    triton_sources_or_skip("r24.10")
    python = python_with_or_skip("torch")
    project = new_framework_project(tmp_path, "libtorch")
    assert (project / "cmake" / "libraries" / "torch.cmake").is_file()
    assert (
        not (project / "src" / "kernels.cu").exists()
        and not (project / "cmake" / "libraries" / "opencv_dnn.cmake").exists()
    )
    built = run_tbgen("build", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    report = fuzz_passes(project)
    assert "dynamic batching merged them" in report

    model = project / "model_repository" / "add_sub" / "1" / "model.pt"
    # Another model of the same signature: only the model file and reference.py change.
    save_torch_model(python, TORCH_MODELS["product"], model)
    reference = project / "reference.py"
    reference.write_text(reference.read_text().replace("(a + b).astype(DTYPE)", "(a * b).astype(DTYPE)"))
    tested = run_tbgen("test", cwd=project)
    assert tested.returncode == 0 and " 0 failed" in tested.stdout, tested.stdout[-3000:] + tested.stderr

    save_torch_model(python, TORCH_MODELS["three_inputs"], model)
    assert "model.pt's forward() takes 3 inputs, config.pbtxt declares 2 (INPUT0, INPUT1)" in load_failure(
        project
    )
    save_torch_model(python, TORCH_MODELS["int_outputs"], model)
    assert (
        "model.pt's output 0 ('OUTPUT0' in config.pbtxt) is INT32, config.pbtxt declares TYPE_FP32"
        in load_failure(project)
    )
    model.unlink()
    assert "no model file" in load_failure(project)


@pytest.mark.slow
@pytest.mark.cpp
def test_libtorch_backend_serves_a_signature_of_its_own(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    python_with_or_skip("torch")
    project = new_framework_project(
        tmp_path,
        "libtorch",
        "--input",
        "IMG:FP16:3,-1",
        "--input",
        "K:INT32:1",
        "--input",
        "MASK:BOOL:4:optional",
        "--output",
        "SCORE:FP32:4",
        "--output",
        "IDS:INT64:-1",
        "--output",
        "FLAG:BOOL:2",
    )
    built = run_tbgen("build", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    fuzz_passes(project)


# --- OpenCV DNN, end to end ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.cpp
def test_opencv_dnn_backend_serves_its_example_and_refuses_a_model_of_other_outputs(
    tmp_path, compiler_cache, server_or_skip
):
    triton_sources_or_skip("r24.10")
    python_with_or_skip("onnx")
    project = new_framework_project(tmp_path, "opencv-dnn")
    assert (project / "cmake" / "libraries" / "opencv_dnn.cmake").is_file()
    built = run_tbgen("build", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    fuzz_passes(project)

    # The example of another project whose outputs are named differently.
    other = new_framework_project(
        tmp_path, "opencv-dnn", "--set", "output0_name=SUM", "--set", "output1_name=DIFF", name="other"
    )
    (other / "model_repository" / "add_sub" / "1" / "model.onnx").replace(
        project / "model_repository" / "add_sub" / "1" / "model.onnx"
    )
    failure = load_failure(project)
    assert "model.onnx has no output 'OUTPUT0' of config.pbtxt; its outputs are: " in failure
    assert "DIFF, SUM" in failure or "SUM, DIFF" in failure


@pytest.mark.slow
@pytest.mark.cpp
def test_opencv_dnn_backend_serves_a_signature_of_its_own(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    python_with_or_skip("onnx")
    project = new_framework_project(
        tmp_path,
        "opencv-dnn",
        "--input",
        "IMG:FP32:6",
        "--input",
        "K:FP32:2",
        "--output",
        "SCORE:FP32:4",
        "--output",
        "IDS:FP32:3",
    )
    built = run_tbgen("build", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    fuzz_passes(project)
