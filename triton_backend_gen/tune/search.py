"""How `tbgen tune` decides where to measure next, and what it recommends (pure decisions).

The method: a queueing model of Triton's dynamic batcher, fitted to what was measured, proposes the point to
measure; each measurement corrects it. Triton's statistics give, for every measured point, the mean rows per
execution ``k`` and the mean execution time ``t``; a least-squares line ``t = a + b k`` through them is the
cost of one execution (before any batched point is measured, ``b = 0``: optimism that sends the search to
measure batching early, where it can matter most). With ``n`` instances, max batch ``B`` and ``c`` clients
that each wait for their answer (perf_analyzer's closed loop), the batcher forms executions of
``k = min(B, c / n)`` rows; the server sustains ``n k / t(k)`` inferences/s and the clients ``c / (o + t(k) +
w)``, with ``o`` the time a request spends outside the execution (client, network, queue hand-off; fitted)
and ``w`` the queue delay the scheduler waits when batches cannot fill; throughput is the smaller of the two
and the mean latency follows from Little's law (``c / throughput``), p99 from the fitted tail ratio. What the
formula does not know (cores shared with the client, a python stub's hand-offs) is learned as a correction:
the measured/predicted ratios of measured points, weighted by how alike they are (same dimension values,
nearby concurrency), scale each prediction.

Each step measures the unmeasured point whose corrected prediction is best under the constraints, while one
still promises a gain of ``GAIN`` over the best measured. When none does, the model has no more to say, and
the best point's neighbours (one dimension changed, or the next concurrency level) are measured: what the
model does not capture shows there (a queue delay that lets batches fill when the clients would leave them
short), and a neighbour that wins makes the model search on from it. When every neighbour is measured, the
contenders within ``CONTENDING`` of the best are measured a second time (one window's luck must not pick the
recommendation), and the search has converged, before its budget when the space allows. The start
configuration is measured first, up the concurrency ladder until it saturates or passes the latency budget,
so the model is fitted from the configuration the user has.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from triton_backend_gen.tune.space import Settings, Space

GAIN = 0.03  # a point must promise 3% over the best measured to be worth measuring
CONTENDING = 0.10  # points within 10% of the best are measured twice before one is recommended
NEIGHBOR_SLACK = 0.5  # a neighbour of the best is measured unless predicted 50% past a constraint
SLACK = 0.15  # predictions within 15% of a constraint are still worth a measurement
SATURATED = 1.05  # the start's ladder stops when a level gains less than 5%
US = 1e6


@dataclass(frozen=True)
class Constraints:
    """The user's budget and goal."""

    max_p99_us: float | None = None
    min_throughput: float | None = None
    objective: str = "throughput"  # or "latency"

    def meets(self, throughput: float, p99_us: float, slack: float = 0.0) -> bool:
        """Whether a point is within the constraints (each loosened by ``slack``, a fraction)."""
        if self.max_p99_us is not None and p99_us > self.max_p99_us * (1 + slack):
            return False
        return self.min_throughput is None or throughput >= self.min_throughput * (1 - slack)

    def score(self, throughput: float, p99_us: float) -> float:
        """Larger is better: throughput, or the negative p99 for the latency objective."""
        return throughput if self.objective == "throughput" else -p99_us

    def gains(self, better: float, than: float, gain: float = GAIN) -> bool:
        """Whether score ``better`` beats ``than`` by more than ``gain`` (relative)."""
        return better > than + abs(than) * gain

    def distance(self, throughput: float, p99_us: float) -> float:
        """How far a point is from the constraints (0 within them): the larger relative shortfall."""
        over = p99_us / self.max_p99_us - 1 if self.max_p99_us else 0.0
        under = 1 - throughput / self.min_throughput if self.min_throughput else 0.0
        return max(over, under, 0.0)


@dataclass(frozen=True)
class Point:
    """One measurement: a configuration at a concurrency, what it sustained, and what the server did."""

    settings: Settings
    concurrency: int
    throughput: float  # inferences/s
    p50_us: float
    p99_us: float
    batch: float  # mean rows per execution (the server's inference / execution counts)
    exec_us: float  # mean time of one execution (compute input + infer + output)
    queue_us: float  # mean time a request waited in the queue
    elapsed_s: float  # since the search started

    @property
    def key(self) -> tuple[Settings, int]:
        return self.settings, self.concurrency


@dataclass(frozen=True)
class Fit:
    """The queueing model's parameters, fitted to the measured points."""

    fixed_us: float  # a: an execution's cost regardless of its rows
    per_row_us: float  # b: the cost of each row
    outside_us: float  # o: a request's time outside the execution
    tail: float  # p99 over the mean latency
    fill: float = 1.0  # the share of the waiting rows a batch holds when the batcher does not wait


def fit_model(points: Sequence[Point]) -> Fit:
    """The model's parameters from ``points`` (at least one)."""
    pairs = [(p.batch, p.exec_us) for p in points if p.batch > 0 and p.exec_us > 0]
    fixed, per_row = _line(pairs) if pairs else (1.0, 0.0)
    outside = _median([max(p.concurrency / p.throughput * US - p.exec_us - p.queue_us, 0.0) for p in points])
    tail = _median([max(p.p99_us / (p.concurrency / p.throughput * US), 1.0) for p in points])
    fills = [
        p.batch / _waiting(p.settings, p.concurrency)
        for p in points
        if p.settings.batching.on
        and not p.settings.batching.delay_us
        and _waiting(p.settings, p.concurrency) > 1
    ]
    fill = min(max(_median(fills), 0.2), 1.0) if fills else 1.0
    return Fit(max(fixed, 1.0), per_row, outside, tail, fill)


def predict(fit: Fit, settings: Settings, concurrency: int) -> tuple[float, float]:
    """(throughput, p99 us) the model predicts for ``settings`` at ``concurrency``."""
    top = max(settings.max_batch_size, 1)
    batching = settings.batching.on and top > 1
    waiting = _waiting(settings, concurrency) if batching else 1.0
    delay = settings.batching.delay_us if batching else 0
    # Without a delay a batch takes what waits when an instance frees (the measured fill of it); a delay lets
    # the clients that were away come back (all of them when it outlasts their time away), and the batcher
    # waits all of it for a batch it cannot fill (to the max batch size, which tune's preferred size is too).
    catch = min(delay / max(fit.outside_us, 1.0), 1.0)
    rows = max(1.0, waiting * (fit.fill + (1 - fit.fill) * catch))
    wait = delay if rows < top else 0.0
    execution = fit.fixed_us + fit.per_row_us * rows
    n = settings.instances
    capacity = n * rows / execution * US
    clients = concurrency / (fit.outside_us + execution + wait) * US
    throughput = min(capacity, clients)
    return throughput, concurrency / throughput * US * fit.tail


def _waiting(settings: Settings, concurrency: int) -> float:
    """The rows that wait for an instance when every client waits: c / n, at most the max batch size."""
    return min(float(max(settings.max_batch_size, 1)), max(1.0, concurrency / settings.instances))


def corrected(fit: Fit, points: Sequence[Point], settings: Settings, concurrency: int) -> tuple[float, float]:
    """The prediction scaled by the measured/predicted ratios of ``points``, weighted by likeness."""
    throughput, p99 = predict(fit, settings, concurrency)
    total = log_x = log_p99 = 0.0
    for point in points:
        weight = _likeness(point, settings, concurrency)
        expected_x, expected_p99 = predict(fit, point.settings, point.concurrency)
        total += weight
        log_x += weight * math.log(max(point.throughput, 1e-9) / expected_x)
        log_p99 += weight * math.log(max(point.p99_us, 1e-3) / expected_p99)
    if total == 0:
        return throughput, p99
    return throughput * math.exp(log_x / total), p99 * math.exp(log_p99 / total)


def next_point(
    space: Space,
    points: Sequence[Point],
    constraints: Constraints,
    loaded: Settings | None = None,
    skip: Collection[Settings] = (),
) -> tuple[Settings, int] | None:
    """The point to measure next (of a configuration not in ``skip``), or None when no unmeasured point
    promises a gain (converged); a tie goes to the ``loaded`` configuration, then to the lower concurrency.
    While nothing measured meets the constraints (a noisy first point can make the model think nothing
    will), the unmeasured point predicted nearest to meeting them."""
    measured = {p.key for p in points}
    points = merged(points)
    fit = fit_model(points)
    best = best_point(points, constraints)
    ranked, nearest = [], []
    for settings in space.configurations():
        if settings in skip:
            continue
        for level in space.concurrency:
            if (settings, level) in measured:
                continue
            throughput, p99 = corrected(fit, points, settings, level)
            promise = _promise(constraints, throughput, p99, best)
            if promise is not None:
                ranked.append((promise, settings == loaded, -level, settings))
            nearest.append((constraints.distance(throughput, p99), level, settings))
    if ranked:
        _, _, level, settings = max(ranked, key=lambda entry: entry[:3])
        return settings, -level
    if best is None and nearest:
        _, level, settings = min(nearest, key=lambda entry: entry[:2])
        return settings, level
    return None


def ladder_next(points: Sequence[Point], space: Space, constraints: Constraints) -> int | None:
    """The start configuration's next concurrency level, or None when its ladder is done: it passed the
    latency budget, two levels in a row gained less than ``SATURATED`` over the best below them, or it reached
    the top level."""
    mine = sorted(merged(p for p in points if p.settings == space.start), key=lambda p: p.concurrency)
    done = {p.concurrency for p in mine}
    higher = [level for level in space.concurrency if level not in done and level > max(done, default=0)]
    if not mine:
        return higher[0] if higher else None
    if constraints.max_p99_us is not None and mine[-1].p99_us > constraints.max_p99_us * (1 + SLACK):
        return None
    if len(mine) >= 3 and all(
        mine[i].throughput < max(p.throughput for p in mine[:i]) * SATURATED for i in (-1, -2)
    ):
        return None
    return higher[0] if higher else None


def neighbor_next(
    space: Space, points: Sequence[Point], constraints: Constraints, skip: Collection[Settings] = ()
) -> tuple[Settings, int] | None:
    """Once the model sees no gain: an unmeasured neighbour of the best point (one dimension changed, or the
    next concurrency level up or down), best predicted first, or None when all were measured. What the model
    does not know (a queue delay that fills batches the clients would leave short) shows up next to the best
    point; a neighbour that beats it makes it the new best, and the model searches on from there."""
    best = best_point(points, constraints)
    if best is None:
        return None
    measured = {p.key for p in points}
    fit, averaged = fit_model(merged(points)), merged(points)
    candidates = [
        (settings, level)
        for settings, level in _neighbors(space, best)
        if settings not in skip and (settings, level) not in measured
    ]
    predicted = [
        (corrected(fit, averaged, settings, level), level, settings) for settings, level in candidates
    ]
    feasible = [
        (constraints.score(*figures), -level, settings)
        for figures, level, settings in predicted
        if constraints.meets(*figures, NEIGHBOR_SLACK)
    ]
    if not feasible:
        return None
    _, level, settings = max(feasible)
    return settings, -level


def _neighbors(space: Space, best: Point) -> list[tuple[Settings, int]]:
    """The points one step from ``best``: each other value of one dimension, the adjacent concurrency
    levels."""
    found = []
    configurations = set(space.configurations())
    for name, values in space.values().items():
        for value in values:
            settings = replace(best.settings, **{name: value})
            if settings != best.settings and settings in configurations:
                found.append((settings, best.concurrency))
    levels = list(space.concurrency)
    if best.concurrency in levels:
        at = levels.index(best.concurrency)
        found += [(best.settings, levels[i]) for i in (at - 1, at + 1) if 0 <= i < len(levels)]
    return found


def confirm_next(
    points: Sequence[Point], constraints: Constraints, skip: Collection[Settings] = ()
) -> tuple[Settings, int] | None:
    """Once converged: a contender to measure again (within ``CONTENDING`` of the best under the constraints,
    measured once), or None when every contender was measured twice. On a machine whose cores the client
    shares, one window's luck must not pick the recommendation."""
    counts: dict[tuple[Settings, int], int] = {}
    for point in points:
        counts[point.key] = counts.get(point.key, 0) + 1
    averaged = merged(points)
    best = best_point(averaged, constraints)
    if best is None:
        return None
    top = constraints.score(best.throughput, best.p99_us)
    contenders = [
        p
        for p in averaged
        if constraints.meets(p.throughput, p.p99_us, SLACK)
        and constraints.score(p.throughput, p.p99_us) >= top - abs(top) * CONTENDING
        and counts[p.key] < 2
        and p.settings not in skip
    ]
    best_first = sorted(contenders, key=lambda p: -constraints.score(p.throughput, p.p99_us))
    return best_first[0].key if best_first else None


def merged(points: Iterable[Point]) -> list[Point]:
    """One point per (configuration, concurrency): the mean of its measurements, found when first measured."""
    groups: dict[tuple[Settings, int], list[Point]] = {}
    for point in points:
        groups.setdefault(point.key, []).append(point)
    return [_mean_point(group) for group in groups.values()]


def _mean_point(group: Sequence[Point]) -> Point:
    if len(group) == 1:
        return group[0]
    mean = {
        name: sum(getattr(p, name) for p in group) / len(group)
        for name in ("throughput", "p50_us", "p99_us", "batch", "exec_us", "queue_us")
    }
    return replace(group[0], **mean)


def best_point(points: Iterable[Point], constraints: Constraints) -> Point | None:
    """The measured point (measurements of one point averaged) that meets the constraints with the best
    score, if any."""
    meeting = [p for p in merged(points) if constraints.meets(p.throughput, p.p99_us)]
    return max(meeting, key=lambda p: constraints.score(p.throughput, p.p99_us), default=None)


def recommend(points: Sequence[Point], constraints: Constraints, start: Settings) -> Point | None:
    """The best point under the constraints; the start configuration's best instead when the best beats it
    by no more than ``GAIN`` (a change within the noise of a measurement is no recommendation)."""
    best = best_point(points, constraints)
    own = best_point([p for p in points if p.settings == start], constraints)
    if best is None or own is None or best.settings == start:
        return best
    score = constraints.score
    return (
        best
        if constraints.gains(score(best.throughput, best.p99_us), score(own.throughput, own.p99_us))
        else own
    )


def closest_point(points: Iterable[Point], constraints: Constraints) -> Point | None:
    """The measured point nearest to meeting the constraints (when none meets them)."""
    return min(merged(points), key=lambda p: constraints.distance(p.throughput, p.p99_us), default=None)


def pareto_front(points: Iterable[Point]) -> list[Point]:
    """The points no other beats on both throughput (higher) and p99 (lower), by rising p99."""
    front: list[Point] = []
    for point in sorted(merged(points), key=lambda p: (p.p99_us, -p.throughput)):
        if not front or point.throughput > front[-1].throughput:
            front.append(point)
    return front


def _promise(constraints: Constraints, throughput: float, p99: float, best: Point | None) -> float | None:
    """The predicted score of a candidate worth measuring, else None."""
    if not constraints.meets(throughput, p99, SLACK):
        return None
    score = constraints.score(throughput, p99)
    if best is not None and not constraints.gains(score, constraints.score(best.throughput, best.p99_us)):
        return None
    return score


def _likeness(point: Point, settings: Settings, concurrency: int) -> float:
    """How much a measured point's correction applies to another: 1 for the same point, halved for each
    dimension that differs and for each doubling of concurrency between them."""
    differ = sum(
        getattr(point.settings, name) != getattr(settings, name)
        for name in ("instances", "max_batch_size", "batching", "strategy_limit")
    )
    octaves = abs(math.log2(point.concurrency) - math.log2(concurrency))
    return 0.5 ** (differ + octaves)


def _line(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ``pairs``, both at least 0; slope 0 without a spread of x."""
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    if statistics.pvariance(xs) < 0.25 or max(xs) < 1.5:
        return statistics.fmean(ys), 0.0
    slope = max(statistics.linear_regression(xs, ys).slope, 0.0)
    return max(statistics.fmean(ys) - slope * statistics.fmean(xs), 0.0), slope


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0
