"""The soak's verdicts (smoke.growth) on samples made here: a steady leak is found with its slope, a single
step or noise is not; a latency that grows with requests drifts, one that jitters does not; the percentiles
per stretch. And the soak's options as the CLI refuses them."""

from __future__ import annotations

import random

import pytest
from conftest import new_project, run_tbgen

from triton_backend_gen.smoke.growth import (
    KIB,
    LEAK_BYTES_PER_REQUEST,
    MIB,
    latency_drift,
    memory_growth,
    theil_sen,
    warmup_seconds,
    windows,
)


def _samples(bytes_per_request: float, *, step_at: int | None = None, noise: int = 0, seed: int = 0):
    """120 samples a second apart, 1,000 requests each, from 50 MiB; optionally a 1 MiB step once and
    +-``noise`` bytes of jitter."""
    rng = random.Random(seed)
    points = []
    for second in range(120):
        requests = second * 1000
        memory = 50 * MIB + bytes_per_request * requests + rng.randint(-noise, noise)
        if step_at is not None and second >= step_at:
            memory += MIB
        points.append((float(second), requests, int(memory)))
    return points


def test_theil_sen_ignores_a_single_step_that_least_squares_would_follow():
    xs = list(range(100))
    ys = [0.0 if x < 60 else 100.0 for x in xs]
    assert theil_sen(xs, ys).slope == 0.0
    line = theil_sen(xs, [3.0 * x + 7 for x in xs])
    assert line.slope == pytest.approx(3.0) and line.at(10) == pytest.approx(37.0)
    assert theil_sen([1, 1, 1], [1, 2, 3]) is None  # no spread in x: no line


def test_a_steady_leak_is_found_with_its_slope_and_rate():
    growth = memory_growth("tritonserver", _samples(96, noise=64 * KIB), warmup_seconds(120))
    assert growth.leaks
    assert growth.bytes_per_request == pytest.approx(96, rel=0.05)
    assert growth.mib_per_hour == pytest.approx(96 * 1000 * 3600 / MIB, rel=0.05)
    assert growth.describe().startswith("a leak: +93.")
    assert growth.describe().endswith("(more than 16.0 KiB per 1,000 requests)")


def test_a_step_noise_or_a_slope_under_the_threshold_is_no_leak():
    warmup = warmup_seconds(120)
    assert not memory_growth("stub", _samples(0, step_at=70, noise=128 * KIB), warmup).leaks
    below = memory_growth("stub", _samples(LEAK_BYTES_PER_REQUEST / 2, noise=32 * KIB), warmup)
    assert not below.leaks and below.bytes_per_request == pytest.approx(LEAK_BYTES_PER_REQUEST / 2, rel=0.2)
    # above the slope but too little in all (a short soak): no verdict of a leak on 0.2 MiB
    short = [p for p in _samples(64) if p[0] < 8]
    assert memory_growth("stub", short, 2.0) is not None and not memory_growth("stub", short, 2.0).leaks


def test_samples_in_the_warm_up_do_not_count():
    points = [(s, r, m + (20 * MIB if s < 20 else 0)) for s, r, m in _samples(0)]  # falls once warm
    assert not memory_growth("stub", points, 24.0).leaks
    assert memory_growth("stub", points[:3], 24.0) is None


def _answers(latency_us, count: int = 3000, seed: int = 1):
    rng = random.Random(seed)
    return [(i * 0.04, i, latency_us(i) * rng.uniform(0.7, 1.6)) for i in range(count)]


def test_a_latency_that_grows_with_requests_drifts_and_jitter_does_not():
    grows = latency_drift(_answers(lambda i: 1500 + 2.0 * i), 5.0)
    assert grows.drifts and grows.end_us > 3 * grows.start_us
    assert "latency drifts" in grows.describe()
    steady = latency_drift(_answers(lambda i: 1500), 5.0)
    assert not steady.drifts and steady.end_us == pytest.approx(steady.start_us, rel=0.1)
    tiny = latency_drift(_answers(lambda i: 100 + 0.1 * i), 5.0)  # 3x, yet 0.3 ms: not a drift
    assert not tiny.drifts
    # another program's load in the middle third only: slower there, not rising through the soak
    burst = latency_drift(_answers(lambda i: 8000 if 1000 <= i < 2000 else 3000), 5.0)
    assert not burst.drifts


def test_percentiles_come_per_minute_or_per_quarter_of_a_short_soak():
    answers = [(second + 0.5, second, 1000.0 * (1 + second // 60)) for second in range(300)]
    minutes = windows(answers, 300.0)
    assert [(w.start_s, w.end_s) for w in minutes][:2] == [(0.0, 60.0), (60.0, 120.0)]
    assert [w.p50_us for w in minutes] == [1000.0, 2000.0, 3000.0, 4000.0, 5000.0]
    quarters = windows(answers[:120], 120.0)
    assert len(quarters) == 4 and quarters[0].answers == 30


@pytest.fixture(scope="module")
def python_project(tmp_path_factory):
    return new_project(tmp_path_factory.mktemp("soak-options"), "python-backend")


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("test", ["--concurrency", "3"], "--concurrency shape a soak"),
        ("test", ["--soak", "5s"], "too short"),
        ("test", ["--soak", "1m", "--rate", "0"], "no request rate"),
        ("test", ["--soak", "soon"], "--soak"),
        ("test", ["--unit", "--soak", "1m"], "--soak"),
        ("dev", ["--rate", "5"], "--rate shape a soak"),
        ("package", ["--soak", "1m"], "Add --test"),
    ],
)
def test_soak_options_are_refused_with_the_fix(python_project, command, args, says):
    result = run_tbgen(command, str(python_project), *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
