"""Answers: typed and validated before anything is written.

Layers, highest first: what the user gave (flags, ``--set``, interactive prompts), an answers file, the
template's defaults. Defaults that depend on the Triton release (the CUDA architecture list) come from the
release matrix, so that choosing ``--triton-version`` moves them too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from triton_backend_gen import frameworks, signature, versions
from triton_backend_gen.errors import AnswerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import toml_tables
from triton_backend_gen.scaffold import naming
from triton_backend_gen.scaffold.templates import Option, Template

cookiecutter_environment = lazy_module("cookiecutter.environment")

_TRUE = {"y", "yes", "true", "on", "1"}
_FALSE = {"n", "no", "false", "off", "0"}
INSTANCE_KINDS = ("KIND_CPU", "KIND_GPU")
TENSOR_KEYS = ("input0_name", "input1_name", "output0_name", "output1_name")
# The dtypes the python-backend's pybind11 add/sub (native=yes) is written for.
NATIVE_DTYPES = ("FP32", "FP16", "INT32", "INT64")
# The add/sub example's own answers: not asked for when the model has a signature of its own.
EXAMPLE_KEYS = ("dtype", "dims", *TENSOR_KEYS)
# The answers of a composed model: given by --pattern and --set, never asked for (see scaffold.compose).
COMPOSE_KEYS = ("pattern", "callees", "selector")
# Facts of the release rather than choices: taken from the release matrix, never asked for.
RELEASE_KEYS = ("cmake_minimum",)
SEQUENCE_MODEL_NAME = "accumulate"  # the sequence example's default model name
# Limits of the model configuration's fields: max_batch_size and instance counts are int32.
INT32_MAX = 2**31 - 1
_CUDA_ARCHITECTURE = re.compile(r"[0-9]+[af]?")  # 80, 90a, 100f (ASCII digits only)


def parse_set_options(pairs: list[str]) -> dict[str, str]:
    """``["dtype=FP16", "dims=4"]`` -> ``{"dtype": "FP16", "dims": "4"}``."""
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects key=value, got {pair!r}.", "Example: --set dtype=FP16")
        result[key.strip()] = value.strip()
    return result


def read_answers_file(path: Path) -> dict[str, Any]:
    """Answers from a file: a project's tbgen.toml (its [answers], its template as ``template`` and its
    model's signature), a TOML file of answers, or a JSON object. A ``[[models]]`` entry (there may be one)
    gives the model's name and signature (``[[models.inputs]]``, ``[[models.outputs]]``)."""
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else toml_tables(text)
    except (OSError, ValueError) as err:
        raise UsageError(
            f"Cannot read answers from {path}: {err}", "Pass a tbgen.toml, or a TOML or JSON file."
        ) from err
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a table of answers.", 'Example (TOML): dtype = "FP16"')
    models = data.pop("models", None)
    if "answers" in data:  # a project's tbgen.toml
        answers, meta = data["answers"], data.get("tbgen", {})
        for name, table in (("answers", answers), ("tbgen", meta)):
            if not isinstance(table, dict):
                raise UsageError(
                    f"{path}: {name} must be a table, got {type(table).__name__} {table!r}.",
                    "A project's tbgen.toml has [tbgen] (with template = ...) and [answers] tables.",
                )
        answers = dict(answers)
        answers.pop("project_name", None)  # the new project's name comes from its path
        template = meta.get("template")
        data = {**answers, "template": template} if template else answers
    else:
        data = dict(data)
    if models is not None:
        data.update(_model_answers(models, path))
    return data


def _model_answers(models: Any, path: Path) -> dict[str, Any]:
    """The name and signature of the one ``[[models]]`` entry of an answers file."""
    if not isinstance(models, list) or len(models) != 1 or not isinstance(models[0], dict):
        count = len(models) if isinstance(models, list) else 0
        raise UsageError(
            f"{path}: [[models]] must hold one model for `tbgen new`, got {count or repr(models)}.",
            'Example: [[models]] name = "txt", then [[models.inputs]] and [[models.outputs]] tables.',
        )
    model = models[0]
    answers: dict[str, Any] = {"model_name": model["name"]} if "name" in model else {}
    if "inputs" in model or "outputs" in model:
        imported = model.get("imported", {})
        config = imported.get("config", "") if isinstance(imported, dict) else ""
        answers["signature"] = {
            "inputs": model.get("inputs", []),
            "outputs": model.get("outputs", []),
            "config": config,
        }
    return answers


def coerce(option: Option, value: Any) -> Any:
    """``value`` converted to the option's type (strings from the command line included)."""
    return _COERCIONS.get(option.kind, _coerce_text)(option, value)


def _coerce_signature(option: Option, value: Any) -> dict[str, Any]:
    """The signature option's value as the cookiecutter variable (the add/sub example's when empty)."""
    if isinstance(value, str) and value.strip():
        raise AnswerError(
            f"{option.key} cannot be set with --set.",
            f"Give the tensors with {signature.FLAG_EXAMPLE}, or in an answers file.",
        )
    given = signature.from_context(value or None, option.key)
    return given.context() if given else dict(signature.EMPTY)


def _coerce_bool(option: Option, value: Any) -> bool:
    """A boolean, or one of the words for one (yes/no, on/off, true/false, 1/0)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise AnswerError(f"{option.key} must be a boolean, got {value!r}.", f"Example: --set {option.key}=yes")


def _coerce_int(option: Option, value: Any) -> int:
    """An integer, or its digits (a boolean is none: True would pass as 1)."""
    problem = AnswerError(
        f"{option.key} must be an integer, got {value!r}.", f"Example: --set {option.key}=8"
    )
    if isinstance(value, bool):
        raise problem
    try:
        return int(str(value).strip())
    except ValueError:
        raise problem from None


def _coerce_text(option: Option, value: Any) -> str:
    """The text, spelled as the option's choice it matches (case-insensitively) when it has choices."""
    text = str(value).strip()
    if not option.choices or text in option.choices:
        return text
    # Choices are matched case-insensitively (fp16 -> FP16) but must exist.
    match = next((c for c in option.choices if c.lower() == text.lower()), None)
    if match is None:
        raise AnswerError(
            f"{option.key} must be one of {', '.join(option.choices)}; got {value!r}.",
            f"Example: --set {option.key}={option.choices[0]}",
        )
    return match


# How a value is converted to each kind of option (any other kind: as text).
_COERCIONS: dict[type, Callable[[Option, Any], Any]] = {
    dict: _coerce_signature,
    bool: _coerce_bool,
    int: _coerce_int,
}


def parse_dims(value: str) -> str:
    """Dims as written in answers: comma-separated, each positive or -1 ("16", "2,3", "-1")."""
    return ",".join(str(d) for d in signature.parse_dims(value))


def _non_negative(key: str) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value < 0:
            raise AnswerError(
                f"{key} must be 0 or more (0 disables batching), got {value}.", f"Example: --set {key}=8"
            )
        if value > INT32_MAX:  # an int32 field of the model configuration
            raise AnswerError(f"{key} must be at most {INT32_MAX}, got {value}.", f"Example: --set {key}=8")
        return value

    return check


def _positive(key: str) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value < 1:
            raise AnswerError(f"{key} must be 1 or more, got {value}.", f"Example: --set {key}=1")
        if value > INT32_MAX:  # an int32 field of the model configuration
            raise AnswerError(f"{key} must be at most {INT32_MAX}, got {value}.", f"Example: --set {key}=1")
        return value

    return check


def _instance_kind(value: str) -> str:
    kind = value.upper()
    if kind not in INSTANCE_KINDS:
        raise AnswerError(
            f"instance_kind must be one of {', '.join(INSTANCE_KINDS)}, got {value!r}.",
            "Example: --set instance_kind=KIND_CPU",
        )
    return kind


def _cuda_architectures(value: str) -> str:
    archs = [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]
    if not archs or not all(_CUDA_ARCHITECTURE.fullmatch(a) for a in archs):
        raise AnswerError(
            f"cuda_architectures must be a ';'-separated list of compute capabilities, got {value!r}.",
            "Example: --set cuda_architectures='80;90'",
        )
    return ";".join(archs)


def _cmake_version(value: str) -> str:
    if not re.fullmatch(r"[0-9]+(\.[0-9]+){1,3}", value):
        raise AnswerError(
            f"cmake_minimum must be a CMake version such as 3.31.8, got {value!r}.",
            "Leave it out: it follows the release (`tbgen versions` lists each one's).",
        )
    return value


VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "project_name": naming.check_project_name,
    "backend_name": naming.check_backend_name,
    "model_name": naming.check_model_name,
    "triton_version": lambda v: versions.resolve(v).container,
    "dims": parse_dims,
    "max_batch_size": _non_negative("max_batch_size"),
    "instance_count": _positive("instance_count"),
    "instance_kind": _instance_kind,
    "cuda_architectures": _cuda_architectures,
    "cmake_minimum": _cmake_version,
    **{key: signature.check_tensor_name for key in TENSOR_KEYS},
}

# Defaults that follow from other answers through the release matrix rather than from cookiecutter.json.
MATRIX_DEFAULTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "triton_version": lambda answers: versions.default_release().container,
    "cuda_architectures": lambda answers: ";".join(
        versions.resolve(answers["triton_version"]).cuda_architectures
    ),
    "cmake_minimum": lambda answers: versions.resolve(answers["triton_version"]).min_cmake,
}


class Prompter(Protocol):
    """Asks the user for the answers they did not give (the CLI implements it with Rich)."""

    def ask(self, option: Option, default: Any) -> Any: ...

    def show_error(self, error: AnswerError) -> None: ...


def resolve_answers(
    template: Template, given: Mapping[str, Any], prompter: Prompter | None = None
) -> dict[str, Any]:
    """Every option of ``template`` with its final, validated value, in the template's order.

    ``given`` holds what the user set; the rest take their defaults, or are asked for through ``prompter``
    (an invalid answer is shown and asked again).
    """
    _check_known_options(template, given)
    if given.get("sequence", "none") not in ("none", "") and "model_name" not in given:
        given = {**given, "model_name": SEQUENCE_MODEL_NAME}  # not add_sub: the sequence example accumulates
    answers: dict[str, Any] = {}
    for option in template.options:
        if option.key in given:
            answers[option.key] = _validate(option, given[option.key])
        elif prompter is None or not _is_asked(option, answers):
            answers[option.key] = _validate(option, _default(option, answers))
        else:
            answers[option.key] = _ask_until_valid(prompter, option, _default(option, answers))
    check_consistency(template, answers)
    return answers


def _check_known_options(template: Template, given: Mapping[str, Any]) -> None:
    """AnswerError naming the keys of ``given`` that are no option of ``template``."""
    unknown = sorted(set(given) - {o.key for o in template.options})
    if unknown:
        keys = ", ".join(o.key for o in template.options)
        raise AnswerError(
            f"Template {template.name} has no option {', '.join(map(repr, unknown))}.", f"Its options: {keys}"
        )


def _is_asked(option: Option, answers: Mapping[str, Any]) -> bool:
    """Whether a prompt asks for ``option`` (``answers``: those resolved before it): not for the answers of a
    composition or of the release, nor for the add/sub example's once the model has a signature of its own."""
    if option.key in COMPOSE_KEYS or option.key in RELEASE_KEYS:
        return False
    own_signature = bool(answers.get("signature", {}).get("inputs"))
    return not (own_signature and option.key in EXAMPLE_KEYS)


def chosen_answers(template: Template, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Of ``answers`` (a project's, all resolved), those that are not what the defaults give: the user's
    choices. Keys that are no option of ``template`` are kept as they are."""
    chosen: dict[str, Any] = {k: v for k, v in answers.items() if template.option(k) is None}
    resolved: dict[str, Any] = {}
    for option in template.options:
        if option.key not in answers:
            continue
        value = answers[option.key]
        try:
            is_default = _validate(option, value) == _validate(option, _default(option, resolved))
        except (
            UsageError,
            KeyError,
        ):  # an answer, or a default ($TBGEN_TRITON_VERSION's), that does not resolve
            is_default = False
        if not is_default:
            chosen[option.key] = value
        resolved[option.key] = value
    return chosen


def _validate(option: Option, value: Any) -> Any:
    value = coerce(option, value)
    validator = VALIDATORS.get(option.key)
    return validator(value) if validator else value


def _ask_until_valid(prompter: Prompter, option: Option, default: Any) -> Any:
    while True:
        try:
            return _validate(option, prompter.ask(option, default))
        except AnswerError as err:
            prompter.show_error(err)


def _default(option: Option, answers: dict[str, Any]) -> Any:
    if option.key in MATRIX_DEFAULTS:
        return MATRIX_DEFAULTS[option.key](answers)
    if isinstance(option.default, str) and "{{" in option.default:
        # Rendered the way cookiecutter renders it, so plain cookiecutter gives the same defaults.

        return (
            cookiecutter_environment.StrictEnvironment()
            .from_string(option.default)
            .render(cookiecutter=answers)
        )
    return option.default


def _check_sequence(answers: Mapping[str, Any], given: signature.Signature | None, python: bool) -> None:
    """The rules of a sequence model (``sequence`` direct or oldest) and of the options only it takes."""
    sequence = answers.get("sequence", "none")
    if sequence == "none":
        if answers.get("implicit_state"):
            raise AnswerError(
                "implicit_state keeps a sequence's state, so it needs sequence batching.",
                "Add --set sequence=direct (or oldest), or drop --set implicit_state=yes.",
            )
        return
    _check_sequence_options(answers, sequence, python)
    _check_sequence_batching(answers, given, sequence)
    model = given or signature.accumulator(answers.get("dtype", "FP32"), str(answers.get("dims", "16")))
    signature.validate(model, sequence=True, bf16=not python)


def _check_sequence_options(answers: Mapping[str, Any], sequence: str, python: bool) -> None:
    """AnswerError for an option a sequence model cannot take (the add/sub example's, a GPU, a framework)."""
    if answers.get("implicit_state") and python:
        raise AnswerError(
            "The python backend does not support implicit state (it never calls Triton's "
            "TRITONBACKEND_State* API, up to its r26.07 branch).",
            "Drop --set implicit_state=yes: the generated model.py keeps each sequence's state itself; or "
            "use the cpp-backend template.",
        )
    for key in ("native", "python_based_backend", "auto_complete"):
        if answers.get(key):
            raise AnswerError(
                f"{key} is a stateless add/sub option; a sequence model cannot take it.",
                f"Drop --set {key}=yes, or --set sequence={sequence}.",
            )
    if answers.get("gpu"):
        raise AnswerError(
            "The sequence example has no CUDA kernel: its running sums are kept and added on the CPU.",
            "Drop --gpu (a KIND_GPU instance group can still be set in config.pbtxt).",
        )
    if (
        answers.get("framework", frameworks.NONE) != frameworks.NONE
        or answers.get("pattern", "none") != "none"
    ):
        raise AnswerError(
            "A sequence model is the backend's own accumulator; it cannot wrap a framework or compose "
            "models.",
            f"Drop --framework/--pattern, or --set sequence={sequence}.",
        )


def _check_sequence_batching(
    answers: Mapping[str, Any], given: signature.Signature | None, sequence: str
) -> None:
    """AnswerError when a sequence model's batching cannot be written: an imported config brings its own, or
    the oldest strategy has no batch dimension."""
    if given is not None and given.config:
        raise AnswerError(
            "--from-config carries its own batching; a sequence model writes sequence_batching.",
            "Give the tensors with --input/--output instead, or drop --set sequence.",
        )
    if sequence == "oldest" and int(answers.get("max_batch_size", 0)) < 1:
        raise AnswerError(
            "The oldest strategy batches requests of several sequences, so it needs max_batch_size >= 1.",
            "Use --set max_batch_size=8, or --set sequence=direct.",
        )


def check_consistency(template: Template, answers: Mapping[str, Any]) -> None:
    """Rules that span several answers."""
    _check_cmake_minimum(answers)
    if answers.get("custom_metrics") and answers.get("pattern", "none") != "none":
        raise AnswerError(
            "custom_metrics instruments a model that computes; the C++ BLS router only forwards "
            "requests and answers them in completion callbacks.",
            "Drop --set custom_metrics=yes or --pattern bls; `tbgen add model` with --set custom_metrics=yes "
            "adds an instrumented model to the project once it exists.",
        )
    given = signature.from_context(answers.get("signature"))
    python = template.name == "python-backend" or answers.get("language") == "python"
    _check_batch_strategy(answers, given)
    _check_sequence(answers, given, python)
    if answers.get("sequence", "none") != "none":
        return
    _check_framework(answers, given)
    if given is not None:
        _check_own_signature(answers, given, python)
        return  # the add/sub answers (dtype, dims, tensor names) are not used
    _check_example_answers(answers)
    if answers.get("instance_kind") == "KIND_GPU" and "gpu" in answers and not answers["gpu"]:
        raise AnswerError(
            "instance_kind KIND_GPU needs a GPU build, but gpu is off.",
            "Pass --gpu, or keep --set instance_kind=KIND_CPU.",
        )


def _check_batch_strategy(answers: Mapping[str, Any], given: signature.Signature | None) -> None:
    """AnswerError when a batching strategy (batch_strategy, batch_limit, batch_input) cannot be wired: Triton
    refuses one beside sequence batching, and it decides only the batches of a dynamic batcher."""
    strategy = answers.get("batch_strategy", "none")
    if strategy == "none":
        for key, unset in (("batch_limit", 0), ("batch_input", "")):
            if answers.get(key, unset) != unset:
                raise AnswerError(
                    f"{key} sets up a batching strategy, and batch_strategy is none.",
                    f"Add --set batch_strategy=tokens (or volume, custom), or drop --set {key}.",
                )
        return
    problem = _batch_strategy_problem(answers)
    if problem:
        raise AnswerError(f"batch_strategy={strategy}: {problem[0]}", problem[1])
    inputs = (
        [t.name for t in given.inputs]
        if given is not None
        else [answers.get("input0_name", "INPUT0"), answers.get("input1_name", "INPUT1")]
    )
    chosen = answers.get("batch_input", "")
    if chosen and (strategy not in ("tokens", "custom") or chosen not in inputs):
        raise AnswerError(
            f"batch_input={chosen!r} names the input whose elements tokens (or custom) counts; "
            + (
                f"the model's inputs are {', '.join(inputs)}."
                if strategy in ("tokens", "custom")
                else f"batch_strategy={strategy} counts none."
            ),
            f"Example: --set batch_strategy=tokens --set batch_input={inputs[0]}",
        )


def _batch_strategy_problem(answers: Mapping[str, Any]) -> tuple[str, str] | None:
    """(problem, fix) when the model cannot take a batching strategy, else None."""
    if answers.get("sequence", "none") != "none":
        return (
            "Triton refuses a batching strategy beside sequence batching (the model's load fails).",
            "Drop --set sequence, or --set batch_strategy.",
        )
    if int(answers.get("max_batch_size", 0)) < 1:
        return (
            "a model with max_batch_size 0 forms no batches for a strategy to decide.",
            "Use --set max_batch_size=8, or drop --set batch_strategy.",
        )
    if not answers.get("dynamic_batching", True):
        return (
            "the strategy decides the batches of Triton's dynamic batcher, and dynamic_batching is off.",
            "Drop --set dynamic_batching=no.",
        )
    if answers.get("pattern", "none") != "none":
        return (
            "a BLS router forwards each request as it comes; its callees are the models that batch.",
            "Drop --set batch_strategy; in the project, `tbgen add batcher` gives a callee one.",
        )
    if int(answers.get("batch_limit", 0)) < 0:
        return (
            "batch_limit must be 0 (sized for the example's requests) or more.",
            "Example: --set batch_limit=4096",
        )
    return None


def _check_cmake_minimum(answers: Mapping[str, Any]) -> None:
    """AnswerError when cmake_minimum is older than the CMake the release's sources need."""
    if "cmake_minimum" not in answers:
        return
    needed = versions.resolve(answers["triton_version"]).min_cmake
    if versions.version_tuple(answers["cmake_minimum"]) < versions.version_tuple(needed):
        raise AnswerError(
            f"Triton's r{answers['triton_version']} sources need CMake {needed} or newer; "
            f"cmake_minimum {answers['cmake_minimum']} is older.",
            "Leave cmake_minimum out: it follows the release.",
        )


def _check_framework(answers: Mapping[str, Any], given: signature.Signature | None) -> None:
    """AnswerError when the framework cannot serve the model's tensors (``given``, else the add/sub
    example's)."""
    framework = answers.get("framework", frameworks.NONE)
    if framework == frameworks.NONE:
        return
    example = given is None and signature.add_sub(
        answers.get("dtype", "FP32"),
        str(answers.get("dims", "16")),
        {k: answers.get(k, k.upper().replace("_NAME", "")) for k in TENSOR_KEYS},
    )
    frameworks.check_signature(
        framework, given or example, own=given is not None, batching=int(answers.get("max_batch_size", 0)) > 0
    )


def _check_own_signature(answers: Mapping[str, Any], given: signature.Signature, python: bool) -> None:
    """AnswerError when the user's own signature breaks a rule, or comes with an option only the add/sub
    example has."""
    signature.validate(given, bf16=not python)
    if python and (answers.get("native") or answers.get("python_based_backend")):
        option = "native" if answers.get("native") else "python_based_backend"
        raise AnswerError(
            f"{option} is an add/sub example and cannot serve a signature of your own.",
            f"Drop --set {option}=yes, or the --input/--output tensors.",
        )


def _check_example_answers(answers: Mapping[str, Any]) -> None:
    """AnswerError when the add/sub example's answers do not fit: native's dtypes, distinct tensor names."""
    if answers.get("native") and answers.get("dtype") not in NATIVE_DTYPES:
        raise AnswerError(
            f"native (the pybind11 add/sub) is written for {', '.join(NATIVE_DTYPES)}, not "
            f"{answers.get('dtype')}.",
            "Pick one of those dtypes, or drop --set native=yes.",
        )
    tensors = [answers[k] for k in TENSOR_KEYS if k in answers]
    duplicates = sorted({t for t in tensors if tensors.count(t) > 1})
    if duplicates:
        raise AnswerError(
            f"Tensor names must be distinct; {', '.join(duplicates)} is used twice.",
            "Example: --set input0_name=A --set input1_name=B --set output0_name=SUM --set output1_name=DIFF",
        )
