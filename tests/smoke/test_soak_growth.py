"""The soak's verdicts (smoke.growth) on samples made here: a steady leak is found with its slope, a single
step or noise is not; a latency that grows with requests drifts, one that jitters does not; the percentiles
per stretch. And the soak's options as the CLI refuses them."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
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
from triton_backend_gen.smoke.model import ModelSpec, TensorSpec
from triton_backend_gen.smoke.soak import (
    POINTS_KEPT,
    STRETCH_KEPT,
    ModelLoad,
    Sample,
    SoakModel,
    SoakOptions,
    SoakRun,
    _pools,
    soak_results,
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
    # a 10 s stretch is too short to tell a drift from the machine's load: said, not judged
    short = latency_drift([p for p in _answers(lambda i: 1500 + 2.0 * i) if p[0] < 15], 5.0)
    assert not short.drifts and not short.judged and "not judged" in short.describe()
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


# ---- what a soak keeps, and what it refuses to load ------------------------------------------------------

SPEC = ModelSpec("m", 8, False, True, (TensorSpec("IN", "FP32", (4,)),), (TensorSpec("OUT", "FP32", (4,)),))


def test_a_long_soak_keeps_a_bounded_sample_and_exact_counts():
    load = ModelLoad("m", 240.0)
    for i in range(60_000):
        load.record(i * 0.004, i, 1000.0 + (i % 100))
    assert load.answered == 60_000 and len(load.points) == POINTS_KEPT
    assert sorted(load.stretch_answers.items()) == [(0, 15_000), (1, 15_000), (2, 15_000), (3, 15_000)]
    assert all(len(kept) <= STRETCH_KEPT for kept in load.stretches.values())
    run = SoakRun(SoakOptions(240.0), seconds=240.0, models={"m": load})
    assert [w.answers for w in run.windows("m")] == [15_000] * 4
    assert all(1040 <= w.p50_us <= 1060 and 1097 <= w.p99_us <= 1099 for w in run.windows("m"))
    assert sorted(load.points)[0][0] < 10 and sorted(load.points)[-1][0] > 230  # the sample spans the soak


def test_a_stubs_slope_is_per_request_it_served_among_its_models_instances():
    run = SoakRun(SoakOptions(100.0), seconds=100.0)
    run.process_models = {"python stub m m_0_0": "m", "python stub m m_0_1": "m"}
    for second in range(101):  # 1,000 requests a second to m, shared by its two stubs; m_0_0 loses 40 B each
        served = second * 1000
        memory = {"python stub m m_0_0": (20 << 20) + 40 * served // 2, "python stub m m_0_1": 20 << 20}
        run.samples.append(Sample(float(second), served, {"m": served}, memory))
    growths = {g.process: g for g in run.memory()}
    assert growths["python stub m m_0_0"].bytes_per_request == pytest.approx(40, rel=0.01)
    assert growths["python stub m m_0_0"].leaks and not growths["python stub m m_0_1"].leaks


def test_a_model_whose_reference_raises_is_not_soaked_and_says_why():
    def make_inputs(batch, seed=0):
        if batch == 8:
            raise ValueError("no batch of 8 here")
        return {"IN": np.zeros((batch, 4), np.float32)}

    raises = SimpleNamespace(
        make_inputs=make_inputs, compute=lambda inputs: {"OUT": inputs["IN"]}, TOLERANCE={}
    )
    other = SimpleNamespace(make_inputs=lambda batch, seed=0: {"X": 1})
    run = SoakRun(SoakOptions(20.0), models={"m": ModelLoad("m", 20.0), "n": ModelLoad("n", 20.0)})
    spec_n = ModelSpec("n", 8, False, True, SPEC.inputs, SPEC.outputs)
    assert _pools([SoakModel(SPEC, raises), SoakModel(spec_n, other)], run) == {}
    assert run.models["m"].failures == ["not soaked: reference.py raised ValueError: no batch of 8 here"]
    assert run.models["n"].failures[0].startswith("not soaked: reference.py does not describe model n")
    results = soak_results(run, named=True)
    assert [(r.name, r.passed) for r in results][:2] == [("soak m", False), ("soak n", False)]
