"""What a soak measured, judged: memory that grows with the requests served (a leak, with its slope and the
process it is in) and latency that drifts. Pure functions over the soak's samples; smoke.soak takes them.

Both fits are Theil-Sen lines (the median of the slopes between every pair of points): a single step (a pool
that grows once, an allocator arena, a burst of another program's load) moves few pairwise slopes, while a
leak moves them all. Only samples after the warm-up count (imports, caches, thread pools and the allocator's
arenas fill first).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

KIB, MIB = 1024, 1024 * 1024

# A leak: memory that grows more than 16 KiB per 1,000 requests served after the warm-up (16 bytes a
# request: the smallest allocation glibc makes is 32 bytes, so one object lost every other request) ...
LEAK_BYTES_PER_REQUEST = 16 * 1024 / 1000
# ... and by more than this much over the fitted stretch: a clean generated backend's largest growth seen
# here was 0.1 MiB (a 15 s soak, its server's allocator settling), a leak's grows with the soak.
LEAK_MIN_GROWTH = MIB // 2
# Latency drift: the fitted typical latency at the end at least this many times that at the start ...
DRIFT_RATIO = 1.5
# ... at least this much slower in absolute terms (a 0.2 ms model drifting to 0.4 ms is noise here) ...
DRIFT_MIN_US = 2000.0
# ... and rising through the stretch: the median of each of its thirds above the one before (another
# program's load that comes and goes, on a shared machine, moves one third, not all three in order).
# ... over at least this long after the warm-up: on a shared machine, another program's load can ramp up
# through a 10 s stretch and double a clean model's latency in order (seen in the suite: 3.0 -> 6.0 ms).
DRIFT_MIN_STRETCH_S = 14.0
WARMUP_SHARE = 0.2  # the first 20% of the run (at least WARMUP_MIN_S) is warm-up
WARMUP_MIN_S = 5.0
_MOST_POINTS = 400  # Theil-Sen over at most this many points (evenly picked): 80,000 pairs


@dataclass(frozen=True)
class Line:
    slope: float
    intercept: float

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


def theil_sen(xs: Sequence[float], ys: Sequence[float]) -> Line | None:
    """The Theil-Sen line through the points (None with fewer than 3 distinct x)."""
    points = _thinned(list(zip(xs, ys, strict=True)))
    slopes = [
        (y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1 :] if x2 != x1
    ]
    if len({x for x, _ in points}) < 3 or not slopes:
        return None
    slope = statistics.median(slopes)
    return Line(slope, statistics.median(y - slope * x for x, y in points))


def _thinned(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= _MOST_POINTS:
        return points
    step = len(points) / _MOST_POINTS
    return [points[int(i * step)] for i in range(_MOST_POINTS)]


def warmup_seconds(duration_s: float) -> float:
    """How long a soak of ``duration_s`` warms up before its samples count."""
    return min(duration_s / 2, max(WARMUP_MIN_S, duration_s * WARMUP_SHARE))


@dataclass(frozen=True)
class MemoryGrowth:
    """One process's private memory over the fitted stretch of a soak."""

    process: str  # "tritonserver", "python stub add_sub add_sub_0_0"
    bytes_per_request: float  # the fitted slope against the requests it served
    requests: int  # requests served over the fitted stretch
    seconds: float  # the fitted stretch's length
    first: int  # bytes at the stretch's start and end (as sampled)
    last: int
    leaks: bool

    @property
    def growth(self) -> float:
        """Bytes the fit says the stretch added."""
        return self.bytes_per_request * self.requests

    @property
    def mib_per_hour(self) -> float:
        """The growth at the measured request rate, in MiB per hour."""
        rate = self.requests / self.seconds if self.seconds > 0 else 0.0
        return self.bytes_per_request * rate * 3600 / MIB

    def describe(self) -> str:
        per_thousand = self.bytes_per_request * 1000 / KIB
        rate = self.requests / max(self.seconds, 1e-9)
        told = (
            f"{per_thousand:+.2f} KiB per 1,000 requests ({self.mib_per_hour:+.1f} MiB per "
            f"hour at {rate:,.0f} requests/s); {self.first / MIB:.1f} -> {self.last / MIB:.1f} MiB private "
            f"over {self.requests:,} requests after the warm-up"
        )
        if self.leaks:
            return (
                f"a leak: {told} (more than {LEAK_BYTES_PER_REQUEST * 1000 / KIB:.1f} KiB per 1,000 requests)"
            )
        return told


def memory_growth(
    process: str, points: Sequence[tuple[float, int, int]], warmup_s: float
) -> MemoryGrowth | None:
    """The growth of one process from its samples (seconds, requests served, bytes); None with too few samples
    after the warm-up."""
    kept = [p for p in points if p[0] >= warmup_s]
    line = theil_sen([p[1] for p in kept], [p[2] for p in kept]) if len(kept) >= 3 else None
    if line is None:
        return None
    requests = kept[-1][1] - kept[0][1]
    growth = line.slope * requests
    return MemoryGrowth(
        process,
        line.slope,
        requests,
        kept[-1][0] - kept[0][0],
        kept[0][2],
        kept[-1][2],
        line.slope > LEAK_BYTES_PER_REQUEST and growth > LEAK_MIN_GROWTH,
    )


@dataclass(frozen=True)
class LatencyDrift:
    """A model's request latency over the fitted stretch of a soak."""

    start_us: float  # the fitted typical latency at the stretch's first and last request
    end_us: float
    drifts: bool
    judged: bool = True  # False: the stretch was too short to tell a drift from the machine's load

    def describe(self) -> str:
        told = f"typical latency {self.start_us / 1000:.2f} -> {self.end_us / 1000:.2f} ms over the soak"
        if self.drifts:
            return f"latency drifts: {told} (at least {DRIFT_RATIO:g}x and {DRIFT_MIN_US / 1000:g} ms slower)"
        if not self.judged:
            return f"{told} (not judged: under {DRIFT_MIN_STRETCH_S:g} s after the warm-up)"
        return told


def latency_drift(points: Sequence[tuple[float, int, float]], warmup_s: float) -> LatencyDrift | None:
    """The drift of a model's latency from its answers (seconds, requests served before it, latency in us);
    None with too few answers after the warm-up."""
    kept = [p for p in points if p[0] >= warmup_s]
    line = theil_sen([p[1] for p in kept], [p[2] for p in kept]) if len(kept) >= 10 else None
    if line is None:
        return None
    start, end = max(line.at(kept[0][1]), 1.0), max(line.at(kept[-1][1]), 1.0)
    if kept[-1][0] - kept[0][0] < DRIFT_MIN_STRETCH_S:
        return LatencyDrift(start, end, False, judged=False)
    drifts = end >= DRIFT_RATIO * start and end - start >= DRIFT_MIN_US and _rises(kept)
    return LatencyDrift(start, end, drifts)


def _rises(points: Sequence[tuple[float, int, float]]) -> bool:
    """Whether the median latency of each third of ``points`` (by time) is above the one before."""
    first, last = points[0][0], points[-1][0]
    third = (last - first) / 3 or 1.0
    medians = []
    for index in range(3):
        latencies = [p[2] for p in points if min(2, int((p[0] - first) / third)) == index]
        if not latencies:
            return False
        medians.append(statistics.median(latencies))
    return medians[0] < medians[1] < medians[2]


@dataclass(frozen=True)
class Window:
    """One stretch of a soak (a minute, or less for a short one): its answers' percentiles."""

    start_s: float
    end_s: float
    answers: int
    p50_us: float
    p99_us: float


def stretch_seconds(duration_s: float) -> float:
    """A stretch of a soak: a minute; a quarter of a soak under 4 minutes (a drift still shows)."""
    return 60.0 if duration_s >= 240 else duration_s / 4


def stretch_of(seconds: float, duration_s: float) -> int:
    """The stretch an answer ``seconds`` into a soak of ``duration_s`` falls in (the end: the last one)."""
    length = stretch_seconds(duration_s)
    return max(0, min(int(seconds // length), math.ceil(duration_s / length - 1e-9) - 1))


def window(index: int, duration_s: float, latencies: Sequence[float], answers: int) -> Window | None:
    """Stretch ``index`` of a soak of ``duration_s`` from (a uniform sample of) its ``latencies`` and the
    count of its ``answers``; None for a stretch without one. Percentiles by linear interpolation between
    closest ranks, as numpy's default and `tbgen bench`'s."""
    if not latencies:
        return None
    length = stretch_seconds(duration_s)
    start, end = index * length, min((index + 1) * length, duration_s)
    if len(latencies) == 1:
        return Window(start, end, answers, latencies[0], latencies[0])
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return Window(start, end, answers, cuts[49], cuts[98])


def windows(points: Sequence[tuple[float, int, float]], duration_s: float) -> list[Window]:
    """The percentiles of each stretch of a soak from its answers (seconds, served before, latency in us)."""
    by_stretch: dict[int, list[float]] = {}
    for seconds, _, latency in points:
        by_stretch.setdefault(stretch_of(seconds, duration_s), []).append(latency)
    found = (window(i, duration_s, kept, len(kept)) for i, kept in sorted(by_stretch.items()))
    return [w for w in found if w is not None]
