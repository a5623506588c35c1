"""What a benchmark measures, per concurrency level, and the arithmetic on it (percentiles, ratios, JSON)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from triton_backend_gen.errors import UsageError

PERCENTILES = (50, 90, 99)


@dataclass
class Level:
    """One concurrency level: client-side figures, the server's own times (statistics extension) and the CPU
    both sides used (1.0 = one core busy for the whole measurement)."""

    concurrency: int
    requests: int
    seconds: float
    throughput: float  # inferences/s (requests/s x batch size)
    p50_us: float
    p90_us: float
    p99_us: float
    responses_per_s: float = 0.0  # decoupled models: responses streamed back per second
    server_queue_us: float = 0.0  # per request, from the server's statistics
    server_compute_us: float = 0.0  # input + infer + output, per request
    client_cpu: float = 0.0
    server_cpu: float = 0.0
    errors: int = 0


@dataclass
class BenchReport:
    model: str
    protocol: str
    tool: str  # "perf_analyzer" or "tbgen (asyncio)"
    batch_size: int
    server: str
    levels: list[Level] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def write(self, path: Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def read(cls, path: Path) -> BenchReport:
        try:
            data = json.loads(Path(path).read_text())
            levels = [Level(**level) for level in data.pop("levels")]
            return cls(**data, levels=levels)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise UsageError(
                f"{path} is not a report of `tbgen bench`: {err}",
                "Pass a file written by `tbgen bench` with --json.",
            ) from err


def percentiles(latencies_us: Sequence[float], points: Sequence[float] = PERCENTILES) -> list[float]:
    """The ``points`` percentiles of ``latencies_us`` (linear interpolation between closest ranks, as numpy's
    default); all 0.0 for no samples."""
    if not latencies_us:
        return [0.0 for _ in points]
    ordered = sorted(latencies_us)
    result = []
    for point in points:
        rank = (len(ordered) - 1) * point / 100
        low, high = math.floor(rank), math.ceil(rank)
        result.append(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))
    return result


@dataclass(frozen=True)
class Ratio:
    concurrency: int
    throughput: float  # this / other: > 1 is faster
    p50: float  # this / other: < 1 is faster
    p99: float


def compare(this: BenchReport, other: BenchReport) -> list[Ratio]:
    """Ratios at each concurrency level both reports measured."""
    theirs = {level.concurrency: level for level in other.levels}
    return [
        Ratio(
            level.concurrency,
            _ratio(level.throughput, theirs[level.concurrency].throughput),
            _ratio(level.p50_us, theirs[level.concurrency].p50_us),
            _ratio(level.p99_us, theirs[level.concurrency].p99_us),
        )
        for level in this.levels
        if level.concurrency in theirs
    ]


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf if a else 1.0


def parse_concurrency(text: str) -> list[int]:
    """ "1,8,32" -> [1, 8, 32]; UsageError for anything else."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or any(level < 1 for level in levels):
        raise UsageError(
            f"--concurrency {text!r} is not a list of positive integers.", "Example: --concurrency 1,8,32"
        )
    return levels


def parse_duration(text: str, option: str = "--duration") -> float:
    """ "10s", "500ms", "2m", "1h" or a number of seconds -> seconds; UsageError naming ``option``."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    stripped = text.strip().lower()
    for unit in ("ms", "s", "m", "h"):
        if stripped.endswith(unit):
            number, scale = stripped[: -len(unit)], units[unit]
            break
    else:
        number, scale = stripped, 1.0
    try:
        seconds = float(number) * scale
    except ValueError:
        seconds = 0.0
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{option} {text!r} is not a duration.", f"Examples: {option} 10s, 500ms, 2m, 1h")
    return seconds
