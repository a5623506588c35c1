"""Reading a config file, parsing it with the ModelConfig schema, and explaining protobuf's parse errors."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.lazy import lazy_module

text_format = lazy_module("google.protobuf.text_format")
model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

# Data type names users write from other frameworks, and the ModelConfig name they mean.
_DTYPE_ALIASES = {
    "TYPE_BYTES": "TYPE_STRING",
    "BYTES": "TYPE_STRING",
    "TYPE_FLOAT": "TYPE_FP32",
    "TYPE_FLOAT32": "TYPE_FP32",
    "TYPE_FLOAT16": "TYPE_FP16",
    "TYPE_HALF": "TYPE_FP16",
    "TYPE_DOUBLE": "TYPE_FP64",
    "TYPE_FLOAT64": "TYPE_FP64",
    "TYPE_BFLOAT16": "TYPE_BF16",
    "TYPE_INT": "TYPE_INT32",
    "TYPE_LONG": "TYPE_INT64",
}


def load_model_config(path: Path) -> ModelConfig:
    """The ModelConfig in ``path``; raises ConfigError when the file is unreadable or not a valid config."""
    text = read_text(path)
    try:
        return parse_text(text)
    except text_format.ParseError as err:
        line, message = explain_parse_error(err)
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(
            f"{where}: {message}", "Fix the file; `tbgen validate` lists every problem."
        ) from err


def read_text(path: Path) -> str:
    """The text of ``path``; raises ConfigError when it cannot be read as UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(
            f"{path}: cannot read the model configuration: {err}", "Check the path and its permissions."
        ) from err


def parse_text(text: str) -> ModelConfig:
    """The ModelConfig in ``text``; raises protobuf's ``text_format.ParseError``."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def explain_parse_error(err: Exception) -> tuple[int | None, str]:
    """(line, message) for a protobuf ParseError, the message made clearer where we know how."""
    line = err.GetLine() if hasattr(err, "GetLine") else None
    column = err.GetColumn() if hasattr(err, "GetColumn") else None
    raw = re.sub(r"^\d+:\d+ : ", "", str(err))
    # Errors that quote the offending line repeat it before the reason: keep the reason only.
    raw = re.sub(r"^'.*?': (?=[A-Z])", "", raw).rstrip(".")
    message = f"column {column}: {raw}" if column else raw
    for explain in _EXPLAINERS:
        clearer = explain(raw, message)
        if clearer is not None:
            return line, clearer
    return line, message


# Each takes (the parser's reason, the message with its column) and returns a clearer message for the errors
# it knows, else None.


def _explain_oneof(raw: str, message: str) -> str | None:
    """Two members of one oneof, above all two schedulers."""
    oneof = re.search(
        r'Field "(\w+)" is specified along with field "(\w+)", another member of oneof "(\w+)"', raw
    )
    if not oneof:
        return None
    second, first = oneof.group(1), oneof.group(2)
    if {first, second} <= {"dynamic_batching", "sequence_batching", "ensemble_scheduling"}:
        return (
            f"{second} is set together with {first}; a model has exactly one scheduler: keep one of them "
            "(sequence_batching already batches requests of different sequences)"
        )
    return f"{second} is set together with {first}, but only one of them may be set; keep one"


def _explain_unknown_field(raw: str, message: str) -> str | None:
    """A field the message does not have: the closest name it has."""
    unknown_field = re.search(r'Message type "([\w.]+)" has no field named "(\w+)"', raw)
    if not unknown_field:
        return None
    names = _schema_names(unknown_field.group(1), enum=False)
    close = difflib.get_close_matches(unknown_field.group(2), names, n=1)
    hint = f"; did you mean {close[0]}?" if close else "; see the ModelConfig reference for the field names"
    return f"{message}{hint}"


def _explain_unknown_enum(raw: str, message: str) -> str | None:
    """A value the enum does not have: the value meant (data type aliases first), and for a data type the
    valid ones."""
    unknown_enum = re.search(r'Enum type "([\w.]+)" has no value named (\w+)', raw)
    if not unknown_enum:
        return None
    enum, value = unknown_enum.groups()
    values = _schema_names(enum, enum=True)
    guess = None
    if enum == "inference.DataType":
        guess = _DTYPE_ALIASES.get(value) or (f"TYPE_{value}" if f"TYPE_{value}" in values else None)
    close = [guess] if guess else difflib.get_close_matches(value, values, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    if enum == "inference.DataType":
        hint += " Valid data types: " + ", ".join(v for v in values if v != "TYPE_INVALID")
    return f"{message}{hint}"


def _explain_repeated(raw: str, message: str) -> str | None:
    """A single-valued field set twice."""
    repeated = re.search(r'should not have multiple "(\w+)" fields', raw)
    if not repeated:
        return None
    return f"{repeated.group(1)} is set more than once; it takes a single value, keep one"


_EXPLAINERS = (_explain_oneof, _explain_unknown_field, _explain_unknown_enum, _explain_repeated)


def _schema_names(full_name: str, *, enum: bool) -> list[str]:
    """The value names of enum ``full_name``, or the field names of message ``full_name``; [] if unknown."""
    pool = model_config_pb2.DESCRIPTOR.pool
    try:
        if enum:
            return [v.name for v in pool.FindEnumTypeByName(full_name).values]
        return [f.name for f in pool.FindMessageTypeByName(full_name).fields]
    except KeyError:
        return []
