"""Custom metrics (smoke.metrics): what the templates' own families must show, judged from scraped samples."""

from __future__ import annotations

from triton_backend_gen.smoke import metrics


def samples(**series: float) -> dict:
    """Scraped samples of model "m", one version each: {metric name: value}."""
    return {name: [({"model": "m", "version": "1"}, value)] for name, value in series.items()}


def test_the_latency_counter_must_be_above_zero_once_the_model_ran():
    problem, detail = metrics._check_latency_counter(samples(requests_process_latency_ns=2e6), "m", 4, 4)
    assert problem is None and "2.0 ms over 4 requests" in detail
    problem, _ = metrics._check_latency_counter(samples(), "m", 4, 4)
    assert problem == "requests_process_latency_ns is 0 after 4 requests"


def test_the_batch_histogram_must_agree_with_the_servers_statistics():
    agreeing = samples(execution_batch_size_count=2, execution_batch_size_sum=5)
    assert metrics._check_batch_histogram(agreeing, "m", 5, 2)[0] is None
    problem, _ = metrics._check_batch_histogram(agreeing, "m", 5, 3)
    assert "counts 2 executions of 5 requests" in problem and "say 3 executions of 5 requests" in problem


def test_a_family_is_found_by_its_histogram_series_and_only_for_its_model():
    scraped = samples(execution_batch_size_bucket=1, other_total=1)
    assert metrics._missing_families(scraped, "m", ("execution_batch_size",)) == []
    assert metrics._missing_families(scraped, "n", ("execution_batch_size",)) == [
        'no execution_batch_size sample labelled model="n"'
    ]
