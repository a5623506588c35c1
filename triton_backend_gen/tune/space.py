"""The configuration space `tbgen tune` searches, derived from the model's own config.pbtxt (pure decisions).

A point of the space is a :class:`Settings` (instance count, max batch size, dynamic batching with its queue
delay and preferred batch size, the batching strategy's limit) measured at a client concurrency. The values
of each dimension:

- ``instances``: 1 up to the machine's cores for KIND_CPU instances (more would only share them), 1 to 4 per
  GPU for KIND_GPU; only where the model has one instance group (several groups are tuned by hand);
- ``max_batch_size``: the model's own and the powers of two above it up to four times it (at most 128), where
  the model batches and is not a sequence model: never lower, since clients may send requests of that many
  rows; a generated backend takes any size. Without dynamic batching it is moot (every execution is one
  request), so only the model's own;
- ``batching``: dynamic batching off, on with no queue delay, with 500 us, and with 2 ms plus the max batch
  size as the preferred size (the scheduler then waits for full batches); not ``off`` for a model with a
  batching strategy (the strategy runs inside the dynamic batcher);
- ``strategy_limit``: half, once and twice the strategy's limit (MAX_BATCH_* parameter), where it has one;
- the client concurrency: powers of two up to 64, at most 16 clients per core (``auto``), or the list given.

The model's own value of every dimension is always among its values, so the start configuration is a point.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from triton_backend_gen.errors import UsageError
from triton_backend_gen.lazy import lazy_module

model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

DIMENSIONS = ("instances", "max_batch_size", "batching", "strategy_limit")
AUTO_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
CLIENTS_PER_CORE = 16  # auto's levels stop at 16 clients per core: past it the clients measure the scheduler
MAX_BATCH_CEILING = 128
GPU_INSTANCES = 4
# The batching choices beside "off": (queue delay in microseconds, the max batch size preferred).
BATCHING_CHOICES = ((0, False), (500, False), (2000, True))
# A batching strategy's limit parameter (smoke.batching and the templates use the same names).
STRATEGY_LIMIT_KEYS = ("MAX_BATCH_VOLUME_BYTES", "MAX_BATCH_ELEMENTS", "MAX_BATCH_REQUESTS")


@dataclass(frozen=True, order=True)
class Batching:
    """Dynamic batching: off, or on with a queue delay (us) and whether the max batch size is preferred."""

    on: bool
    delay_us: int = 0
    prefer_max: bool = False

    def __str__(self) -> str:
        if not self.on:
            return "off"
        return f"{self.delay_us}us" + (" full" if self.prefer_max else "")


OFF = Batching(False)


@dataclass(frozen=True, order=True)
class Settings:
    """One configuration: the values of the tuned dimensions."""

    instances: int
    max_batch_size: int
    batching: Batching
    strategy_limit: int | None = None

    def as_dict(self) -> dict:
        """The settings as JSON values (results.jsonl's ``settings``)."""
        values = {
            "instances": self.instances,
            "max_batch_size": self.max_batch_size,
            "batching": str(self.batching),
        }
        if self.strategy_limit is not None:
            values["strategy_limit"] = self.strategy_limit
        return values

    def label(self) -> str:
        """A short name: "2 inst, batch 16, dyn 500us"."""
        parts = [f"{self.instances} inst", f"batch {self.max_batch_size}"]
        parts.append("no dyn" if not self.batching.on else f"dyn {self.batching}")
        if self.strategy_limit is not None:
            parts.append(f"limit {self.strategy_limit}")
        return ", ".join(parts)

    def differences(self, start: Settings) -> dict:
        """The settings that differ from ``start`` (results.jsonl's ``config``)."""
        mine, theirs = self.as_dict(), start.as_dict()
        return {key: value for key, value in mine.items() if theirs.get(key) != value}


@dataclass(frozen=True)
class Space:
    """The values of each dimension, the start, and the concurrency levels."""

    start: Settings
    instances: tuple[int, ...]
    max_batch_sizes: tuple[int, ...]
    batchings: tuple[Batching, ...]
    strategy_limits: tuple[int | None, ...]
    concurrency: tuple[int, ...]
    fixed: dict[str, str] = field(default_factory=dict)  # dimension -> why it is not searched

    def configurations(self) -> list[Settings]:
        """Every distinct configuration: without dynamic batching the max batch size is the model's own (it
        only bounds a request's rows then), and at max batch size 1 batching is off or as the model has it."""
        found = []
        for n, b, batching, limit in itertools.product(
            self.instances, self.max_batch_sizes, self.batchings, self.strategy_limits
        ):
            if not batching.on and b != self.start.max_batch_size:
                continue
            if b == 1 and batching not in (OFF, self.start.batching):
                continue
            found.append(Settings(n, b, batching, limit))
        return sorted(set(found), key=lambda s: (s != self.start, s))

    def size(self) -> int:
        return len(self.configurations()) * len(self.concurrency)

    def values(self) -> dict[str, tuple]:
        """Each dimension's values, by its name (a Settings field)."""
        return {
            "instances": self.instances,
            "max_batch_size": self.max_batch_sizes,
            "batching": self.batchings,
            "strategy_limit": self.strategy_limits,
        }


def plan_space(
    config,
    *,
    cores: int,
    dimensions: Sequence[str] = DIMENSIONS,
    concurrency: Sequence[int] | None = None,
) -> Space:
    """The space of ``config`` (a ModelConfig message) searched over ``dimensions``; UsageError for a name
    that is no dimension or a model tune cannot reconfigure."""
    unknown = [name for name in dimensions if name not in DIMENSIONS]
    if unknown:
        raise UsageError(
            f"--dimensions {','.join(unknown)}: no such dimension.",
            f"Use a comma-separated list of {', '.join(DIMENSIONS)}.",
        )
    if config.platform == "ensemble":
        steps = [step.model_name for step in config.ensemble_scheduling.step]
        raise UsageError(
            f"{config.name} is an ensemble: it has no instances or batcher of its own to tune.",
            f"Tune its composing models ({', '.join(steps) or 'its steps'}), each with `tbgen tune --model "
            f"{steps[0] if steps else config.name}`.",
        )
    start = settings_of(config)
    fixed: dict[str, str] = {}
    values = {
        "instances": _instance_values(config, cores, fixed),
        "max_batch_size": _batch_values(config, fixed),
        "batching": _batching_values(config, start, fixed),
        "strategy_limit": _limit_values(start),
    }
    for name in DIMENSIONS:
        if name not in dimensions and len(values[name]) > 1:
            values[name] = (getattr(start, name),)
            fixed[name] = "not in --dimensions"
    levels = tuple(sorted(set(concurrency or auto_concurrency(cores))))
    return Space(
        start,
        values["instances"],
        values["max_batch_size"],
        values["batching"],
        values["strategy_limit"],
        levels,
        fixed,
    )


def auto_concurrency(cores: int) -> tuple[int, ...]:
    """``auto``'s concurrency levels on a machine of ``cores``: powers of two to 64, at most 16 per core."""
    return tuple(level for level in AUTO_CONCURRENCY if level <= max(cores, 1) * CLIENTS_PER_CORE)


def settings_of(config) -> Settings:
    """The settings a ModelConfig message has now."""
    groups = list(config.instance_group)
    instances = groups[0].count or 1 if len(groups) == 1 else sum(g.count or 1 for g in groups) or 1
    if not config.HasField("dynamic_batching"):
        batching = OFF
    else:
        dynamic = config.dynamic_batching
        preferred = list(dynamic.preferred_batch_size)
        prefer_max = bool(preferred) and preferred == [config.max_batch_size]
        batching = Batching(True, int(dynamic.max_queue_delay_microseconds), prefer_max)
    return Settings(max(instances, 1), config.max_batch_size, batching, strategy_limit_of(config))


def strategy_limit_of(config) -> int | None:
    """The batching strategy's limit parameter of ``config``, when it has one."""
    for key in STRATEGY_LIMIT_KEYS:
        if key in config.parameters:
            try:
                return int(config.parameters[key].string_value)
            except ValueError:
                return None
    return None


def configure(config, settings: Settings):
    """A copy of ``config`` (a ModelConfig message) with ``settings`` (the space's dimensions only); a
    dimension at the model's own value stays as config.pbtxt has it (preferred batch sizes, groups)."""
    start = settings_of(config)
    changed = copy.deepcopy(config)
    if settings.instances != start.instances:
        if len(changed.instance_group) == 1:
            changed.instance_group[0].count = settings.instances
        elif not changed.instance_group:
            changed.instance_group.add(count=settings.instances)
    changed.max_batch_size = settings.max_batch_size
    if settings.batching != start.batching or (
        settings.batching.prefer_max and settings.max_batch_size != start.max_batch_size
    ):
        _set_batching(changed, settings)
    if settings.strategy_limit is not None:
        for key in STRATEGY_LIMIT_KEYS:
            if key in changed.parameters:
                changed.parameters[key].string_value = str(settings.strategy_limit)
    return changed


def _set_batching(config, settings: Settings) -> None:
    """``config``'s dynamic batcher as ``settings`` have it (no batcher for off; a sequence model's stays)."""
    if not settings.batching.on:
        config.ClearField("dynamic_batching")
        return
    if config.HasField("sequence_batching"):
        return
    dynamic = config.dynamic_batching
    dynamic.SetInParent()
    dynamic.max_queue_delay_microseconds = settings.batching.delay_us
    del dynamic.preferred_batch_size[:]
    if settings.batching.prefer_max:
        dynamic.preferred_batch_size.append(settings.max_batch_size)


def _instance_values(config, cores: int, fixed: dict[str, str]) -> tuple[int, ...]:
    groups = list(config.instance_group)
    own = settings_of(config).instances
    if len(groups) > 1:
        fixed["instances"] = "the model has several instance groups"
        return (own,)
    gpu = bool(groups) and groups[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    top = GPU_INSTANCES if gpu else max(cores, 1)
    return tuple(sorted(set(range(1, top + 1)) | {own}))


def _batch_values(config, fixed: dict[str, str]) -> tuple[int, ...]:
    own = config.max_batch_size
    if own == 0:
        fixed["max_batch_size"] = "the model does not batch (max_batch_size 0)"
        return (0,)
    if config.HasField("sequence_batching"):
        fixed["max_batch_size"] = "a sequence model's batch holds its sequences' slots"
        return (own,)
    top = max(min(own * 4, MAX_BATCH_CEILING), own)
    powers = {2**i for i in range(8) if own < 2**i <= top}
    return tuple(sorted(powers | {own}))


def _batching_values(config, start: Settings, fixed: dict[str, str]) -> tuple[Batching, ...]:
    if config.max_batch_size == 0 or config.HasField("sequence_batching"):
        fixed["batching"] = (
            "a sequence model is batched by its sequence batcher"
            if config.HasField("sequence_batching")
            else "the model does not batch (max_batch_size 0)"
        )
        return (start.batching,)
    choices = [Batching(True, delay, prefer) for delay, prefer in BATCHING_CHOICES]
    if start.strategy_limit is None:
        choices.insert(0, OFF)
    return tuple(sorted(set(choices) | {start.batching}))


def _limit_values(start: Settings) -> tuple[int | None, ...]:
    if start.strategy_limit is None:
        return (None,)
    limit = start.strategy_limit
    return tuple(sorted({max(limit // 2, 1), limit, limit * 2}))
