"""The CUDA kernel and the TorchScript model alone on the GPU, against reference.py: proof of the CUDA paths
that needs no server. The steps build and call the subcommands (`compare-kernel`, `compare-torch-model`,
`probe-python`), which run in the device's Python with its numpy and torch."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
import tomllib
from pathlib import Path

from gpu_check.device import FAIL, PASS, SCRIPT
from gpu_check.state import Completed, Outcome, RunState, failed, run_step_command
from gpu_check.steps import nvcc_path

# --- the CUDA kernel and the TorchScript model alone -----------------------------------------------------
KERNEL_HARNESS = """\
// Written by scripts/gpu-check: the project's CUDA kernel (src/kernels.cu) alone, on host buffers.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels.h"

extern "C" int
gpu_check_add_sub(
    const float* input0, const float* input1, float* output0, float* output1, size_t count)
{
  const size_t bytes = count * sizeof(float) + 1;
  float* device[4] = {nullptr, nullptr, nullptr, nullptr};
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 4 && err == cudaSuccess; ++i) {
    err = cudaMalloc(&device[i], bytes);
  }
  if (err == cudaSuccess) {
    err = cudaMemcpy(device[0], input0, bytes - 1, cudaMemcpyHostToDevice);
  }
  if (err == cudaSuccess) {
    err = cudaMemcpy(device[1], input1, bytes - 1, cudaMemcpyHostToDevice);
  }
  if (err == cudaSuccess) {
    err = triton::backend::NAMESPACE::LaunchAddSub(
        device[0], device[1], device[2], device[3], count, nullptr);
  }
  if (err == cudaSuccess) {
    err = cudaDeviceSynchronize();
  }
  if (err == cudaSuccess) {
    err = cudaMemcpy(output0, device[2], bytes - 1, cudaMemcpyDeviceToHost);
  }
  if (err == cudaSuccess) {
    err = cudaMemcpy(output1, device[3], bytes - 1, cudaMemcpyDeviceToHost);
  }
  for (float* buffer : device) {
    cudaFree(buffer);
  }
  return static_cast<int>(err);
}

extern "C" const char*
gpu_check_error(int code)
{
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
"""


def backend_name(project: Path) -> str:
    return tomllib.loads((project / "tbgen.toml").read_text())["project"]["backend"]


def kernel_step(state: RunState) -> Outcome:
    """The project's add/sub kernel built with nvcc into a small library of its own and run through ctypes
    on reference.make_inputs() (and 3 million elements, past the kernel's grid), compared with
    reference.compute() as `tbgen test` compares: independent of the server."""
    project = state.projects["cpp-backend"]
    harness = state.work / "kernel" / "harness.cu"
    harness.parent.mkdir(parents=True, exist_ok=True)
    harness.write_text(KERNEL_HARNESS.replace("NAMESPACE", backend_name(project)))
    library = harness.with_name("libgpu_check_kernel.so")
    capability = (state.gpu or {}).get("compute_cap", "")
    arch = "sm_" + capability.replace(".", "") if capability else "native"
    command = [nvcc_path() or "nvcc", "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC", f"-arch={arch}"]
    command += [
        "-I",
        str(project / "src"),
        "-o",
        str(library),
        str(harness),
        str(project / "src" / "kernels.cu"),
    ]
    completed = run_step_command(state, "kernel build", command)
    if completed.returncode != 0:
        return failed(completed, f"nvcc -arch={arch}")
    compare = [state.python, SCRIPT, "compare-kernel", str(library), str(project / "reference.py")]
    completed = run_step_command(state, "kernel alone", compare)
    return comparison_outcome(completed, f"src/kernels.cu (nvcc -arch={arch}) on the GPU")


def torch_model_step(state: RunState) -> Outcome:
    """The project's model.pt on the GPU through this Python's PyTorch, against reference.compute()."""
    project = state.projects["libtorch"]
    model = project / "model_repository" / "add_sub" / "1" / "model.pt"
    command = [state.python, SCRIPT, "compare-torch-model", str(model), str(project / "reference.py")]
    completed = run_step_command(state, "model.pt alone", command)
    return comparison_outcome(completed, "model.pt on the GPU (torch.jit.load)")


def comparison_outcome(completed: Completed, what: str) -> Outcome:
    """The outcome of a compare-* subcommand (its last line is a JSON verdict)."""
    lines = completed.output.strip().splitlines()
    try:
        verdict = json.loads(lines[-1])
    except (ValueError, IndexError):
        return failed(completed, what)
    if completed.returncode != 0 or verdict.get("mismatches") or verdict.get("error"):
        why = verdict.get("error") or "outputs differ from reference.py"
        return Outcome(FAIL, f"{what}: {why}", verdict.get("mismatches", []))
    return Outcome(PASS, f"{what}: {verdict['cases']} cases match reference.py", [], verdict)


# --- the subcommands, run in the device's Python ------------------------------------------------------
def probe_python_command() -> int:
    """Print numpy's and torch's versions, whether torch sees CUDA, and torch's CMake package (JSON)."""
    facts: dict[str, object] = {}
    for module in ("numpy", "torch"):
        try:
            imported = __import__(module)
        except ImportError as err:
            facts[module] = f"missing ({err})"
            continue
        facts[module] = imported.__version__
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["torch_cuda"] = f"{torch.version.cuda}, available: {torch.cuda.is_available()}"
        facts["torch_dir"] = str(Path(torch.__file__).parent)
        facts["torch_cmake"] = torch.utils.cmake_prefix_path
    print(json.dumps(facts))
    return 0


def load_reference(path: Path):
    spec = importlib.util.spec_from_file_location("reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_cases(reference) -> list[dict]:
    """reference.make_inputs() of one request and of full batches, and 3 million elements (past the grid of
    4096 blocks of 256 threads the kernel launches at most)."""
    import numpy as np  # the device's numpy, in the subcommand only

    cases = [reference.make_inputs(batch, seed=seed) for batch, seed in ((1, 0), (8, 1), (8, 2), (3, 3))]
    rng = np.random.default_rng(4)
    large = {name: rng.uniform(-10.0, 10.0, 3_000_000).astype(reference.DTYPE) for name in reference.INPUTS}
    return [*cases, large]


def compare_kernel_command(library: Path, reference_file: Path) -> int:
    """Run the kernel library on each case and print the mismatches with reference.compute (JSON)."""
    import numpy as np

    from triton_backend_gen.smoke.compare import output_mismatches

    reference = load_reference(reference_file)
    kernel = ctypes.CDLL(str(library.resolve()))
    kernel.gpu_check_error.restype = ctypes.c_char_p
    pointer = ctypes.POINTER(ctypes.c_float)
    mismatches: list[str] = []
    cases = reference_cases(reference)
    for number, inputs in enumerate(cases):
        a, b = (np.ascontiguousarray(inputs[name], dtype=np.float32) for name in reference.INPUTS)
        got = {name: np.empty_like(a) for name in reference.OUTPUTS}
        arrays = (a, b, *got.values())
        code = kernel.gpu_check_add_sub(*(x.ctypes.data_as(pointer) for x in arrays), ctypes.c_size_t(a.size))
        if code:
            print(json.dumps({"cases": number, "error": kernel.gpu_check_error(code).decode()}))
            return 1
        expected = reference.compute(inputs)
        mismatches += [f"case {number}: {m}" for m in output_mismatches(got, expected, reference.TOLERANCE)]
    print(json.dumps({"cases": len(cases), "mismatches": mismatches}))
    return 1 if mismatches else 0


def compare_torch_model_command(model_file: Path, reference_file: Path) -> int:
    """Run model.pt on the GPU on each case and print the mismatches with reference.compute (JSON)."""
    import torch  # the device's torch, in the subcommand only

    from triton_backend_gen.smoke.compare import output_mismatches

    reference = load_reference(reference_file)
    if not torch.cuda.is_available():
        print(json.dumps({"cases": 0, "error": "torch sees no CUDA device"}))
        return 1
    module = torch.jit.load(str(model_file), map_location="cuda")
    mismatches: list[str] = []
    cases = reference_cases(reference)
    with torch.inference_mode():
        for number, inputs in enumerate(cases):
            answer = module(*(torch.from_numpy(inputs[name]).cuda() for name in reference.INPUTS))
            answer = answer if isinstance(answer, tuple) else (answer,)
            got = {
                name: tensor.cpu().numpy() for name, tensor in zip(reference.OUTPUTS, answer, strict=False)
            }
            expected = reference.compute(inputs)
            mismatches += [
                f"case {number}: {m}" for m in output_mismatches(got, expected, reference.TOLERANCE)
            ]
    print(json.dumps({"cases": len(cases), "mismatches": mismatches, "device": torch.cuda.get_device_name()}))
    return 1 if mismatches else 0
