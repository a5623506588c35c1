"""Custom metrics: a model's own metric families on the server's metrics endpoint (Prometheus text), checked
against what the server's statistics say the model did."""

from __future__ import annotations

import re
import time
from collections import defaultdict

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.clients import (
    REQUEST_TIMEOUT_S,
    Endpoints,
    error_text,
    model_counts,
    open_client,
)
from triton_backend_gen.smoke.run import SmokeResult

urllib_request = lazy_module("urllib.request")  # with http.client: 30 ms of every tbgen start

# The families tbgen's templates publish with --set custom_metrics=yes, and what each must show.
LATENCY_COUNTER = "requests_process_latency_ns"  # nanoseconds spent on each request, summed
BATCH_HISTOGRAM = "execution_batch_size"  # requests per execution

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(metrics_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the metrics endpoint (``host:port``), by metric name: [(labels, value)]."""
    with urllib_request.urlopen(f"http://{metrics_url}/metrics", timeout=REQUEST_TIMEOUT_S) as response:
        text = response.read().decode(errors="replace")
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(_LABEL.findall(match.group(2) or ""))
            samples[match.group(1)].append((labels, float(match.group(3))))
    return samples


def _value(samples: dict, name: str, model: str) -> float | None:
    """The sum over versions of ``name``'s samples labelled with ``model`` (None: no such sample)."""
    found = [value for labels, value in samples.get(name, []) if labels.get("model") == model]
    return sum(found) if found else None


def check_custom_metrics(
    metrics_url: str, endpoints: Endpoints, model: str, families: tuple[str, ...], settle_s: float = 2.0
) -> str:
    """That ``model`` publishes each of ``families`` labelled model=<model>; for the templates' own families
    also the values the run implies: the latency counter above zero, the batch-size histogram holding one
    observation per execution and summing to the requests the model ran (Triton's statistics). A backend may
    update both just after its last response went out: a disagreement is read again for up to ``settle_s``."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            return _check_custom_metrics(metrics_url, endpoints, model, families)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _scrape_or_fail(metrics_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The endpoint's samples (``scrape``); an endpoint that does not answer fails the check."""
    try:
        return scrape(metrics_url)
    except OSError as err:
        raise AssertionError(
            f"the metrics endpoint http://{metrics_url}/metrics did not answer: {error_text(err)}"
        ) from None


def _missing_families(samples: dict, model: str, families: tuple[str, ...]) -> list[str]:
    """A problem for each family with no sample labelled ``model`` (a counter or gauge by its name, a
    histogram or summary by its _count, _sum or _bucket series)."""
    problems = []
    for family in families:
        names = [family] + [f"{family}{suffix}" for suffix in ("_count", "_sum", "_bucket")]
        if not any(_value(samples, name, model) is not None for name in names):
            problems.append(f'no {family} sample labelled model="{model}"')
    return problems


def _check_latency_counter(
    samples: dict, model: str, inferences: int, executions: int
) -> tuple[str | None, str]:
    """(problem or None, detail) of the latency counter: above zero once the model ran requests."""
    latency = _value(samples, LATENCY_COUNTER, model) or 0.0
    problem = f"{LATENCY_COUNTER} is {latency:g} after {inferences} requests" if latency <= 0 else None
    return problem, f"{LATENCY_COUNTER} {latency / 1e6:.1f} ms over {inferences} requests"


def _check_batch_histogram(
    samples: dict, model: str, inferences: int, executions: int
) -> tuple[str | None, str]:
    """(problem or None, detail) of the batch-size histogram: one observation per execution, summing to the
    requests the model ran, as the server's statistics count them."""
    count = _value(samples, f"{BATCH_HISTOGRAM}_count", model)
    total = _value(samples, f"{BATCH_HISTOGRAM}_sum", model)
    problem = None
    if count != executions or total != inferences:
        problem = (
            f"{BATCH_HISTOGRAM} counts {count:g} executions of {total:g} requests; the server's "
            f"statistics say {executions} executions of {inferences} requests"
        )
    return problem, (
        f"{BATCH_HISTOGRAM}: {executions} executions of {inferences} requests, as the statistics say"
    )


# The templates' own families, each with the check of the values a run implies; checked in this order, each
# only while no problem has been found.
_VALUE_CHECKS = ((LATENCY_COUNTER, _check_latency_counter), (BATCH_HISTOGRAM, _check_batch_histogram))


def _check_custom_metrics(
    metrics_url: str, endpoints: Endpoints, model: str, families: tuple[str, ...]
) -> str:
    """One reading of ``check_custom_metrics``: its detail line, or AssertionError naming every problem."""
    samples = _scrape_or_fail(metrics_url)
    problems = _missing_families(samples, model, families)
    with open_client("grpc", endpoints) as client:
        inferences, executions = model_counts(client, model, "grpc")
    details = []
    for family, check in _VALUE_CHECKS:
        if family in families and not problems:
            problem, detail = check(samples, model, inferences, executions)
            problems += [problem] if problem else []
            details.append(detail)
    others = [f for f in families if f not in (LATENCY_COUNTER, BATCH_HISTOGRAM)]
    if others and not problems:
        details.append(f"{', '.join(others)} published")
    if problems:
        raise AssertionError("; ".join(problems) + f" (http://{metrics_url}/metrics)")
    return "; ".join(details)


def custom_metrics_results(
    metrics_url: str, endpoints: Endpoints, models: dict[str, tuple[str, ...]], named: bool = False
) -> list[SmokeResult]:
    """One result per model that declares custom metric families (tbgen.toml's ``metrics``); ``named``: each
    result's name starts with its model's (a project of several models)."""
    results = []
    for model, families in models.items():
        try:
            passed, detail = True, check_custom_metrics(metrics_url, endpoints, model, families)
        except AssertionError as err:
            passed, detail = False, str(err)
        prefix = f"{model}: " if named or len(models) > 1 else ""
        results.append(SmokeResult(f"{prefix}custom metrics", "metrics", passed, detail, 0.0))
    return results
