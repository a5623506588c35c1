"""Checks on the model's tensors: inputs and outputs (names, data types, dims, reshape), batch inputs and
outputs, and the warmup samples fed to the inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from triton_backend_gen.model_config.checks.context import (
    TENSORRT_PLATFORM,
    CheckContext,
    dtype_name,
    show_dims,
)
from triton_backend_gen.model_config.locate import Node


def check_tensors(ctx: CheckContext) -> None:
    """Each input and output on its own, and their names across both."""
    c = ctx.config
    seen: dict[str, str] = {}
    for kind, tensors in (("input", c.input), ("output", c.output)):
        for index, tensor in enumerate(tensors):
            node = ctx.tree.nth(kind, index)
            _check_tensor(ctx, kind, index, tensor, node)
            if not tensor.name:
                continue
            name_line = ctx.line_of((kind, index), "name")
            if tensor.name in seen:
                # Triton 2.51 loads such a model but keeps only one declaration per name, so the other
                # one's data type and shape are silently ignored.
                other = seen[tensor.name]
                where = f"another {kind}" if other == kind else f"an {other}"
                ctx.warn(
                    name_line,
                    f'duplicate tensor name "{tensor.name}": {kind} {index} has the name of {where}, and '
                    "Triton silently keeps only one of them; give every input and output its own name",
                )
            else:
                seen[tensor.name] = kind


def _check_tensor(ctx: CheckContext, kind: str, index: int, tensor: Any, node: Node | None) -> None:
    """Input or output ``index``; ``node`` is where it is in the text."""
    label = f'{kind} "{tensor.name}"' if tensor.name else f"{kind} {index}"
    name_node = node.first("name") if node else None
    at = name_node.line if name_node else (node.line if node else None)

    def line(name: str) -> int | None:
        found = node.first(name) if node else None
        return found.line if found else at

    if not tensor.name:
        ctx.error(at, f'{label} has no name; add name: "..." to it')
    if tensor.data_type == 0:
        ctx.error(
            line("data_type"),
            f"{label} has no data_type (or TYPE_INVALID); set one, e.g. data_type: TYPE_FP32 "
            "(TYPE_STRING for BYTES tensors)",
        )
    dims = list(tensor.dims)
    _check_dims(ctx, label, dims, line("dims"))
    if tensor.HasField("reshape"):
        _check_reshape(ctx, label, dims, list(tensor.reshape.shape), line("reshape"))
    _check_layout_flags(ctx, kind, label, tensor, len(dims), line)


def _check_dims(ctx: CheckContext, label: str, dims: list[int], line: int | None) -> None:
    """dims must list the shape: not empty, each dimension >= 1 or -1."""
    if not dims:
        hint = "dims: [ 1 ] for one value per batch item" if ctx.config.max_batch_size > 0 else "dims: [ 1 ]"
        ctx.error(
            line,
            f"{label} has empty dims; list its shape without the batch dimension, e.g. {hint} "
            "(use -1 for a variable-size dimension)",
        )
    bad = [d for d in dims if d < 1 and d != -1]
    if bad:
        ctx.error(
            line,
            f"{label} has dims {show_dims(dims)}; every dimension must be >= 1, or -1 for a variable size "
            "(0 is not allowed)",
        )


def _check_layout_flags(
    ctx: CheckContext, kind: str, label: str, tensor: Any, rank: int, line: Callable[[str], int | None]
) -> None:
    """An image format needs 3 dims; the shape-tensor and non-linear-format flags need TensorRT."""
    if kind == "input" and tensor.format in (1, 2) and rank != 3:  # FORMAT_NHWC, FORMAT_NCHW
        fmt = "FORMAT_NHWC" if tensor.format == 1 else "FORMAT_NCHW"
        ctx.error(line("format"), f"{label} has format {fmt}, which requires exactly 3 dims; it has {rank}")
    for flag in ("is_shape_tensor", "is_non_linear_format_io"):
        if getattr(tensor, flag) and ctx.config.platform != TENSORRT_PLATFORM:
            ctx.error(line(flag), f"{label} sets {flag}, which only TensorRT models support; remove it")


def _check_reshape(
    ctx: CheckContext, label: str, dims: list[int], shape: list[int], line: int | None
) -> None:
    """``reshape`` must be valid and hold the elements of ``dims`` in the same runs between variable dims."""
    if not _check_reshape_shape(ctx, label, shape, line):
        return
    if not dims or any(d < 1 and d != -1 for d in dims):
        return  # already reported
    _check_reshape_elements(ctx, label, dims, shape, line)


def _check_reshape_shape(ctx: CheckContext, label: str, shape: list[int], line: int | None) -> bool:
    """Whether ``shape`` is a valid reshape (reported when it is not): no scalar without a batch dimension,
    each dimension >= 1 or -1."""
    if not shape and ctx.config.max_batch_size == 0:
        ctx.error(
            line,
            f"{label} has an empty reshape in a model with max_batch_size 0, which would make it a scalar; "
            "Triton does not support scalar tensors: give reshape a shape, e.g. reshape: { shape: [ 1 ] }",
        )
        return False
    if any(d < 1 and d != -1 for d in shape):
        ctx.error(line, f"{label} has reshape {show_dims(shape)}; every dimension must be >= 1 or -1")
        return False
    return True


def _check_reshape_elements(
    ctx: CheckContext, label: str, dims: list[int], shape: list[int], line: int | None
) -> None:
    """Valid ``dims`` and ``shape`` must hold as many elements, in the same runs between variable dims."""
    dims_count, shape_count = _element_count(dims), (_element_count(shape) if shape else 0)
    if dims_count != shape_count and not (shape_count == 0 and dims_count == 1):
        ctx.error(
            line,
            f"{label}: reshape {show_dims(shape)} does not hold the same number of elements as dims "
            f"{show_dims(dims)}; the element counts must match (an empty reshape needs dims of one element)",
        )
    elif dims_count == -1 and _trunks(dims) != _trunks(shape):
        ctx.error(
            line,
            f"{label}: reshape {show_dims(shape)} does not match dims {show_dims(dims)}; the fixed "
            "dimensions between variable (-1) ones must hold the same number of elements in both",
        )


def _element_count(dims: list[int]) -> int:
    """Product of ``dims``; -1 when any is variable (-1)."""
    count = 1
    for d in dims:
        if d == -1:
            return -1
        count *= d
    return count


def _trunks(dims: list[int]) -> list[int]:
    """Element counts of the runs of fixed dims between variable (-1) dims: [2, 4, -1, 6] -> [8, 6]."""
    trunks, current = [], 1
    for d in dims:
        if d == -1:
            trunks.append(current)
            current = 1
        else:
            current *= d
    trunks.append(current)
    return trunks


def check_batch_io(ctx: CheckContext) -> None:
    """batch_input and batch_output against the model's inputs and outputs."""
    c = ctx.config
    inputs = {t.name for t in c.input}
    outputs = {t.name for t in c.output}
    for index, batch_input in enumerate(c.batch_input):
        line = ctx.line_of(("batch_input", index))
        _check_source_input(ctx, f"batch_input {index}", batch_input.source_input, inputs, line)
        if dtype_name(batch_input.data_type) not in ("TYPE_INT32", "TYPE_FP32"):
            ctx.error(
                line,
                f"batch_input {index} has data_type {dtype_name(batch_input.data_type)}; use TYPE_INT32 or "
                "TYPE_FP32",
            )
    for index, batch_output in enumerate(c.batch_output):
        line = ctx.line_of(("batch_output", index))
        _check_source_input(ctx, f"batch_output {index}", batch_output.source_input, inputs, line)
        seen: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                ctx.error(
                    line, f'batch_output {index} names target_name "{target}", which is not a model output'
                )
            if target in seen:
                ctx.error(line, f'batch_output {index} lists target_name "{target}" twice')
            seen.add(target)


def _check_source_input(
    ctx: CheckContext, label: str, sources: Any, inputs: set[str], line: int | None
) -> None:
    """A batch input or output takes its shape from exactly one model input."""
    if len(sources) != 1:
        ctx.error(line, f"{label} needs exactly 1 source_input, it has {len(sources)}")
    for source in sources:
        if source not in inputs:
            ctx.error(line, f'{label} names source_input "{source}", which is not a model input')


def check_warmup(ctx: CheckContext) -> None:
    """model_warmup samples against the model's inputs and batch size (and none on an ensemble)."""
    c = ctx.config
    if ctx.is_ensemble:
        _check_ensemble_warmup(ctx)
        return
    inputs = {t.name for t in c.input}
    required = [t.name for t in c.input if not t.optional]
    for index, warmup in enumerate(c.model_warmup):
        _check_warmup_sample(ctx, index, warmup, inputs, required)


def _check_ensemble_warmup(ctx: CheckContext) -> None:
    """An ensemble may set neither model_warmup nor optimization."""
    if len(ctx.config.model_warmup):
        ctx.error(
            ctx.line_of("model_warmup"),
            "model_warmup is set on an ensemble, which Triton does not allow; warm up the composing models",
        )
    if ctx.config.HasField("optimization"):
        ctx.error(
            ctx.line_of("optimization"),
            "optimization is set on an ensemble, which Triton does not allow; remove it",
        )


def _check_warmup_sample(
    ctx: CheckContext, index: int, warmup: Any, inputs: set[str], required: list[str]
) -> None:
    """Warmup sample ``index``: its batch size, the required inputs it feeds, and each input it feeds."""
    node = ctx.tree.nth("model_warmup", index)
    line = node.line if node else None
    label = f'model_warmup "{warmup.name}"' if warmup.name else f"model_warmup {index}"
    limit = max(ctx.config.max_batch_size, 1)
    if warmup.batch_size > limit:
        ctx.error(
            ctx.line_of(("model_warmup", index), "batch_size"),
            f"{label} has batch_size {warmup.batch_size}, above the model's limit of {limit} "
            "(max_batch_size, or 1 without batching)",
        )
    if warmup.batch_size > 0:  # Triton skips samples of batch_size 0
        _check_warmup_required(ctx, label, warmup, required, line)
    for name, sample in warmup.inputs.items():
        entry = node.with_child("inputs", "key", name) if node else None
        _check_warmup_input(ctx, label, name, sample, inputs, entry.line if entry else line)


def _check_warmup_required(
    ctx: CheckContext, label: str, warmup: Any, required: list[str], line: int | None
) -> None:
    """A warmup sample feeds every required input."""
    missing = [name for name in required if name not in warmup.inputs]
    if missing:
        ctx.error(
            line,
            f"{label} lacks the required input(s) "
            + ", ".join(f'"{m}"' for m in missing)
            + '; add inputs { key: "<name>" value: { data_type: ... dims: [ ... ] zero_data: true } } '
            "for each",
        )


def _check_warmup_input(
    ctx: CheckContext, label: str, name: str, sample: Any, inputs: set[str], at: int | None
) -> None:
    """One input of a warmup sample: a declared input, with concrete dims and some data."""
    if inputs and name not in inputs:
        ctx.warn(
            at,
            f'{label} feeds input "{name}", which the model does not declare; use one of '
            + ", ".join(sorted(inputs)),
        )
    if any(d == -1 for d in sample.dims):
        ctx.error(
            at,
            f'{label} input "{name}" has a variable (-1) dimension; warmup needs concrete dims',
        )
    if sample.WhichOneof("input_data_type") is None:
        ctx.error(
            at,
            f'{label} input "{name}" sets no data; add zero_data: true, random_data: true or '
            'input_data_file: "..."',
        )
