"""``tbgen new --from-config``: the answers for a backend that serves exactly an existing model's signature.

The model's name (its ``name:``, else its directory's), inputs and outputs (with ``reshape``, ``optional`` and
``label_filename``), ``max_batch_size``, and, verbatim, the fields that shape how it is served (dynamic
batching, instance groups, parameters, warmup, response cache, version policy). What a generated backend
cannot honour (an ensemble, sequence batching, ragged batch inputs, framework optimizations) is refused or
left out, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_backend_gen import signature
from triton_backend_gen.errors import AnswerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.parsing import load_model_config

text_format = lazy_module("google.protobuf.text_format")
model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

# Carried over verbatim into the generated config.pbtxt.
CARRIED = (
    "dynamic_batching",
    "instance_group",
    "parameters",
    "model_warmup",
    "response_cache",
    "version_policy",
)
# Left out, with the reason printed.
DROPPED = {
    "sequence_batching": "sequence batching (the templates do not keep per-sequence state yet)",
    "batch_input": "batch_input (ragged batching needs code of your own in the backend)",
    "batch_output": "batch_output (ragged batching needs code of your own in the backend)",
    "optimization": "optimization (settings of another framework's backend)",
    "default_model_filename": "default_model_filename (the generated backend loads no model file)",
    "cc_model_filenames": "cc_model_filenames (the generated backend loads no model file)",
    "metric_tags": "metric_tags",
    "model_repository_agents": "model_repository_agents",
}


@dataclass(frozen=True)
class ImportedModel:
    name: str
    source: Path
    signature: signature.Signature
    max_batch_size: int
    decoupled: bool
    gpu: bool  # an instance group runs on GPUs
    files: dict[str, bytes] = field(default_factory=dict)  # label files, by path in the model's directory
    notes: tuple[str, ...] = ()  # what the user should know: fields left out, placeholder labels
    declared_name: str = ""  # the config's own name: field ("" when it has none)
    declared_backend: str = ""  # "backend 'onnxruntime'" or "platform 'onnxruntime_onnx'" ("" for neither)

    def changes(self, name: str, backend: str) -> list[str]:
        """What the generated config.pbtxt, which names the model ``name`` served by ``backend``, changed of
        the imported one, and why."""
        said = []
        if not self.declared_name:
            said.append(f"name: the config has none; the model is named {name!r} after its directory")
        elif self.declared_name != name:
            said.append(f"name: {self.declared_name!r} became {name!r} (--model-name)")
        if self.declared_backend != f"backend {backend!r}":
            was = self.declared_backend or "no backend"
            said.append(
                f"{was} became backend {backend!r}: the generated backend serves the model now (Triton "
                "loads a model with the backend its config names)"
            )
        return said

    def answers(self, template: str) -> dict[str, Any]:
        """The answers of ``tbgen new`` this model implies for ``template``."""
        answers: dict[str, Any] = {"model_name": self.name, "signature": self.signature.context()}
        if template == "decoupled-backend":
            return answers
        answers["max_batch_size"] = self.max_batch_size
        if template == "cpp-backend":
            answers["gpu"] = self.gpu
            answers["instance_kind"] = "KIND_GPU" if self.gpu else "KIND_CPU"
        return answers


def import_config(path: Path, template: str) -> ImportedModel:
    """Read ``path`` (any file name) and check that ``template`` can serve its model."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--from-config {path}: no such file.", "Pass the path of the model's config.pbtxt.")
    config = load_model_config(path)
    name = config.name or path.resolve().parent.name
    where = f"--from-config {path}"
    _check_servable(config, template, f"{where}: model {name!r}")
    try:
        imported = signature.Signature(
            tuple(_tensor(t, output=False) for t in config.input),
            tuple(_tensor(t, output=True) for t in config.output),
            _carried_text(config),
        )
        signature.validate(imported)  # which backends serve BF16 is the answers' rule (check_consistency)
    except AnswerError as err:
        raise UsageError(f"{where}: {err.message}", err.hint) from err
    files, label_notes = _label_files(path.parent, imported.outputs)
    gpu = any(g.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU for g in config.instance_group)
    decoupled = config.model_transaction_policy.decoupled
    return ImportedModel(
        name,
        path,
        imported,
        config.max_batch_size,
        decoupled,
        gpu,
        files,
        tuple(_left_out(config, imported, template) + label_notes),
        config.name,
        _declared_backend(config),
    )


def _check_servable(config: Any, template: str, model: str) -> None:
    """UsageError when ``template`` cannot serve the model of ``config`` (``model`` names it): an ensemble, a
    decoupled model for another template than decoupled-backend, a batching one for decoupled-backend."""
    if config.platform == "ensemble" or config.HasField("ensemble_scheduling"):
        raise UsageError(
            f"{model} is an ensemble; a backend serves one of its steps.",
            "Pass the config.pbtxt of the step your backend implements.",
        )
    if config.model_transaction_policy.decoupled and template != "decoupled-backend":
        raise UsageError(f"{model} is decoupled.", "Use --template decoupled-backend.")
    if template == "decoupled-backend" and config.max_batch_size > 0:
        raise UsageError(
            f"{model} batches (max_batch_size {config.max_batch_size}); the "
            "decoupled-backend template serves max_batch_size 0.",
            "Use --template cpp-backend or python-backend, or set max_batch_size: 0 in the config.",
        )


def _left_out(config: Any, imported: signature.Signature, template: str) -> list[str]:
    """What the generated model leaves out of the imported one, or serves otherwise, and why."""
    notes = [f"left out {DROPPED[f.name]}" for f, _ in config.ListFields() if f.name in DROPPED]
    if "EXECUTION_ENV_PATH" in config.parameters:
        notes.append(
            "left out parameter EXECUTION_ENV_PATH (the packed Python environment is not beside the "
            "generated model; add it back once it is)"
        )
    if template != "cpp-backend" and any(t.reshape == () for t in imported.inputs):
        notes.append(
            "an input is reshaped to a scalar: the python backend of 24.10 crashes the server on an empty "
            "request to such an input (`tbgen test --fuzz 100` finds it); the cpp-backend template serves it"
        )
    return notes


def _declared_backend(config: Any) -> str:
    """What ``config`` says serves it: "backend 'onnxruntime'", "platform 'onnxruntime_onnx'", or ""."""
    if config.backend:
        return f"backend {config.backend!r}"
    return f"platform {config.platform!r}" if config.platform else ""


def _tensor(tensor: Any, *, output: bool) -> signature.Tensor:
    datatype = model_config_pb2.DataType.Name(tensor.data_type)
    if datatype == "TYPE_INVALID":
        raise AnswerError(f"{tensor.name}: data_type is missing.", "Give every tensor a data_type.")
    return signature.Tensor(
        signature.check_tensor_name(tensor.name),
        signature.datatype(datatype).wire,
        signature.parse_dims(list(tensor.dims), what=f"{tensor.name} dims"),
        optional=bool(not output and tensor.optional),
        reshape=tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None,
        label_filename=(tensor.label_filename or None) if output else None,
    )


def _carried_text(config: Any) -> str:
    """The CARRIED fields of ``config`` as config.pbtxt text."""
    carried = model_config_pb2.ModelConfig()
    for name in CARRIED:
        if name == "parameters":  # a map
            for key, value in config.parameters.items():
                if key != "EXECUTION_ENV_PATH":
                    carried.parameters[key].CopyFrom(value)
        elif name in ("instance_group", "model_warmup"):  # repeated
            getattr(carried, name).extend(getattr(config, name))
        elif config.HasField(name):
            getattr(carried, name).CopyFrom(getattr(config, name))
    return text_format.MessageToString(carried).strip()


def _label_files(
    directory: Path, outputs: tuple[signature.Tensor, ...]
) -> tuple[dict[str, bytes], list[str]]:
    """Each output's label file: copied when it lies beside the config, else a placeholder (one label a
    class)."""
    files: dict[str, bytes] = {}
    notes = []
    for tensor in outputs:
        if not tensor.label_filename:
            continue
        source = directory / tensor.label_filename
        if source.is_file():
            files[tensor.label_filename] = source.read_bytes()
            continue
        classes = 1
        for dim in tensor.dims:
            classes *= dim if dim > 0 else 1
        files[tensor.label_filename] = "".join(f"class_{i}\n" for i in range(classes)).encode()
        notes.append(
            f"{tensor.label_filename} was not beside the config: wrote a placeholder with {classes} "
            f"label{'s' if classes != 1 else ''} (class_0 ...); put the real labels there"
        )
    return files, notes
