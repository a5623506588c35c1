"""A model's tensor signature: its inputs and outputs, typed and validated before anything is written.

Every way of giving a signature ends here: ``--input``/``--output`` flags (:func:`parse_tensor`), the
``[[models.inputs]]``/``[[models.outputs]]`` tables of an answers file or tbgen.toml (:func:`from_tables`),
an imported config.pbtxt (model_config.importing) and the terminal prompts. :meth:`Signature.context` is what
the templates receive (the cookiecutter variable ``signature``); an empty one means the add/sub example.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from triton_backend_gen.errors import AnswerError

_TENSOR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INT64_MAX = 2**63 - 1
FLAG_GRAMMAR = "NAME:DTYPE:DIMS[:optional], DIMS comma-separated sizes with -1 for a variable one"
FLAG_EXAMPLE = "--input TEXT:BYTES:1 --input IMG:FP16:3,224,224 --output SCORES:FP32:-1"


@dataclass(frozen=True)
class DataType:
    """One Triton datatype under its three names, with its element size (0: variable, BYTES)."""

    wire: str  # the protocol's name: "FP32", "BYTES"
    config: str  # config.pbtxt's: "TYPE_FP32", "TYPE_STRING"
    numpy: str  # the numpy dtype clients use ("object" for BYTES; BF16 travels as float32)
    size: int


DATATYPES: dict[str, DataType] = {
    d.wire: d
    for d in (
        DataType("BOOL", "TYPE_BOOL", "bool", 1),
        DataType("UINT8", "TYPE_UINT8", "uint8", 1),
        DataType("UINT16", "TYPE_UINT16", "uint16", 2),
        DataType("UINT32", "TYPE_UINT32", "uint32", 4),
        DataType("UINT64", "TYPE_UINT64", "uint64", 8),
        DataType("INT8", "TYPE_INT8", "int8", 1),
        DataType("INT16", "TYPE_INT16", "int16", 2),
        DataType("INT32", "TYPE_INT32", "int32", 4),
        DataType("INT64", "TYPE_INT64", "int64", 8),
        DataType("FP16", "TYPE_FP16", "float16", 2),
        DataType("BF16", "TYPE_BF16", "float32", 2),
        DataType("FP32", "TYPE_FP32", "float32", 4),
        DataType("FP64", "TYPE_FP64", "float64", 8),
        DataType("BYTES", "TYPE_STRING", "object", 0),
    )
}
# Control inputs the sequence batcher adds by its default names; a tensor of the model may not take them.
SEQUENCE_CONTROL_NAMES = ("START", "END", "READY", "CORRID")
# The implicit state's input and output names (config.pbtxt's sequence_batching.state).
STATE_NAMES = ("STATE_IN", "STATE_OUT")


def datatype(name: str) -> DataType:
    """``name`` as a wire name ("fp16", "TYPE_FP16" and "STRING" are accepted)."""
    key = str(name).strip().upper().removeprefix("TYPE_")
    key = "BYTES" if key == "STRING" else key
    if key not in DATATYPES:
        raise AnswerError(
            f"Unknown datatype {name!r}.", f"Use one of {', '.join(DATATYPES)} (e.g. IMG:FP16:3,224,224)."
        )
    return DATATYPES[key]


def check_tensor_name(name: str) -> str:
    if not isinstance(name, str) or not _TENSOR_NAME.fullmatch(name):
        raise AnswerError(
            f"Invalid tensor name {name!r}: use letters, digits and '_', not starting with a digit.",
            "Example: INPUT0",
        )
    return name


def parse_dims(value: Any, *, what: str = "dims", allow_empty: bool = False) -> tuple[int, ...]:
    """Dims from "3,224,224", "[3, 224, 224]", "-1" or a list; each a positive size or -1 (variable)."""
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value]
    else:
        text = str(value).replace(" ", "").strip("[]")
        parts = text.split(",") if text else []
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = None
    if dims is None or not _valid_dims(dims, allow_empty=allow_empty):
        raise AnswerError(
            f"{what} must be a comma-separated list of positive sizes or -1 (variable), got {value!r}.",
            "Examples: 16, 3,224,224, -1",
        )
    return dims


def _valid_dims(dims: tuple[int, ...], *, allow_empty: bool) -> bool:
    """Whether ``dims`` is a shape: each a positive size (an int64) or -1, and some unless ``allow_empty``."""
    if not dims:
        return allow_empty
    return all(d == -1 or 0 < d <= INT64_MAX for d in dims)


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str  # wire name
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False  # inputs only
    reshape: tuple[int, ...] | None = None  # the shape the backend sees, when config.pbtxt reshapes
    label_filename: str | None = None  # outputs only: classification labels beside config.pbtxt

    @property
    def type(self) -> DataType:
        return DATATYPES[self.datatype]

    @property
    def backend_dims(self) -> tuple[int, ...]:
        """The dims the backend sees (reshape's when there is one)."""
        return self.reshape if self.reshape is not None else self.dims

    def flag(self) -> str:
        """The tensor as a --input/--output flag value."""
        text = f"{self.name}:{self.datatype}:{','.join(map(str, self.dims))}"
        return text + (":optional" if self.optional else "")

    def table(self) -> dict[str, Any]:
        """The tensor as a [[models.inputs]] table / cookiecutter entry (dims as a list of ints)."""
        table: dict[str, Any] = {"name": self.name, "datatype": self.datatype, "dims": list(self.dims)}
        if self.optional:
            table["optional"] = True
        if self.reshape is not None:
            table["reshape"] = list(self.reshape)
        if self.label_filename:
            table["label_filename"] = self.label_filename
        return table


@dataclass(frozen=True)
class Signature:
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    # config.pbtxt fields carried over verbatim from an imported configuration (batching, instance groups ...)
    config: str = ""

    def context(self) -> dict[str, Any]:
        """The cookiecutter variable ``signature``."""
        return {
            "inputs": [t.table() for t in self.inputs],
            "outputs": [t.table() for t in self.outputs],
            "config": self.config,
        }

    def describe(self) -> str:
        def side(tensors: Iterable[Tensor]) -> str:
            return ", ".join(t.flag() for t in tensors)

        return f"{side(self.inputs)} -> {side(self.outputs)}"


EMPTY = {"inputs": [], "outputs": [], "config": ""}


def parse_tensor(text: str, *, output: bool = False) -> Tensor:
    """One ``--input``/``--output`` value: ``NAME:DTYPE:DIMS[:optional]``."""
    flag = "--output" if output else "--input"
    parts = str(text).strip().split(":")
    if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3].strip().lower() != "optional"):
        raise AnswerError(f"{flag} {text!r} does not read as {FLAG_GRAMMAR}.", f"Example: {FLAG_EXAMPLE}")
    if len(parts) == 4 and output:
        raise AnswerError(
            f"--output {text!r}: outputs cannot be optional.", "Drop ':optional' from the output."
        )
    name, dtype, dims = (p.strip() for p in parts[:3])
    return Tensor(
        check_tensor_name(name),
        datatype(dtype).wire,
        parse_dims(dims, what=f"{flag} {name} dims"),
        len(parts) == 4,
    )


def from_flags(inputs: Iterable[str], outputs: Iterable[str]) -> Signature | None:
    """The signature of ``--input``/``--output`` flags; None when neither is given."""
    inputs, outputs = list(inputs), list(outputs)
    if not inputs and not outputs:
        return None
    if not inputs or not outputs:
        given, missing = ("--input", "--output") if inputs else ("--output", "--input")
        raise AnswerError(
            f"{given} was given without {missing}: a signature needs both inputs and outputs.",
            f"Example: {FLAG_EXAMPLE}",
        )
    return Signature(
        tuple(parse_tensor(t) for t in inputs), tuple(parse_tensor(t, output=True) for t in outputs)
    )


def _tensor_from_table(table: Any, where: str, *, output: bool) -> Tensor:
    """One [[models.inputs]]/[[models.outputs]] table (``where`` names it in errors) as a Tensor."""
    _check_table_keys(table, where)
    optional = table.get("optional", False)
    if not isinstance(optional, bool):
        raise AnswerError(
            f"{where}: optional must be true or false, got {optional!r}.", "Example: optional = true"
        )
    if optional and output:
        raise AnswerError(f"{where}: outputs cannot be optional.", "Drop optional from the output.")
    name = check_tensor_name(table["name"])
    reshape = table.get("reshape")
    label = _label_filename(table.get("label_filename"), where, output=output)
    return Tensor(
        name,
        datatype(table["datatype"]).wire,
        parse_dims(table["dims"], what=f"{where} dims"),
        optional,
        None if reshape is None else parse_dims(reshape, what=f"{where} reshape", allow_empty=True),
        label,
    )


def _check_table_keys(table: Any, where: str) -> None:
    """AnswerError unless ``table`` is a table with name, datatype and dims, and no key a tensor does not
    have."""
    example = 'Example: { name = "TEXT", datatype = "BYTES", dims = [1] }'
    if not isinstance(table, Mapping):
        raise AnswerError(f"{where} must be a table with name, datatype and dims, got {table!r}.", example)
    unknown = sorted(set(table) - {"name", "datatype", "dims", "optional", "reshape", "label_filename"})
    if unknown:
        raise AnswerError(
            f"{where} has unknown keys {', '.join(unknown)}.",
            "A tensor has name, datatype, dims, and optional (inputs) or label_filename (outputs).",
        )
    missing = next((key for key in ("name", "datatype", "dims") if key not in table), None)
    if missing is not None:
        raise AnswerError(f"{where} lacks {missing}.", example)


def _label_filename(label: Any, where: str, *, output: bool) -> str | None:
    """A table's label_filename: None, or on an output, the name of a file beside config.pbtxt."""
    if label is not None and (not output or not isinstance(label, str) or "/" in label or not label.strip()):
        raise AnswerError(
            f"{where}: label_filename must be a file name, on an output.", 'Example: "labels.txt"'
        )
    return label


def from_tables(inputs: Any, outputs: Any, where: str = "signature") -> Signature:
    """The signature of ``[[models.inputs]]``/``[[models.outputs]]`` tables (or the cookiecutter variable)."""
    for key, value in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(value, list):
            raise AnswerError(
                f"{where}.{key} must be a list of tables, got {value!r}.",
                f'Example: [[models.{key}]] name = "X" datatype = "FP32" dims = [4]',
            )
    return Signature(
        tuple(_tensor_from_table(t, f"{where}.inputs[{i}]", output=False) for i, t in enumerate(inputs)),
        tuple(_tensor_from_table(t, f"{where}.outputs[{i}]", output=True) for i, t in enumerate(outputs)),
    )


def from_context(value: Any, where: str = "signature") -> Signature | None:
    """The cookiecutter variable (``{"inputs": [...], "outputs": [...]}``) as a Signature; None when empty."""
    if value in (None, "", {}) or (
        isinstance(value, Mapping) and not value.get("inputs") and not value.get("outputs")
    ):
        return None
    if not isinstance(value, Mapping) or set(value) - {"inputs", "outputs", "config"}:
        raise AnswerError(
            f"{where} must be a table with inputs and outputs, got {value!r}.",
            f"Give tensors with {FLAG_EXAMPLE}.",
        )
    config = value.get("config", "")
    if not isinstance(config, str):
        raise AnswerError(
            f"{where}.config must be config.pbtxt text, got {config!r}.",
            'Example: config = "dynamic_batching { }"',
        )
    signature = from_tables(value.get("inputs", []), value.get("outputs", []), where)
    return Signature(signature.inputs, signature.outputs, config)


def validate(signature: Signature, *, sequence: bool = False, bf16: bool = True) -> Signature:
    """The rules every generated backend relies on; the signature itself when it keeps them all.

    ``sequence``: the model has sequence batching (its control inputs take START/END/READY/CORRID, the
    implicit state STATE_IN/STATE_OUT) and is the accumulator (:func:`check_accumulator`).
    ``bf16``: the backend can serve BF16 (the python backend cannot: its numpy has no bfloat16).
    """
    _check_tensors_named_apart(signature)
    if all(t.optional for t in signature.inputs):
        raise AnswerError(
            "Every input is optional: at least one must be required (a request's batch size comes from it).",
            "Drop :optional from one input.",
        )
    if sequence:
        _check_sequence_names(signature)
        check_accumulator(signature)
    if not bf16:
        _check_no_bf16(signature)
    for tensor in (*signature.inputs, *signature.outputs):
        _check_reshape(tensor)
    return signature


def _check_tensors_named_apart(signature: Signature) -> None:
    """AnswerError unless the signature has inputs and outputs, each tensor with a name of its own."""
    example = f"Example: {FLAG_EXAMPLE}"
    if not signature.inputs or not signature.outputs:
        raise AnswerError("A signature needs at least one input and one output.", example)
    names = [t.name for t in (*signature.inputs, *signature.outputs)]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise AnswerError(f"Tensor names must be distinct; {', '.join(duplicates)} is used twice.", example)


def _check_sequence_names(signature: Signature) -> None:
    """AnswerError for a tensor named as a control input or the implicit state of the sequence batcher."""
    names = [t.name for t in (*signature.inputs, *signature.outputs)]
    clashes = [n for n in names if n in SEQUENCE_CONTROL_NAMES + STATE_NAMES]
    if clashes:
        raise AnswerError(
            f"{', '.join(clashes)}: the sequence batcher's control inputs and implicit state take these "
            "names.",
            "Rename the tensor (e.g. START -> START_TOKENS).",
        )


def _check_no_bf16(signature: Signature) -> None:
    """AnswerError for a BF16 tensor (the python backend cannot serve one)."""
    bf16_names = [t.name for t in (*signature.inputs, *signature.outputs) if t.datatype == "BF16"]
    if bf16_names:
        raise AnswerError(
            f"{', '.join(bf16_names)}: the python backend cannot serve BF16 (its tensors are numpy arrays, "
            "and numpy has no bfloat16).",
            "Use FP16 or FP32, or the cpp-backend template, which serves BF16.",
        )


def _check_reshape(tensor: Tensor) -> None:
    """AnswerError for a reshape that holds another number of elements than the dims (known when neither
    has a variable dimension)."""
    if tensor.reshape is None or -1 in (*tensor.dims, *tensor.reshape):
        return
    if _count(tensor.reshape) != _count(tensor.dims):
        raise AnswerError(
            f"{tensor.name}: reshape {list(tensor.reshape)} has another element count than dims "
            f"{list(tensor.dims)}.",
            "A reshape keeps the number of elements.",
        )


def _count(dims: Iterable[int]) -> int:
    count = 1
    for d in dims:
        count *= d
    return count


def add_sub(dtype: str, dims: str, names: Mapping[str, str]) -> Signature:
    """The add/sub example's signature: two inputs, their sum and difference, one dtype and dims."""
    shape = parse_dims(dims)

    def tensor(key: str) -> Tensor:
        return Tensor(names[key], datatype(dtype).wire, shape)

    return Signature(
        (tensor("input0_name"), tensor("input1_name")), (tensor("output0_name"), tensor("output1_name"))
    )


def check_accumulator(signature: Signature) -> None:
    """A sequence model's rules: every output is the running sum of the first input, so that input is numeric
    with fixed dims and every output has its datatype and dims."""
    first = signature.inputs[0]
    fix = (
        "Example: --input INPUT:FP32:16 --output OUTPUT:FP32:16 (every output the running sum of the first "
        "input)"
    )
    if first.datatype in ("BYTES", "BOOL"):
        raise AnswerError(
            f"{first.name}: a sequence model sums its first input, which cannot be {first.datatype}.", fix
        )
    if -1 in first.dims or first.optional or first.reshape is not None:
        raise AnswerError(
            f"{first.name}: a sequence model sums its first input, which needs fixed dims (no -1), "
            "no reshape and cannot be optional (every request of a sequence adds to the same sum).",
            fix,
        )
    for output in signature.outputs:
        if output.datatype != first.datatype or tuple(output.dims) != tuple(first.dims):
            raise AnswerError(
                f"{output.name}: every output of a sequence model is the running sum of {first.name}, so "
                f"it needs {first.name}'s datatype and dims ({first.datatype} {list(first.dims)}), got "
                f"{output.datatype} {list(output.dims)}.",
                fix,
            )


def accumulator(dtype: str, dims: str) -> Signature:
    """The sequence example's signature: INPUT, and OUTPUT its running sum, of one dtype and dims."""
    shape = parse_dims(dims)
    wire = datatype(dtype).wire
    return Signature((Tensor("INPUT", wire, shape),), (Tensor("OUTPUT", wire, shape),))
