"""Answers: typed and validated before anything is written.

Layers, highest first: what the user gave (flags, ``--set``, interactive prompts), an answers file, the template's
defaults. Defaults that depend on the Triton release (the CUDA architecture list) come from the release matrix,
so that choosing ``--triton-version`` moves them too.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from cookiecutter.environment import StrictEnvironment

from triton_backend_gen import versions
from triton_backend_gen.errors import AnswerError, UsageError
from triton_backend_gen.scaffold import naming
from triton_backend_gen.scaffold.templates import Option, Template

_TRUE = {"y", "yes", "true", "on", "1"}
_FALSE = {"n", "no", "false", "off", "0"}
INSTANCE_KINDS = ("KIND_CPU", "KIND_GPU")
TENSOR_KEYS = ("input0_name", "input1_name", "output0_name", "output1_name")
# Limits of the model configuration's fields: max_batch_size and instance counts are int32, dims int64.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
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
    """Answers from a file: a project's tbgen.toml (its [answers], and its template as ``template``), a TOML
    file of answers, or a JSON object."""
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as err:
        raise UsageError(f"Cannot read answers from {path}: {err}", "Pass a tbgen.toml, or a TOML or JSON file.") from err
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a table of answers.", 'Example (TOML): dtype = "FP16"')
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
        return {**answers, "template": template} if template else answers
    return dict(data)


def coerce(option: Option, value: Any) -> Any:
    """``value`` converted to the option's type (strings from the command line included)."""
    if option.kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise AnswerError(f"{option.key} must be a boolean, got {value!r}.", f"Example: --set {option.key}=yes")
    if option.kind is int:
        if isinstance(value, bool):
            raise AnswerError(f"{option.key} must be an integer, got {value!r}.", f"Example: --set {option.key}=8")
        try:
            return int(str(value).strip())
        except ValueError:
            raise AnswerError(
                f"{option.key} must be an integer, got {value!r}.", f"Example: --set {option.key}=8"
            ) from None
    text = str(value).strip()
    if option.choices and text not in option.choices:
        # Choices are matched case-insensitively (fp16 -> FP16) but must exist.
        match = next((c for c in option.choices if c.lower() == text.lower()), None)
        if match is None:
            raise AnswerError(
                f"{option.key} must be one of {', '.join(option.choices)}; got {value!r}.",
                f"Example: --set {option.key}={option.choices[0]}",
            )
        text = match
    return text


def parse_dims(value: str) -> str:
    """Dims as written in answers: comma-separated, each positive or -1 ("16", "2,3", "-1")."""
    parts = [p.strip() for p in str(value).replace(" ", "").strip("[]").split(",")]
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if not dims or any(d == 0 or d < -1 or d > INT64_MAX for d in dims):
        raise AnswerError(
            f"dims must be a comma-separated list of positive sizes or -1 (variable), got {value!r}.",
            "Examples: --set dims=16, --set dims=2,3, --set dims=-1",
        )
    return ",".join(str(d) for d in dims)


def _non_negative(key: str) -> Callable[[int], int]:
    def check(value: int) -> int:
        if value < 0:
            raise AnswerError(f"{key} must be 0 or more (0 disables batching), got {value}.", f"Example: --set {key}=8")
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
            f"instance_kind must be one of {', '.join(INSTANCE_KINDS)}, got {value!r}.", "Example: --set instance_kind=KIND_CPU"
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
    **{key: naming.check_tensor_name for key in TENSOR_KEYS},
}

# Defaults that follow from other answers through the release matrix rather than from cookiecutter.json.
MATRIX_DEFAULTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "triton_version": lambda answers: versions.newest().container,
    "cuda_architectures": lambda answers: ";".join(versions.resolve(answers["triton_version"]).cuda_architectures),
}

class Prompter(Protocol):
    """Asks the user for the answers they did not give (the CLI implements it with Rich)."""

    def ask(self, option: Option, default: Any) -> Any: ...

    def show_error(self, error: AnswerError) -> None: ...


def resolve_answers(template: Template, given: Mapping[str, Any], prompter: Prompter | None = None) -> dict[str, Any]:
    """Every option of ``template`` with its final, validated value, in the template's order.

    ``given`` holds what the user set; the rest take their defaults, or are asked for through ``prompter``
    (an invalid answer is shown and asked again).
    """
    unknown = sorted(set(given) - {o.key for o in template.options})
    if unknown:
        keys = ", ".join(o.key for o in template.options)
        raise AnswerError(
            f"Template {template.name} has no option {', '.join(map(repr, unknown))}.", f"Its options: {keys}"
        )
    answers: dict[str, Any] = {}
    for option in template.options:
        if option.key in given:
            answers[option.key] = _validate(option, given[option.key])
            continue
        default = _default(option, answers)
        if prompter is None:
            answers[option.key] = _validate(option, default)
        else:
            answers[option.key] = _ask_until_valid(prompter, option, default)
    check_consistency(template, answers)
    return answers


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

        return StrictEnvironment().from_string(option.default).render(cookiecutter=answers)
    return option.default


def check_consistency(template: Template, answers: Mapping[str, Any]) -> None:
    """Rules that span several answers."""
    tensors = [answers[k] for k in TENSOR_KEYS if k in answers]
    duplicates = sorted({t for t in tensors if tensors.count(t) > 1})
    if duplicates:
        raise AnswerError(
            f"Tensor names must be distinct; {', '.join(duplicates)} is used twice.",
            "Example: --set input0_name=A --set input1_name=B --set output0_name=SUM --set output1_name=DIFF",
        )
    if answers.get("instance_kind") == "KIND_GPU" and "gpu" in answers and not answers["gpu"]:
        raise AnswerError(
            "instance_kind KIND_GPU needs a GPU build, but gpu is off.",
            "Pass --gpu, or keep --set instance_kind=KIND_CPU.",
        )
