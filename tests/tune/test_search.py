"""tune's decisions without a server: the space a model's config gives, the queueing model's fit, where the
search measures next, the Pareto front and the recommendation; and the search as a whole against a simulated
server whose response is known (a + b x batch executions): it reaches the best under the budget in a fraction
of the points of the grid."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from triton_backend_gen.errors import UsageError
from triton_backend_gen.tune import search
from triton_backend_gen.tune.results import parse_batching, point_of, record
from triton_backend_gen.tune.search import Constraints, Point
from triton_backend_gen.tune.space import OFF, Batching, Settings, configure, plan_space, settings_of


def model_config(max_batch_size=8, count=1, dynamic=True, **extra) -> pb.ModelConfig:
    config = pb.ModelConfig(name="m", backend="python", max_batch_size=max_batch_size, **extra)
    config.instance_group.add(count=count, kind=pb.ModelInstanceGroup.KIND_CPU)
    if dynamic:
        config.dynamic_batching.SetInParent()
    return config


def test_the_space_starts_from_the_models_own_configuration_and_never_lowers_its_max_batch_size():
    config = model_config(max_batch_size=8, count=1)
    config.dynamic_batching.max_queue_delay_microseconds = 100
    space = plan_space(config, cores=2)
    assert space.start == Settings(1, 8, Batching(True, 100))
    assert space.instances == (1, 2)
    assert space.max_batch_sizes == (8, 16, 32)
    assert Batching(True, 100) in space.batchings and OFF in space.batchings
    configurations = space.configurations()
    assert configurations[0] == space.start
    # Without dynamic batching the max batch size only bounds a request: the model's own only.
    assert {s.max_batch_size for s in configurations if not s.batching.on} == {8}
    assert len(configurations) == len(set(configurations))
    assert space.concurrency == (1, 2, 4, 8, 16, 32)  # auto: at most 16 clients per core
    assert space.size() == len(configurations) * 6
    assert plan_space(config, cores=8).concurrency[-1] == 64


def test_dimensions_a_model_cannot_vary_are_fixed_and_said_why():
    sequence = model_config(max_batch_size=4, dynamic=False)
    sequence.sequence_batching.SetInParent()
    space = plan_space(sequence, cores=4)
    assert space.max_batch_sizes == (4,) and "sequence" in space.fixed["max_batch_size"]
    assert len(space.batchings) == 1 and "batching" in space.fixed
    unbatched = plan_space(model_config(max_batch_size=0, dynamic=False), cores=2)
    assert unbatched.max_batch_sizes == (0,) and unbatched.batchings == (OFF,)
    chosen = plan_space(model_config(), cores=2, dimensions=["instances"])
    assert chosen.max_batch_sizes == (8,) and chosen.fixed["max_batch_size"] == "not in --dimensions"
    assert chosen.instances == (1, 2)


def test_a_strategy_keeps_dynamic_batching_and_its_limit_is_a_dimension():
    config = model_config()
    config.parameters["MAX_BATCH_VOLUME_BYTES"].string_value = "1024"
    space = plan_space(config, cores=1)
    assert space.strategy_limits == (512, 1024, 2048)
    assert OFF not in space.batchings
    changed = configure(config, Settings(1, 16, Batching(True, 500), 2048))
    assert changed.parameters["MAX_BATCH_VOLUME_BYTES"].string_value == "2048"


def test_bad_dimensions_and_ensembles_are_refused():
    with pytest.raises(UsageError, match="no such dimension"):
        plan_space(model_config(), cores=2, dimensions=["instances", "threads"])
    with pytest.raises(UsageError, match="ensemble"):
        plan_space(pb.ModelConfig(name="e", platform="ensemble"), cores=2)


def test_configure_writes_each_setting_and_settings_of_reads_them_back():
    config = model_config()
    for settings in (
        Settings(2, 16, Batching(True, 2000, True)),
        Settings(1, 8, OFF),
        Settings(2, 32, Batching(True, 0)),
    ):
        changed = configure(config, settings)
        assert settings_of(changed) == settings
    full = configure(config, Settings(2, 16, Batching(True, 2000, True)))
    assert list(full.dynamic_batching.preferred_batch_size) == [16]
    assert not configure(config, Settings(1, 8, OFF)).HasField("dynamic_batching")
    assert config.instance_group[0].count == 1  # the model's own config is left as it was
    # What stays at the model's own value stays as config.pbtxt has it: preferred sizes, no instance group.
    own = model_config(max_batch_size=8)
    own.dynamic_batching.preferred_batch_size.extend([4, 8])
    del own.instance_group[:]
    start = settings_of(own)
    assert configure(own, start) == own
    assert list(configure(own, Settings(1, 16, start.batching)).dynamic_batching.preferred_batch_size) == [
        4,
        8,
    ]


def test_results_lines_round_trip_and_say_their_role():
    start = Settings(1, 8, Batching(True, 0))
    point = Point(Settings(2, 16, Batching(True, 500)), 16, 900.0, 17000.0, 21000.0, 8.0, 18000.0, 50.0, 12.5)
    entry = record(point, start, Constraints(max_p99_us=20000))
    assert entry["config"] == {"instances": 2, "max_batch_size": 16, "batching": "500us"}
    assert entry["role"] == "point" and entry["meets"] is False
    assert point_of(entry) == point
    assert record(Point(start, 1, 1, 1, 1, 1, 1, 1, 0), start, Constraints())["role"] == "start"
    assert parse_batching("2000us full") == Batching(True, 2000, True) and parse_batching("off") == OFF
    with pytest.raises(ValueError):
        parse_batching("sometimes")


# --- the search against a simulated server ---------------------------------------------------------------

A_US, B_US, OUTSIDE_US = 10_000.0, 1_000.0, 300.0


def simulated(settings: Settings, level: int, elapsed: float, filling: float = 1.0) -> Point:
    """What a server whose executions take a + b k (slept) sustains at ``level`` clients, with a 15% tail;
    without a queue delay, batches hold ``filling`` of the rows waiting (the clients' own time leaves them
    short: the formula of tune's model assumes they are full)."""
    n, top = settings.instances, settings.max_batch_size
    rows = min(top, max(1.0, level / n)) if settings.batching.on else 1.0
    if settings.batching.on and not settings.batching.delay_us:
        rows = max(1.0, rows * filling)
    execution = A_US + B_US * rows
    wait = settings.batching.delay_us if settings.batching.on and rows < top else 0
    throughput = min(n * rows / execution, level / (OUTSIDE_US + execution + wait)) * 1e6
    mean = level / throughput * 1e6
    return Point(settings, level, throughput, mean, mean * 1.15, rows, execution, mean - execution, elapsed)


def run_search(space, constraints, grid=False, filling=1.0) -> list[Point]:
    points: list[Point] = []
    while True:
        if grid:
            measured = {p.key for p in points}
            step = next(
                ((s, c) for s in space.configurations() for c in space.concurrency if (s, c) not in measured),
                None,
            )
        else:
            level = search.ladder_next(points, space, constraints)
            step = (
                (space.start, level)
                if level
                else search.next_point(space, points, constraints)
                or search.neighbor_next(space, points, constraints)
                or search.confirm_next(points, constraints)
            )
        if step is None:
            return points
        points.append(simulated(*step, elapsed=len(points) + 1, filling=filling))


def test_the_search_reaches_the_best_under_the_budget_in_a_fraction_of_the_grids_points():
    space = plan_space(model_config(max_batch_size=8), cores=2)
    constraints = Constraints(max_p99_us=60_000)
    grid = run_search(space, constraints, grid=True)
    best = search.best_point(grid, constraints)
    tuned = run_search(space, constraints)
    found = search.best_point(tuned, constraints)
    assert found.throughput >= best.throughput * 0.95
    reached = min(p.elapsed_s for p in tuned if p.throughput >= best.throughput * 0.95 and p.p99_us <= 60_000)
    assert reached * 4 <= len(grid), (reached, len(grid))
    assert len(tuned) < len(grid) / 3  # it stopped by itself (converged), long before the grid's end


def test_what_the_model_misses_is_found_next_to_the_best_point():
    # Batches without a queue delay hold 60% of what waits: a delay that lets them fill wins, which the model
    # (full batches either way, the delay only a cost) cannot foresee; the best point's neighbours show it.
    space = plan_space(model_config(max_batch_size=8), cores=2)
    constraints = Constraints(max_p99_us=60_000)
    grid = run_search(space, constraints, grid=True, filling=0.6)
    best = search.best_point(grid, constraints)
    assert best.settings.batching.delay_us > 0
    tuned = run_search(space, constraints, filling=0.6)
    assert search.best_point(tuned, constraints).throughput >= best.throughput * 0.95
    assert len(tuned) * 3 < len(grid)


def test_the_fit_recovers_the_execution_cost_from_batched_points():
    points = [simulated(Settings(1, 32, Batching(True, 0)), level, 0) for level in (1, 4, 16, 32)]
    fit = search.fit_model(points)
    assert math.isclose(fit.fixed_us, A_US, rel_tol=0.01) and math.isclose(fit.per_row_us, B_US, rel_tol=0.01)
    # Before any batched point, the cost is taken as fixed (optimism: batching is worth measuring).
    alone = search.fit_model([simulated(Settings(1, 8, OFF), 1, 0)])
    assert alone.per_row_us == 0 and alone.fixed_us == pytest.approx(A_US + B_US)


def test_the_start_ladder_stops_past_the_budget_and_when_it_stops_gaining():
    space = plan_space(model_config(), cores=1)
    constraints = Constraints(max_p99_us=30_000)
    points = []
    while (level := search.ladder_next(points, space, constraints)) is not None:
        points.append(simulated(space.start, level, 0))
    # At 16 clients, batches of 8 rows take 18 ms: 444 inf/s, a mean of 36 ms, p99 41 ms > 30 ms * 1.15.
    assert [p.concurrency for p in points] == [1, 2, 4, 8, 16]
    saturated = [Point(space.start, c, 100.0, 1, 1, 1, 1, 1, 0) for c in (1, 2, 4)]
    assert search.ladder_next(saturated, space, Constraints()) is None


def test_the_front_the_recommendation_and_the_closest_when_nothing_meets_the_budget():
    s = Settings(1, 8, OFF)
    points = [
        Point(s, 1, 100.0, 1, 1_000.0, 1, 1, 1, 0),
        Point(s, 2, 90.0, 1, 2_000.0, 1, 1, 1, 0),  # beaten on both
        Point(s, 4, 300.0, 1, 5_000.0, 1, 1, 1, 0),
        Point(s, 4, 500.0, 1, 5_000.0, 1, 1, 1, 0),  # measured twice: averaged to 400
    ]
    front = search.pareto_front(points)
    assert [(p.concurrency, p.throughput) for p in front] == [(1, 100.0), (4, 400.0)]
    assert search.best_point(points, Constraints(max_p99_us=4_000)).concurrency == 1
    assert search.best_point(points, Constraints(objective="latency", min_throughput=200)).throughput == 400
    tight = Constraints(max_p99_us=500)
    assert search.best_point(points, tight) is None
    assert search.closest_point(points, tight).concurrency == 1


def test_a_first_point_past_the_budget_does_not_end_the_search():
    # The start's one point has a p99 five times its mean (a noisy machine): the model then predicts every
    # point past the budget, yet the search goes on to the point nearest to meeting it, and finds one.
    space = plan_space(model_config(), cores=2, concurrency=(1, 4, 16))
    constraints = Constraints(max_p99_us=60_000)
    first = simulated(space.start, 1, 1)
    points = [replace(first, p99_us=first.p99_us * 5)]
    while (step := search.next_point(space, points, constraints)) is not None and len(points) < 30:
        points.append(simulated(*step, elapsed=len(points) + 1))
    assert search.best_point(points, constraints) is not None
