"""Naming rules for projects, backends, models and tensors.

Each ``check_*`` function returns the value when it is valid and raises :class:`AnswerError` otherwise, with a
message that names the rule and a hint that shows a good value.
"""

from __future__ import annotations

import re

from triton_backend_gen.errors import AnswerError

_PROJECT_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_BACKEND_RE = re.compile(r"[a-z][a-z0-9_]*")
_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TENSOR_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

MAX_BACKEND_NAME = 64
# A project name is a directory name (at most 255 bytes) with room for the hidden sibling it is rendered in.
MAX_PROJECT_NAME = 128

# Backends that Triton (or its ecosystem) already ships: a custom backend with one of these names would be
# shadowed by, or shadow, the real one in /opt/tritonserver/backends.
RESERVED_BACKEND_NAMES = frozenset(
    {
        "python",
        "onnxruntime",
        "pytorch",
        "libtorch",
        "tensorrt",
        "tensorflow",
        "tensorflow1",
        "tensorflow2",
        "openvino",
        "fil",
        "dali",
        "vllm",
        "tensorrtllm",
        "identity",
        "repeat",
        "square",
        "sequence",
        "dyna_sequence",
        "distributed_addsub",
        "recommended",
        "minimal",
        "armnn_tflite",
        "tflite",
        "hugectr",
        "paddle",
        "ensemble",
        "triton",
    }
)

CPP_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
    decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
    goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
    protected public register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned
    using virtual void volatile wchar_t while xor xor_eq""".split()
)


def check_project_name(name: str) -> str:
    if not _PROJECT_RE.fullmatch(name):
        raise AnswerError(
            f"Invalid project name {name!r}: use letters, digits, '-' and '_', starting with a letter.",
            "Example: my-backend",
        )
    if len(name) > MAX_PROJECT_NAME:
        raise AnswerError(
            f"Project name {name[:32]!r}... is longer than {MAX_PROJECT_NAME} characters.",
            "Example: my-backend",
        )
    return name


def check_backend_name(name: str) -> str:
    example = "Example: my_backend (pass it with --backend-name)"
    if not _BACKEND_RE.fullmatch(name):
        raise AnswerError(
            f"Invalid backend name {name!r}: it must be a lowercase identifier "
            "(a-z, 0-9 and '_', starting with a letter), as it names libtriton_<name>.so and a C++ "
            "namespace.",
            example,
        )
    if len(name) > MAX_BACKEND_NAME:
        raise AnswerError(f"Backend name {name!r} is longer than {MAX_BACKEND_NAME} characters.", example)
    if name in CPP_KEYWORDS:
        raise AnswerError(f"Backend name {name!r} is a C++ keyword and cannot name a namespace.", example)
    if name in RESERVED_BACKEND_NAMES:
        raise AnswerError(
            f"Backend name {name!r} is already used by a Triton backend; "
            "the server would confuse the two in its backends directory.",
            example,
        )
    return name


def check_model_name(name: str) -> str:
    if not _MODEL_RE.fullmatch(name) or name in {".", ".."}:
        raise AnswerError(
            f"Invalid model name {name!r}: use letters, digits, '_', '-' and '.', starting with a letter "
            "or digit (it names a directory of the model repository and appears in request URLs).",
            "Example: add_sub",
        )
    return name
