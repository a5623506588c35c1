"""Checks on how requests reach the model: dynamic and sequence batching, instance groups, and the
decoupled transaction policy."""

from __future__ import annotations

from typing import Any

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.checks.context import (
    TENSORRT_PLATFORM,
    CheckContext,
    dtype_name,
    enum_name,
)

model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")


def check_batching(ctx: CheckContext) -> None:
    """dynamic_batching or sequence_batching, whichever is set."""
    c = ctx.config
    if c.HasField("dynamic_batching"):
        _check_dynamic_batching(ctx)
    if c.HasField("sequence_batching"):
        _check_sequence_batching(ctx)


def _check_dynamic_batching(ctx: CheckContext) -> None:
    c, db = ctx.config, ctx.config.dynamic_batching
    db_line = ctx.line_of("dynamic_batching")
    if c.max_batch_size == 0:
        ctx.warn(
            db_line,
            "dynamic_batching is set but max_batch_size is 0, so requests are never batched; set "
            "max_batch_size > 0 to batch, or remove dynamic_batching",
        )
    where = ctx.line_of("dynamic_batching", "preferred_batch_size")
    for size in db.preferred_batch_size:
        if size <= 0:
            ctx.error(where, f"dynamic_batching.preferred_batch_size {size} must be positive")
        elif size > c.max_batch_size:
            ctx.error(
                where,
                f"dynamic_batching.preferred_batch_size {size} exceeds max_batch_size {c.max_batch_size}; "
                "lower it or raise max_batch_size",
            )
    if db.priority_levels:
        _check_priority_levels(ctx)
    if db.preserve_ordering:
        _check_preserve_ordering(ctx)


def _check_priority_levels(ctx: CheckContext) -> None:
    """The default level and every level with a queue policy lie in [1, priority_levels]."""
    db = ctx.config.dynamic_batching
    levels = db.priority_levels
    if not 1 <= db.default_priority_level <= levels:
        ctx.error(
            ctx.line_of("dynamic_batching", "default_priority_level")
            or ctx.line_of("dynamic_batching", "priority_levels"),
            f"dynamic_batching.default_priority_level must be in [1, {levels}] when priority_levels is "
            f"{levels}; it is {db.default_priority_level}",
        )
    for level in db.priority_queue_policy:
        if not 1 <= level <= levels:
            ctx.error(
                ctx.line_of("dynamic_batching", "priority_queue_policy"),
                f"dynamic_batching.priority_queue_policy has level {level}, outside [1, {levels}]",
            )


def _check_preserve_ordering(ctx: CheckContext) -> None:
    """preserve_ordering allows neither several priority levels nor a queue policy that delays."""
    db = ctx.config.dynamic_batching
    if db.priority_levels > 1:
        ctx.error(
            ctx.line_of("dynamic_batching", "priority_levels"),
            "dynamic_batching.preserve_ordering allows one priority level only; remove priority_levels "
            "or preserve_ordering",
        )
    policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
    if any(p.default_timeout_microseconds and p.timeout_action == 1 for p in policies):  # DELAY
        ctx.error(
            ctx.line_of("dynamic_batching", "preserve_ordering"),
            "dynamic_batching.preserve_ordering cannot be combined with a queue policy whose "
            "timeout_action is DELAY; use REJECT or turn preserve_ordering off",
        )


def _check_sequence_batching(ctx: CheckContext) -> None:
    """sequence_batching: no response cache beside it, its control inputs, its strategy's settings."""
    c, sb = ctx.config, ctx.config.sequence_batching
    if c.response_cache.enable:
        ctx.error(
            ctx.line_of("response_cache"),
            "response_cache is enabled on a sequence-batched model, which Triton does not support; "
            "disable the response cache",
        )
    _check_control_inputs(ctx)
    if sb.HasField("oldest"):
        for size in sb.oldest.preferred_batch_size:
            if size <= 0 or size > c.max_batch_size:
                ctx.error(
                    ctx.line_of("sequence_batching", "oldest"),
                    f"sequence_batching.oldest.preferred_batch_size {size} must be in [1, max_batch_size "
                    f"{c.max_batch_size}]",
                )
    if sb.HasField("direct") and not 0.0 <= sb.direct.minimum_slot_utilization <= 1.0:
        ctx.error(
            ctx.line_of("sequence_batching", "direct"),
            "sequence_batching.direct.minimum_slot_utilization must be in (0.0, 1.0]",
        )


def _check_control_inputs(ctx: CheckContext) -> None:
    """sequence_batching's control inputs: each named, each tensor once, each kind of control once."""
    names: set[str] = set()
    kinds: dict[int, str] = {}
    for index, control_input in enumerate(ctx.config.sequence_batching.control_input):
        node_line = ctx.line_of("sequence_batching", ("control_input", index), "name")
        if not control_input.name:
            ctx.error(node_line, 'sequence_batching.control_input has no name; add name: "..."')
            continue
        if control_input.name in names:
            ctx.error(
                node_line,
                f'sequence_batching control tensor "{control_input.name}" is listed twice; give each '
                "control its own tensor",
            )
        names.add(control_input.name)
        for control in control_input.control:
            _check_sequence_control(ctx, control_input.name, control, node_line, kinds)


def _check_sequence_control(
    ctx: CheckContext, tensor: str, control: Any, line: int | None, kinds: dict[int, str]
) -> None:
    """One control of a control_input; ``kinds`` maps each control kind seen so far to its tensor."""
    kind_name = enum_name(model_config_pb2.ModelSequenceBatching.Control.Kind, control.kind)
    if control.kind in kinds:
        ctx.error(
            line,
            f'sequence_batching has two {kind_name} controls ("{kinds[control.kind]}" and "{tensor}"); '
            "keep one",
        )
    kinds[control.kind] = tensor
    given = [
        name
        for name, values in (
            ("int32_false_true", control.int32_false_true),
            ("fp32_false_true", control.fp32_false_true),
            ("bool_false_true", control.bool_false_true),
        )
        if len(values)
    ]
    if kind_name == "CONTROL_SEQUENCE_CORRID":
        if given:
            ctx.error(line, f'{kind_name} control "{tensor}" must not set {given[0]}; set data_type instead')
        elif dtype_name(control.data_type) not in _CORRID_TYPES:
            ctx.error(
                line,
                f'{kind_name} control "{tensor}" has data_type {dtype_name(control.data_type)}; use one of '
                + ", ".join(_CORRID_TYPES),
            )
        return
    if not given:
        ctx.error(
            line,
            f'{kind_name} control "{tensor}" must set one of int32_false_true, fp32_false_true or '
            "bool_false_true, e.g. int32_false_true: [ 0, 1 ]",
        )
    elif len(given) > 1:
        ctx.error(line, f'{kind_name} control "{tensor}" sets both {given[0]} and {given[1]}; keep one')
    else:
        values = getattr(control, given[0])
        if len(values) != 2:
            ctx.error(
                line,
                f'{kind_name} control "{tensor}": {given[0]} must have exactly 2 entries (false, true), '
                f"it has {len(values)}",
            )


def check_instance_groups(ctx: CheckContext) -> None:
    """Instance kinds, GPUs and profiles (and none on an ensemble)."""
    c = ctx.config
    if ctx.is_ensemble:
        if len(c.instance_group):
            ctx.error(
                ctx.line_of("instance_group"),
                "instance_group is set on an ensemble; an ensemble runs no instances of its own: remove it "
                "(set instance groups on the composing models)",
            )
        return
    for index, group in enumerate(c.instance_group):
        _check_instance_group(ctx, index, group)


def _check_instance_group(ctx: CheckContext, index: int, group: Any) -> None:
    """Instance group ``index``: a known kind, gpus only where GPUs are used, a profile only on TensorRT."""
    kinds = model_config_pb2.ModelInstanceGroup.Kind
    label = f'instance_group "{group.name}"' if group.name else f"instance_group {index}"
    kind = enum_name(kinds, group.kind)
    if kind.isdigit():
        ctx.error(
            ctx.line_of(("instance_group", index), "kind"),
            f"{label} has kind {kind}, which is no instance kind; use KIND_CPU, KIND_GPU, KIND_MODEL or "
            "KIND_AUTO",
        )
    if group.gpus and group.kind in (kinds.KIND_CPU, kinds.KIND_MODEL):
        ctx.error(
            ctx.line_of(("instance_group", index), "gpus"),
            f"{label} has kind {kind} but lists gpus; remove gpus or use kind: KIND_GPU",
        )
    if group.profile and ctx.config.platform != TENSORRT_PLATFORM:
        ctx.error(
            ctx.line_of(("instance_group", index), "profile"),
            f"{label} sets profile, which only TensorRT models support; remove it",
        )
    if _uses_gpus(group):
        asks = f"{label} asks for {kind if group.kind == kinds.KIND_GPU else 'GPUs'}"
        _check_gpu_expected(ctx, asks, ctx.line_of(("instance_group", index), "kind"))


def _uses_gpus(group: Any) -> bool:
    """Whether an instance group runs on GPUs: KIND_GPU, or KIND_AUTO with gpus listed."""
    kinds = model_config_pb2.ModelInstanceGroup.Kind
    return group.kind == kinds.KIND_GPU or (group.kind == kinds.KIND_AUTO and len(group.gpus) > 0)


def _check_gpu_expected(ctx: CheckContext, asks: str, where: int | None) -> None:
    """An instance group that uses GPUs (``asks`` says how) needs a GPU build, and a GPU here to be tested."""
    if ctx.expect.gpu is False:
        ctx.error(
            where,
            f"{asks} but the project is built without GPU support (gpu = false in tbgen.toml); "
            "use kind: KIND_CPU, or render the project again with --gpu",
        )
    elif ctx.expect.gpus_visible is False:
        ctx.warn(
            where,
            f"{asks} but this machine shows no GPU: a server here refuses to load the model "
            '("no GPUs are available"); to test here use kind: KIND_CPU (a --gpu build serves CPU '
            "instances too)",
        )


def check_transaction_policy(ctx: CheckContext) -> None:
    """What a decoupled model cannot have."""
    c = ctx.config
    if c.model_transaction_policy.decoupled and c.response_cache.enable:
        ctx.error(
            ctx.line_of("response_cache"),
            "response_cache is enabled on a decoupled model, which Triton does not support; disable it",
        )
