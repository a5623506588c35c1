"""tbgen's Jinja extension: what its templates compute, in Python rather than in Jinja control lines.

cookiecutter loads it by the name in each template's cookiecutter.json (`"_extensions":
["local_extensions.TbgenExtension"]`), importing this module from the template's directory, where a relative
link points here (templates/_shared/local_extensions.py); tbgen's renderer puts that directory on sys.path
as cookiecutter does. The templates read it through two thin pieces: signature.j2 (the tensor signature) and
cpp_names.j2 (C++ member names, calls laid out as clang-format would).
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Mapping
from typing import Any

from jinja2.ext import Extension

# Per wire datatype: the C++ element type (FP16/BF16 as their uint16_t bits, BYTES none), the numpy dtype
# clients use, the element size in bytes (0: variable).
CTYPES = {
    "BOOL": "bool", "UINT8": "uint8_t", "UINT16": "uint16_t", "UINT32": "uint32_t", "UINT64": "uint64_t",
    "INT8": "int8_t", "INT16": "int16_t", "INT32": "int32_t", "INT64": "int64_t",
    "FP16": "uint16_t", "BF16": "uint16_t", "FP32": "float", "FP64": "double", "BYTES": "",
}  # fmt: skip
NUMPY = {
    "BOOL": "bool_", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "FP16": "float16", "BF16": "float32", "FP32": "float32", "FP64": "float64", "BYTES": "object_",
}  # fmt: skip
SIZES = {
    "BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8, "INT8": 1, "INT16": 2, "INT32": 4,
    "INT64": 8, "FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8, "BYTES": 0,
}  # fmt: skip

# Names C++ or the headers the backend includes reserve (keywords, macros, the types the generated structs
# use): a tensor's member of that name gets a trailing underscore.
CPP_RESERVED = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
    decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
    goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
    protected public register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned
    using virtual void volatile wchar_t while xor xor_eq
    NULL EOF BUFSIZ CHAR_BIT errno stdin stdout stderr linux unix i386 assert offsetof major minor makedev
    SIZE_MAX int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t std
    TensorView BytesView TensorOutput BytesOutput Inputs Outputs
    """.split()
)
COLUMN_LIMIT = 80  # Triton's .clang-format
# The first release of each change in Triton's code that the generated plumbing follows: tbgen's release
# matrix (triton_backend_gen/versions.py FEATURES) holds the same, with where each was read; a test keeps the
# two equal. Here so that plain cookiecutter, without tbgen, renders what `tbgen new` renders.
FEATURES_SINCE = {
    "checked_counts": "25.05",  # backend_common.h: GetElementCount/GetByteSize returning errors
    "instance_ready": "25.12",  # core asks TRITONBACKEND_ModelInstanceReady on readiness probes
    "python_is_ready": "26.03",  # python_backend asks a model's is_ready() on readiness probes
}
# decoupled-backend's example without a signature: the tensors of Triton's repeat example.
REPEAT_INPUTS = [
    {"name": "IN", "datatype": "INT32", "dims": "-1"},
    {"name": "DELAY", "datatype": "UINT32", "dims": "-1"},
    {"name": "WAIT", "datatype": "UINT32", "dims": "1"},
]
REPEAT_OUTPUTS = [
    {"name": "OUT", "datatype": "INT32", "dims": "1"},
    {"name": "IDX", "datatype": "UINT32", "dims": "1"},
]


def tensor_signature(cookiecutter: Mapping[str, Any]) -> tuple[bool, str, bool, list, list, str]:
    """The model's tensor signature from the answers: (add_sub, sequence, accumulator, inputs, outputs,
    config), as signature.j2 documents them."""
    given = cookiecutter.get("signature") or {}
    sequence = cookiecutter.get("sequence", "none")
    accumulator = sequence != "none"
    add_sub = not given.get("inputs") and not accumulator
    if add_sub and cookiecutter.get("_tbgen_template") == "decoupled-backend":
        inputs, outputs = REPEAT_INPUTS, REPEAT_OUTPUTS  # the interface of Triton's repeat example
    elif add_sub:  # the add/sub example (cpp-backend, python-backend)
        dtype, dims = cookiecutter.get("dtype", "INT32"), cookiecutter.get("dims", "-1")
        inputs = [_example(cookiecutter.get(f"input{i}_name", f"INPUT{i}"), dtype, dims) for i in (0, 1)]
        outputs = [_example(cookiecutter.get(f"output{i}_name", f"OUTPUT{i}"), dtype, dims) for i in (0, 1)]
    elif not given.get("inputs"):  # the accumulator example of a sequence model
        dtype, dims = cookiecutter.get("dtype", "FP32"), cookiecutter.get("dims", "16")
        inputs, outputs = [_example("INPUT", dtype, dims)], [_example("OUTPUT", dtype, dims)]
    else:
        inputs, outputs = given["inputs"], given["outputs"]
    return (
        add_sub,
        sequence,
        accumulator,
        [_tensor(t, output=False) for t in inputs],
        [_tensor(t, output=True) for t in outputs],
        given.get("config", ""),
    )


def _example(name: str, datatype: str, dims: str) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "dims": dims}


def _tensor(given: Mapping[str, Any], output: bool) -> dict[str, Any]:
    """One tensor as the templates read it: dims as ints without the batch dim, backend_dims what the backend
    sees (reshape's when config.pbtxt reshapes), datatype the wire name (BYTES), config_type config.pbtxt's
    (TYPE_STRING)."""
    wire = str(given["datatype"]).upper().replace("TYPE_", "")
    wire = "BYTES" if wire == "STRING" else wire
    if wire not in CTYPES:
        raise ValueError(f"tensor {given['name']!r}: unknown datatype {given['datatype']!r}")
    dims = _dims_text(given["dims"])
    reshape = None if given.get("reshape") is None else _dims_text(given["reshape"])
    shown = dims if reshape is None else reshape
    return {
        "name": given["name"],
        "datatype": wire,
        "config_type": "TYPE_STRING" if wire == "BYTES" else "TYPE_" + wire,
        "dims": _ints(dims),
        "backend_dims": _ints(shown) if shown else [],
        "reshape": None if reshape is None else (_ints(reshape) if reshape else []),
        "optional": not output and str(given.get("optional", False)).lower() in ("true", "yes", "1"),
        "label_filename": given.get("label_filename", ""),
        "ctype": CTYPES[wire],
        "np": NUMPY[wire],
        "size": SIZES[wire],
        "variable": "-1" in dims.split(","),
    }


def _dims_text(value: Any) -> str:
    """Dims as "2,-1": from a list, or from text such as "[2, -1]"."""
    if isinstance(value, str):
        return value.replace(" ", "").replace("[", "").replace("]", "")
    return ",".join(str(d) for d in value)


def _ints(text: str) -> list[int]:
    """The dims of "2,-1" as ints; an empty or unreadable one is 0 (as Jinja's int filter reads it)."""
    numbers = []
    for part in text.split(","):
        try:
            numbers.append(int(part))
        except ValueError:
            try:
                numbers.append(int(float(part)))
            except ValueError:
                numbers.append(0)
    return numbers


def cpp_member(name: str) -> str:
    """The C++ member holding tensor ``name`` in the generated Inputs/Outputs structs: the name itself, a C
    identifier already, with a trailing underscore when C++ or the backend's headers reserve it."""
    limits = (name.startswith("INT") or name.startswith("UINT")) and name.endswith(("_MAX", "_MIN", "_C"))
    return name + "_" if name in CPP_RESERVED or name.startswith("TRITON") or limits else name


def cpp_call(indent: int, head: str, args: list, tail: str = ";") -> str:
    """A call laid out as clang-format lays Triton's sources out (ColumnLimit 80, AlignAfterOpenBracket
    AlwaysBreak, ContinuationIndent 4): on one line when it fits, else its arguments packed on the lines
    after the opening parenthesis. ``head`` is the text up to the parenthesis, ``tail`` what follows the
    closing one."""
    pad = " " * indent
    one = f"{pad}{head}({', '.join(str(a) for a in args)}){tail}"
    if len(one) <= COLUMN_LIMIT:
        return one
    inner = " " * (indent + 4)
    lines = [inner]
    for i, arg in enumerate(args):
        piece = f"{arg}, " if i < len(args) - 1 else f"{arg}){tail}"
        if len(lines[-1]) > len(inner) and len((lines[-1] + piece).rstrip()) > COLUMN_LIMIT:
            lines.append(inner + piece)
        else:
            lines[-1] += piece
    return "\n".join([pad + head + "(", *(line.rstrip() for line in lines)])


def release_has(triton_version: str, feature: str) -> bool:
    """Whether release ``triton_version`` ("26.06", or a branch "r26.06") has ``feature`` (a key of
    FEATURES_SINCE): it is that feature's first release or newer."""

    def numbers(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in str(version).strip().lstrip("rR").split("."))

    return numbers(triton_version) >= numbers(FEATURES_SINCE[feature])


def split_names(text: str) -> list[str]:
    """A comma-separated answer (pattern=bls's callees) as a list of names, blanks dropped."""
    return [name.strip() for name in str(text).split(",") if name.strip()]


# ---- reference.py and export_model.py


def pytuple(values: list) -> str:
    """A Python tuple of ``values`` as generated code writes it: "(1, 2)", "(3,)", "()", ("a", "b")."""
    items = [f'"{v}"' if isinstance(v, str) else str(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def py_name(name: str) -> str:
    """A tensor's name as a Python identifier (export_model.py's arguments): a keyword gets a trailing
    underscore."""
    return name + "_" if keyword.iskeyword(name) else name


def placeholder_dims(dims: list[int]) -> list[int]:
    """An output's dims in the placeholder computation: a -1 has size 1."""
    return [1 if d == -1 else d for d in dims]


def shapes(tensors: list) -> str:
    """A Python dict of the tensors' dims as the backend sees them, by name: {"X": [3, -1]}."""
    return "{" + ", ".join(f'"{t["name"]}": {t["backend_dims"]}' for t in tensors) + "}"


# TorchScript's dtypes of the datatypes a LibTorch model takes.
TORCH_DTYPES = {
    "BOOL": "torch.bool", "UINT8": "torch.uint8", "INT8": "torch.int8", "INT16": "torch.int16",
    "INT32": "torch.int32", "INT64": "torch.int64", "FP16": "torch.float16", "BF16": "torch.bfloat16",
    "FP32": "torch.float32", "FP64": "torch.float64",
}  # fmt: skip


def torch_forward(inputs: list, outputs: list, batching: bool) -> str:
    """export_model.py's TorchScript forward() of the placeholder: per row (the whole request when the model
    does not batch), n = the number of non-zero input elements; every output is n broadcast to its dims, in
    its datatype."""
    names = {t["name"]: py_name(t["name"]) for t in inputs}
    kinds = {False: "torch.Tensor", True: "Optional[torch.Tensor]"}
    parameters = ", ".join(f"{names[t['name']]}: {kinds[t['optional']]}" for t in inputs)
    returns = f"Tuple[{', '.join(['torch.Tensor'] * len(outputs))}]" if len(outputs) > 1 else "torch.Tensor"
    first = names[next(t["name"] for t in inputs if not t["optional"])]
    lines = [
        f"    def forward(self, {parameters}) -> {returns}:",
        f"        n = torch.zeros({first + '.shape[0]' if batching else '()'}, dtype=torch.int64)",
    ]
    for t in inputs:
        name = names[t["name"]]
        count = f"({name} != 0).reshape({name}.shape[0], -1).sum(1)" if batching else f"({name} != 0).sum()"
        if t["optional"]:
            lines += [f"        if {name} is not None:", f"            n = n + {count}"]
        else:
            lines.append(f"        n = n + {count}")
    values = [_torch_output(t, batching) + ".contiguous()" for t in outputs]
    if len(values) == 1:
        lines.append(f"        return {values[0]}")
    else:
        lines += ["        return (", *(f"            {value}," for value in values), "        )"]
    return "\n".join(lines)


def _torch_output(tensor: Mapping[str, Any], batching: bool) -> str:
    """The placeholder's value of output ``tensor``: n broadcast to its dims (a -1 as 1), in its datatype."""
    dims = [str(d) for d in placeholder_dims(tensor["backend_dims"])]
    shape, ones = ", ".join(dims), ", ".join(["1"] * len(dims))
    if batching:
        value = f"n.reshape(-1{', ' + ones if ones else ''}).expand(-1{', ' + shape if shape else ''})"
    else:
        value = f"n.reshape([{ones}]).expand([{shape}])"
    if tensor["datatype"] == "BOOL":
        return f"({value} != 0)"
    return f"{value}.to({TORCH_DTYPES[tensor['datatype']]})"


# reference.py's TOLERANCE for outputs computed once, by the least precise float datatype among them;
# integers, BOOL and BYTES are compared exactly.
TOLERANCES = (
    ("BF16", '{"rtol": 1e-2, "atol": 1e-2}  # bfloat16 keeps 8 significant bits'),
    ("FP16", '{"rtol": 2e-3, "atol": 1e-3}'),
    ("FP32", '{"rtol": 1e-6, "atol": 1e-6}'),
    ("FP64", '{"rtol": 1e-12, "atol": 1e-12}'),
)
EXACT = '{"rtol": 0, "atol": 0}  # compared exactly'


def tolerance(outputs: list) -> str:
    """reference.py's TOLERANCE (the dict's text) for ``outputs`` computed once."""
    datatypes = {t["datatype"] for t in outputs}
    return next((value for datatype, value in TOLERANCES if datatype in datatypes), EXACT)


# ---- config.pbtxt


def config_tensors(cookiecutter: Mapping[str, Any], inputs: list, outputs: list) -> list[tuple[str, list]]:
    """config.pbtxt's input and output sections: the signature's tensors; for a BLS router (pattern=bls) its
    selector input (BYTES [1]), then its callees' tensors as they are, without reshape or label files."""
    if cookiecutter.get("pattern", "none") != "bls":
        return [("input", inputs), ("output", outputs)]
    plain = {"reshape": None, "label_filename": ""}
    selector = {"name": cookiecutter["selector"], "config_type": "TYPE_STRING", "dims": [1]}
    return [
        ("input", [{**selector, "optional": False, **plain}] + [{**t, **plain} for t in inputs]),
        ("output", [{**t, **plain} for t in outputs]),
    ]


def corrid_type(cookiecutter: Mapping[str, Any]) -> str | None:
    """config.pbtxt's data type of a sequence model's CORRID control input; None where the model takes its
    correlation IDs another way: the 24.10 python backend refuses every request whose string CORRID control
    input Triton pads (to 132 bytes), so a Python model with string correlation IDs reads them from
    request.correlation_id() instead."""
    strings = cookiecutter.get("correlation_id", "uint64") == "string"
    template, language = cookiecutter.get("_tbgen_template"), cookiecutter.get("language")
    python = template == "python-backend" or language == "python"
    if strings and python:
        return None
    return "TYPE_STRING" if strings else "TYPE_UINT64"


def auto_completed(cookiecutter: Mapping[str, Any], inputs: list, outputs: list) -> bool:
    """python-backend's auto_complete: model.py's auto_complete_config declares the tensors, max_batch_size
    and dynamic batching, which config.pbtxt leaves out; a reshape or a label file, which it cannot declare,
    keeps them all in config.pbtxt."""
    undeclarable = any(t["reshape"] is not None for t in inputs + outputs) or any(
        t["label_filename"] for t in outputs
    )
    return bool(cookiecutter.get("auto_complete", False)) and not undeclarable


# ---- batching strategies (batch_strategy: batching/<model>/ and config.pbtxt's parameters)

BYTES_ELEMENT = 4 + 32  # a BYTES element of the example's largest request: its length prefix and 32 bytes
VARIABLE_DIM = 7  # the largest size reference.py's make_inputs gives a -1 dim
BATCH_COMMENTS = {
    "MAX_BATCH_VOLUME_BYTES": "a request joins a batch while the batch's input bytes stay within this",
    "MAX_BATCH_ELEMENTS": "a request joins a batch while its BATCH_ELEMENTS_INPUT elements stay within this",
    "MAX_BATCH_REQUESTS": "at most this many requests in one batch (the example rule of decision.h)",
    "BATCH_ELEMENTS_INPUT": "the input whose elements (batch dim included) the strategy counts",
}


def batch_parameters(cookiecutter: Mapping[str, Any], inputs: list) -> list[tuple[str, str, str]]:
    """config.pbtxt's parameters of the model's batching strategy, as (key, value, comment). batch_limit 0
    sizes the limit for the example's largest request (a -1 dim as 7, a BYTES element as 4 + 32 bytes):
    max(1, max_batch_size // 2) items of it."""
    strategy = cookiecutter.get("batch_strategy", "none")
    chosen = cookiecutter.get("batch_input", "") or inputs[0]["name"]
    items = max(1, int(cookiecutter.get("max_batch_size", 0)) // 2)

    def elements(tensor: Mapping[str, Any]) -> int:
        return math.prod(VARIABLE_DIM if d == -1 else max(d, 1) for d in tensor["dims"])

    item_bytes = sum(elements(t) * (t["size"] or BYTES_ELEMENT) for t in inputs)
    defaults = {
        "volume": ("MAX_BATCH_VOLUME_BYTES", items * item_bytes),
        "tokens": ("MAX_BATCH_ELEMENTS", items * sum(elements(t) for t in inputs if t["name"] == chosen)),
        "custom": ("MAX_BATCH_REQUESTS", 2),
    }
    found = []
    if strategy in defaults:
        key, default = defaults[strategy]
        found.append((key, str(int(cookiecutter.get("batch_limit", 0) or 0) or max(1, default))))
    if strategy == "tokens" or (strategy == "custom" and cookiecutter.get("batch_input")):
        found.append(("BATCH_ELEMENTS_INPUT", chosen))
    return [(key, value, BATCH_COMMENTS[key]) for key, value in found]


class TbgenExtension(Extension):
    """Registers the globals the templates call."""

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        environment.globals.update(
            tensor_signature=tensor_signature,
            cpp_member=cpp_member,
            cpp_call=cpp_call,
            config_tensors=config_tensors,
            corrid_type=corrid_type,
            auto_completed=auto_completed,
            tolerance=tolerance,
            torch_forward=torch_forward,
            release_has=release_has,
            batch_parameters=batch_parameters,
        )
        environment.filters.update(
            split_names=split_names,
            pytuple=pytuple,
            py_name=py_name,
            placeholder_dims=placeholder_dims,
            shapes=shapes,
        )
