"""What every check works on: one parsed config, where its fields are, what is expected of it, and the
findings collected so far; plus the facts about Triton and the message helpers the checks share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_backend_gen.findings import ERROR, NOTE, WARNING, Finding
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.expectations import CONFIG_FILE, Expectations
from triton_backend_gen.model_config.locate import Node
from triton_backend_gen.versions import Release, default_release

model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

ENSEMBLE_PLATFORM = "ensemble"
TENSORRT_PLATFORM = "tensorrt_plan"
# The backend Triton picks for a platform when the config names only the platform.
PLATFORM_BACKENDS = {
    "tensorrt_plan": "tensorrt",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorflow_savedmodel": "tensorflow",
    "tensorflow_graphdef": "tensorflow",
}
# The backend Triton infers from the model file it finds in a version directory when the config names
# neither backend nor platform.
MODEL_FILE_BACKENDS = {
    "model.py": "python",
    "model.onnx": "onnxruntime",
    "model.plan": "tensorrt",
    "model.pt": "pytorch",
    "model.savedmodel": "tensorflow",
    "model.graphdef": "tensorflow",
}


class CheckContext:
    """One parsed config under check, and the findings reported on it."""

    def __init__(self, path: Path, config: ModelConfig, tree: Node, expect: Expectations) -> None:
        self.path = path
        self.config = config
        self.tree = tree
        self.expect = expect
        self.findings: list[Finding] = []
        self.model_dir = path.resolve().parent if path.name == CONFIG_FILE else None
        self.model_name = config.name or (self.model_dir.name if self.model_dir else path.stem)
        self.is_ensemble = config.platform == ENSEMBLE_PLATFORM or config.HasField("ensemble_scheduling")

    def error(self, node: Node | int | None, message: str) -> None:
        self._add(node, message, ERROR)

    def warn(self, node: Node | int | None, message: str) -> None:
        self._add(node, message, WARNING)

    def note(self, node: Node | int | None, message: str) -> None:
        self._add(node, message, NOTE)

    def _add(self, node: Node | int | None, message: str, severity: str) -> None:
        line = node.line if isinstance(node, Node) else node
        self.findings.append(Finding(severity, message, path=self.path, line=line))

    @property
    def release(self) -> Release:
        """The Triton release the model is served by: the project's, else tbgen's default release."""
        return self.expect.release or default_release()

    def line_of(self, *steps: str | tuple[str, int]) -> int | None:
        """Line of the deepest node found along ``steps`` (names, or (name, index) for repeated fields)."""
        node: Node | None = self.tree
        line = None
        for step in steps:
            name, index = step if isinstance(step, tuple) else (step, 0)
            node = node.nth(name, index)
            if node is None:
                break
            line = node.line
        return line

    def effective_backend(self) -> str | None:
        """The backend Triton will load the model with, as far as the config (and its directory) tell."""
        c = self.config
        if c.backend:
            return c.backend
        if c.platform in PLATFORM_BACKENDS:
            return PLATFORM_BACKENDS[c.platform]
        for version_dir in self.version_dirs():
            for filename, backend in MODEL_FILE_BACKENDS.items():
                if (version_dir / filename).exists():
                    return backend
        return None

    def version_dirs(self) -> list[Path]:
        """The model's version directories (named by a number), sorted; [] outside a model directory."""
        if self.model_dir is None or not self.model_dir.is_dir():
            return []
        return sorted(p for p in self.model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def dtype_name(value: int) -> str:
    """The ModelConfig name of data type ``value``, e.g. TYPE_FP32."""
    return enum_name(model_config_pb2.DataType, value)


def enum_name(enum: Any, value: int) -> str:
    """The name of ``value`` in a protobuf enum, or the number itself when the enum has no such value
    (text format accepts any number for an enum field)."""
    try:
        return enum.Name(value)
    except ValueError:
        return str(value)


def show_dims(dims: list[int]) -> str:
    """``dims`` as a config writes them: [ 2, -1 ]."""
    return "[ " + ", ".join(str(d) for d in dims) + " ]" if dims else "[ ]"
