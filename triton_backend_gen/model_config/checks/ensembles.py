"""Checks on an ensemble: its scheduling steps, the data flow between them (every tensor produced once,
used, and reachable without a cycle), and the steps against the configs of the models they call."""

from __future__ import annotations

from typing import Any

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.model_config.checks.context import (
    ENSEMBLE_PLATFORM,
    CheckContext,
    dtype_name,
    show_dims,
)
from triton_backend_gen.model_config.expectations import CONFIG_FILE
from triton_backend_gen.model_config.locate import Node
from triton_backend_gen.model_config.parsing import load_model_config


def check_ensemble(ctx: CheckContext) -> None:
    """Platform and ensemble_scheduling together, then the steps; nothing for a model that is no ensemble."""
    if not ctx.is_ensemble:
        return
    c = ctx.config
    if c.platform != ENSEMBLE_PLATFORM:
        ctx.error(
            ctx.line_of("ensemble_scheduling"),
            'ensemble_scheduling is set but platform is not "ensemble"; add platform: "ensemble"',
        )
        return
    if not c.HasField("ensemble_scheduling"):
        ctx.error(
            ctx.line_of("platform"),
            'platform is "ensemble" but ensemble_scheduling is missing; add ensemble_scheduling { step [ '
            "... ] }",
        )
        return
    steps = list(c.ensemble_scheduling.step)
    if not steps:
        ctx.error(
            ctx.line_of("ensemble_scheduling"), "ensemble_scheduling has no step; add at least one step"
        )
        return
    _check_data_flow(ctx, steps)
    _check_cycles(ctx, steps)
    _check_step_models(ctx, steps)


def _step_node(ctx: CheckContext, i: int) -> Node | None:
    sched = ctx.tree.first("ensemble_scheduling")
    return sched.nth("step", i) if sched else None


def _step_line(ctx: CheckContext, i: int) -> int | None:
    node = _step_node(ctx, i)
    return node.line if node else None


def _entry_line(ctx: CheckContext, i: int, map_name: str, key: str) -> int | None:
    """Line of the ``map_name`` entry ``key`` of step ``i``, else of the step."""
    node = _step_node(ctx, i)
    entry = node.with_child(map_name, "key", key) if node else None
    return entry.line if entry else (node.line if node else None)


def _check_data_flow(ctx: CheckContext, steps: list[Any]) -> None:
    """Every step maps inputs and outputs; every ensemble tensor has one producer and is used."""
    produced: dict[str, int] = {}  # ensemble tensor -> step writing it
    consumed: set[str] = set()
    for i, step in enumerate(steps):
        _check_step_maps(ctx, i, step)
        _note_producers(ctx, i, step, produced)
        consumed.update(step.input_map.values())
    inputs = [t.name for t in ctx.config.input]
    outputs = [t.name for t in ctx.config.output]
    _check_ensemble_io(ctx, inputs, outputs, produced, consumed)
    _check_step_reads(ctx, steps, set(inputs) | set(produced))
    _check_unused_tensors(ctx, steps, produced, consumed | set(outputs))


def _check_step_maps(ctx: CheckContext, i: int, step: Any) -> None:
    """Step ``i`` names its model and maps some inputs and outputs."""
    at = _step_line(ctx, i)
    model = step.model_name or f"step {i}"
    if not step.model_name:
        ctx.error(at, f'ensemble step {i} has no model_name; add model_name: "<model>"')
    if not step.input_map:
        ctx.error(
            at,
            f"ensemble step {i} ({model}) has no input_map; map the model's inputs, e.g. "
            'input_map { key: "INPUT0" value: "<ensemble tensor>" }',
        )
    if not step.output_map:
        ctx.error(
            at,
            f"ensemble step {i} ({model}) has no output_map; map the model's outputs, e.g. "
            'output_map { key: "OUTPUT0" value: "<ensemble tensor>" }',
        )


def _note_producers(ctx: CheckContext, i: int, step: Any, produced: dict[str, int]) -> None:
    """Record step ``i`` in ``produced`` as the writer of its output tensors; a second writer is reported."""
    model = step.model_name or f"step {i}"
    for key, tensor in step.output_map.items():
        if tensor in produced:
            ctx.error(
                _entry_line(ctx, i, "output_map", key),
                f'ensemble tensor "{tensor}" is written by step {produced[tensor]} and again by step {i} '
                f"({model}); every ensemble tensor has one producer: rename one of them",
            )
        produced.setdefault(tensor, i)


def _check_ensemble_io(
    ctx: CheckContext, inputs: list[str], outputs: list[str], produced: dict[str, int], consumed: set[str]
) -> None:
    """Each ensemble input is read by a step and written by none; each ensemble output is written by one."""
    for index, name in enumerate(inputs):
        if name not in consumed:
            ctx.error(
                ctx.line_of(("input", index), "name"),
                f'ensemble input "{name}" is not used by any step; map it in a step\'s input_map or remove '
                "it",
            )
        if name in produced:
            ctx.error(
                ctx.line_of(("input", index), "name"),
                f'ensemble input "{name}" is also written by step {produced[name]}\'s output_map; rename '
                "that step's output tensor",
            )
    for index, name in enumerate(outputs):
        if name not in produced:
            ctx.error(
                ctx.line_of(("output", index), "name"),
                f'ensemble output "{name}" is not written by any step; add it as a value of a step\'s '
                "output_map",
            )


def _check_step_reads(ctx: CheckContext, steps: list[Any], available: set[str]) -> None:
    """Every tensor a step reads is an ensemble input or written by some step."""
    for i, step in enumerate(steps):
        for key, tensor in step.input_map.items():
            if tensor not in available:
                ctx.error(
                    _entry_line(ctx, i, "input_map", key),
                    f'ensemble step {i} ({step.model_name}) reads "{tensor}" (input_map "{key}"), which is '
                    "neither an ensemble input nor written by any step's output_map; declare it as an "
                    "input or produce it",
                )


def _check_unused_tensors(
    ctx: CheckContext, steps: list[Any], produced: dict[str, int], used: set[str]
) -> None:
    """Every tensor a step writes is read by a step or is an ensemble output (both in ``used``)."""
    for tensor, i in produced.items():
        if tensor not in used:
            key = next(k for k, v in steps[i].output_map.items() if v == tensor)
            ctx.error(
                _entry_line(ctx, i, "output_map", key),
                f'ensemble tensor "{tensor}" written by step {i} is never used; read it in a later step, '
                "declare it as an ensemble output, or drop the mapping",
            )


def _check_cycles(ctx: CheckContext, steps: list[Any]) -> None:
    """Report a step that can never run because its inputs depend on its own outputs."""
    inputs = {t.name for t in ctx.config.input}
    ready = set(inputs)
    pending = list(range(len(steps)))
    progress = True
    while pending and progress:
        progress = False
        for i in list(pending):
            if set(steps[i].input_map.values()) <= ready:
                ready.update(steps[i].output_map.values())
                pending.remove(i)
                progress = True
    produced = {v for s in steps for v in s.output_map.values()}
    for i in pending:
        if set(steps[i].input_map.values()) <= inputs | produced:  # else already reported as not connected
            ctx.error(
                _step_line(ctx, i),
                f"ensemble step {i} ({steps[i].model_name}) can never run: its inputs depend on its own "
                "outputs (a cycle); break the cycle",
            )


class _TensorTypes:
    """The data type and shape of each ensemble tensor where it is first declared; a later declaration that
    disagrees is reported."""

    def __init__(self, ctx: CheckContext) -> None:
        self.ctx = ctx
        # ensemble tensor -> (data type, dims, dims with the batch dimension, where it was declared)
        self.declared: dict[str, tuple[int, list[int], list[int], str]] = {}

    def note(
        self, tensor: str, dtype: int, dims: list[int], batching: bool, source: str, line: int | None
    ) -> None:
        full = ([-1] if batching else []) + dims
        if tensor not in self.declared:
            self.declared[tensor] = (dtype, dims, full, source)
            return
        other_dtype, other_dims, other_full, other_source = self.declared[tensor]
        if dtype != other_dtype:
            self.ctx.error(
                line,
                f'ensemble tensor "{tensor}" is {dtype_name(other_dtype)} in {other_source} but '
                f"{dtype_name(dtype)} in {source}; make the data types equal",
            )
        elif not (_same_shape(dims, other_dims) or _same_shape(full, other_full)):
            self.ctx.error(
                line,
                f'ensemble tensor "{tensor}" has shape {show_dims(other_full)} in {other_source} but '
                f"{show_dims(full)} in {source} (batch dimension included); make the shapes agree",
            )


def _same_shape(a: list[int], b: list[int]) -> bool:
    """Equal length and every pair of dimensions equal or one of them variable (-1)."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _check_step_models(ctx: CheckContext, steps: list[Any]) -> None:
    """Compare the steps with the configs of the models they call, when those sit in the same repository:
    tensor names, unmapped required inputs, data types and shapes along each ensemble tensor, batch sizes."""
    c = ctx.config
    types = _TensorTypes(ctx)
    for tensors in (c.input, c.output):
        for t in tensors:
            dims = list(t.reshape.shape) if t.HasField("reshape") else list(t.dims)
            types.note(t.name, t.data_type, dims, c.max_batch_size > 0, f'ensemble "{ctx.model_name}"', None)

    if ctx.model_dir is None:
        return  # a config outside a model repository: the models it calls are not at hand
    for i, step in enumerate(steps):
        model = _step_model(ctx, i, step) if step.model_name else None
        if model is not None:
            _compare_step(ctx, i, step, model, types)


def _step_model(ctx: CheckContext, i: int, step: Any) -> Any | None:
    """The config of the model step ``i`` calls, from beside the ensemble's; None when there is nothing to
    compare with: it is not there (warned), does not load (reported when it is checked itself), or declares
    no tensors (they come from auto-completion)."""
    other = ctx.model_dir.parent / step.model_name / CONFIG_FILE
    if not other.is_file():
        ctx.warn(
            ctx.line_of("ensemble_scheduling", ("step", i)),
            f'ensemble step {i} calls model "{step.model_name}", which is not in this model repository '
            f"({other.parent} has no {CONFIG_FILE}); add it, or load it from another repository",
        )
        return None
    try:
        model = load_model_config(other)
    except ConfigError:
        return None
    return model if model.input or model.output else None


def _compare_step(ctx: CheckContext, i: int, step: Any, model: Any, types: _TensorTypes) -> None:
    """Step ``i`` against the config of the model it calls."""
    c, name = ctx.config, step.model_name
    if model.max_batch_size and model.max_batch_size < c.max_batch_size:
        ctx.error(
            ctx.line_of("max_batch_size"),
            f'ensemble max_batch_size {c.max_batch_size} exceeds that of step {i} model "{name}" '
            f"({model.max_batch_size}); lower the ensemble's max_batch_size",
        )
    batching = model.max_batch_size > 0
    source = f'model "{name}"'
    for map_name, tensors, kind in (
        ("input_map", model.input, "input"),
        ("output_map", model.output, "output"),
    ):
        by_name = {t.name: t for t in tensors}
        for key, tensor in getattr(step, map_name).items():
            line = _entry_line(ctx, i, map_name, key)
            if key not in by_name:
                ctx.error(
                    line,
                    f'ensemble step {i}: {map_name} key "{key}" is not an {kind} of model "{name}"; its '
                    f"{kind}s are " + ", ".join(sorted(by_name)),
                )
                continue
            t = by_name[key]
            types.note(tensor, t.data_type, list(t.dims), batching, source, line)
    for t in model.input:
        if t.name not in step.input_map and not t.optional:
            ctx.error(
                _entry_line(ctx, i, "input_map", ""),
                f'ensemble step {i}: input "{t.name}" of model "{name}" is not mapped; add input_map '
                f'{{ key: "{t.name}" value: "<ensemble tensor>" }}',
            )
