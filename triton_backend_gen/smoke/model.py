"""What the smoke suite knows about a model: its config.pbtxt (as a ModelSpec) and the project's
reference.py."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from triton_backend_gen.errors import TbgenError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config import load_model_config

model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from triton_backend_gen.project import ModelEntry, Project


class SmokeError(TbgenError):
    """The smoke suite cannot be planned: reference.py or a model config is missing or broken."""


# ---- What the model looks like, from its config.pbtxt ---------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # Triton's wire name: "FP32", "INT64", "BYTES", ...
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False


@dataclass(frozen=True)
class SequenceSpec:
    """How the model's sequence batcher is set up (config.pbtxt's sequence_batching)."""

    strategy: str  # "direct" or "oldest"
    string_ids: bool  # correlation IDs are strings (CORRID is TYPE_STRING), else unsigned integers
    idle_timeout_s: float  # a sequence idle this long is ended by Triton
    implicit_state: bool  # Triton keeps a state tensor between the sequence's requests


@dataclass(frozen=True)
class ModelSpec:
    name: str
    max_batch_size: int
    decoupled: bool
    dynamic_batching: bool
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # config.pbtxt leaves the tensors (and batching) to the backend's auto-complete: this spec is the served
    # config's (see leaves_tensors_to_backend)
    auto_completed: bool = False
    sequence: SequenceSpec | None = None  # the model is stateful: every request belongs to a sequence

    @property
    def batch_sizes(self) -> list[int | None]:
        """The batch sizes to test: 1..max_batch_size (1 for a sequence model: the sequence batcher takes one
        row per request), or [None] for a model that does not batch."""
        if self.max_batch_size <= 0:
            return [None]
        return [1] if self.sequence is not None else list(range(1, self.max_batch_size + 1))

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    @property
    def input_datatypes(self) -> dict[str, str]:
        """Each input's datatype: what a request declares (an array's dtype cannot tell BF16, sent as
        float32)."""
        return {t.name: t.datatype for t in self.inputs}

    def served_shape(self, tensor: TensorSpec) -> list[int]:
        """The shape the server reports in the model metadata (-1 first for the batch dimension)."""
        return ([-1] if self.max_batch_size > 0 else []) + list(tensor.dims)


def model_spec(config: ModelConfig, name: str) -> ModelSpec:
    """The parts of a ModelConfig that the smoke suite needs."""

    def datatype(value: int) -> str:
        wire = model_config_pb2.DataType.Name(value).removeprefix("TYPE_")
        return "BYTES" if wire == "STRING" else wire

    def tensors(items, optional: bool) -> tuple[TensorSpec, ...]:
        return tuple(
            TensorSpec(t.name, datatype(t.data_type), tuple(t.dims), bool(optional and t.optional))
            for t in items
        )

    return ModelSpec(
        name=config.name or name,
        max_batch_size=config.max_batch_size,
        decoupled=config.model_transaction_policy.decoupled,
        dynamic_batching=config.HasField("dynamic_batching") and config.max_batch_size > 0,
        inputs=tensors(config.input, optional=True),
        outputs=tensors(config.output, optional=False),
        sequence=sequence_spec(config),
    )


# Triton's default when max_sequence_idle_microseconds is not set.
DEFAULT_SEQUENCE_IDLE_S = 1.0


def sequence_spec(config: ModelConfig) -> SequenceSpec | None:
    """The model's sequence batching, or None when it has none."""
    if not config.HasField("sequence_batching"):
        return None
    batching = config.sequence_batching
    corrid = model_config_pb2.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
    string_ids = any(
        control.kind == corrid and control.data_type == model_config_pb2.TYPE_STRING
        for tensor in batching.control_input
        for control in tensor.control
    )
    idle = batching.max_sequence_idle_microseconds / 1e6 or DEFAULT_SEQUENCE_IDLE_S
    return SequenceSpec(
        strategy=batching.WhichOneof("strategy_choice") or "direct",
        string_ids=string_ids,
        idle_timeout_s=idle,
        implicit_state=len(batching.state) > 0,
    )


def leaves_tensors_to_backend(config: ModelConfig) -> bool:
    """config.pbtxt declares no input and no output: the backend declares them when the server loads the model
    (the python backend's auto_complete_config), so only the served config tells the model's tensors and
    batching."""
    return not config.input and not config.output


def load_model_spec(
    model: ModelEntry, repository: Path | None = None, served: Mapping[str, ModelConfig] | None = None
) -> tuple[ModelSpec, ModelConfig]:
    """The spec and config.pbtxt's config of ``model``, from the project's repository or ``repository`` (a run
    copy served instead of it). ``served``: configs as the server completed them, by model name (see
    checks.served_configs); a model whose config.pbtxt leaves its tensors to the backend gets its spec from
    there."""
    path = repository / model.name / model.config_file.name if repository is not None else model.config_file
    if not path.is_file():
        raise SmokeError(
            f"{path} does not exist.", f"tbgen.toml lists model '{model.name}'; add its config.pbtxt."
        )
    config = load_model_config(path)
    if served is not None and model.name in served and leaves_tensors_to_backend(config):
        return replace(model_spec(served[model.name], model.name), auto_completed=True), config
    return model_spec(config, model.name), config


def load_model_specs(
    project: Project,
    model: ModelEntry | None = None,
    repository: Path | None = None,
    served: Mapping[str, ModelConfig] | None = None,
) -> list[tuple[ModuleType, ModelSpec, ModelConfig]]:
    """For ``model`` (every model of the project when None): its reference (reference.py, or the file its
    [[models]] entry names), spec and config.pbtxt's config, the reference checked against the API the model
    needs; what both the smoke plan and the fuzz plan start from. ``repository``: the repository the server
    serves, when it is a run copy of the project's; ``served``: the configs the server completed (see
    load_model_spec)."""
    models = [model] if model is not None else list(project.models)
    if not models:
        raise SmokeError(f"{project.project_file} lists no models.", "Add a [[models]] entry.")
    references: dict[Path, ModuleType] = {}
    loaded = []
    for entry in models:
        spec, config = load_model_spec(entry, repository, served)
        path = entry.reference or project.reference_file
        if path not in references:
            references[path] = load_reference(path)
        check_reference_api(references[path], spec.decoupled, spec.sequence is not None)
        loaded.append((references[path], _with_reference_ids(spec, config, references[path]), config))
    return loaded


def _with_reference_ids(spec: ModelSpec, config: ModelConfig, reference: ModuleType) -> ModelSpec:
    """``spec`` with string correlation IDs when its config declares no CORRID control input (which would say
    the IDs' type) and its reference's SEQUENCE says "string": what the model's clients send."""
    if spec.sequence is None or _declares_corrid(config):
        return spec
    declared = getattr(reference, "SEQUENCE", None)
    said = declared.get("correlation_id") if isinstance(declared, dict) else None
    return replace(spec, sequence=replace(spec.sequence, string_ids=said == "string")) if said else spec


def _declares_corrid(config: ModelConfig) -> bool:
    corrid = model_config_pb2.ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
    controls = (control for tensor in config.sequence_batching.control_input for control in tensor.control)
    return any(control.kind == corrid for control in controls)


# ---- reference.py ---------------------------------------------------------------------------------------


def load_reference(path: Path) -> ModuleType:
    """A model's reference imported under a module name of its own (projects never collide): the file
    ``path``, or ``path``/reference.py for a project's directory."""
    path = Path(path)
    path = path / "reference.py" if path.is_dir() else path
    if not path.is_file():
        raise SmokeError(
            f"{path} does not exist; the smoke suite compares the model's answers with it.",
            "Every tbgen project has a reference.py (see docs/templates.md); render the project again or "
            "write one.",
        )
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_tbgen_reference_{digest}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise SmokeError(f"{path} fails to import: {type(err).__name__}: {err}", "Fix reference.py.") from err
    return module


def reference_mismatch(spec: ModelSpec, reference: ModuleType) -> str | None:
    """Why reference.py cannot drive ``spec`` (its make_inputs lacks a required input of the model), or None.

    A model whose [[models]] entry names no reference of its own shares reference.py; a model it does not
    describe gets this message instead of requests built for another model."""
    try:
        made = reference.make_inputs(spec.batch_sizes[0], seed=0)
    except Exception as err:  # noqa: BLE001 - the user's code: any failure is reported, not raised
        return (
            f"reference.make_inputs({spec.batch_sizes[0]}) failed for {spec.name}: {type(err).__name__}: "
            f"{err}"
        )
    missing = [t.name for t in spec.inputs if not t.optional and t.name not in made]
    if not missing and any(t.name in made for t in spec.inputs):
        return None
    return (
        f"reference.py does not describe model {spec.name}: its make_inputs gives "
        f"{', '.join(made) or 'nothing'}, the model takes {', '.join(t.name for t in spec.inputs)}. "
        'Give the model a reference of its own (reference = "references/<model>.py" in its [[models]] '
        "entry), or drop it from tbgen.toml's [[models]] (it is still served)."
    )


def check_reference_api(reference: ModuleType, decoupled: bool, sequence: bool = False) -> None:
    wanted = ["make_inputs", "TOLERANCE", "responses" if decoupled else "compute"]
    wanted += ["compute_sequence"] if sequence else []
    missing = [name for name in wanted if not hasattr(reference, name)]
    if missing:
        raise SmokeError(
            f"{reference.__file__} lacks {', '.join(missing)}.",
            "reference.py defines make_inputs, TOLERANCE and compute (responses for decoupled models, and "
            "compute_sequence for sequence models); see docs/templates.md.",
        )
