"""Custom metrics: a model's own metric families on the server's metrics endpoint (Prometheus text), checked
against what the server's statistics say the model did."""

from __future__ import annotations

import re
import time
import urllib.request
from collections import defaultdict

from triton_backend_gen.smoke.clients import REQUEST_TIMEOUT_S, Endpoints, error_text, model_counts, open_client
from triton_backend_gen.smoke.run import SmokeResult

# The families tbgen's templates publish with --set custom_metrics=yes, and what each must show.
LATENCY_COUNTER = "requests_process_latency_ns"  # nanoseconds spent on each request, summed
BATCH_HISTOGRAM = "execution_batch_size"  # requests per execution

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(metrics_url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the metrics endpoint (``host:port``), by metric name: [(labels, value)]."""
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=REQUEST_TIMEOUT_S) as response:
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


def check_custom_metrics(metrics_url: str, endpoints: Endpoints, model: str, families: tuple[str, ...],
                         settle_s: float = 2.0) -> str:
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


def _check_custom_metrics(metrics_url: str, endpoints: Endpoints, model: str, families: tuple[str, ...]) -> str:
    try:
        samples = scrape(metrics_url)
    except OSError as err:
        raise AssertionError(
            f"the metrics endpoint http://{metrics_url}/metrics did not answer: {error_text(err)}") from None
    details, problems = [], []
    for family in families:
        names = [family] + [f"{family}{suffix}" for suffix in ("_count", "_sum", "_bucket")]
        if not any(_value(samples, name, model) is not None for name in names):
            problems.append(f"no {family} sample labelled model=\"{model}\"")
    with open_client("grpc", endpoints) as client:
        inferences, executions = model_counts(client, model, "grpc")
    if LATENCY_COUNTER in families and not problems:
        latency = _value(samples, LATENCY_COUNTER, model) or 0.0
        if latency <= 0:
            problems.append(f"{LATENCY_COUNTER} is {latency:g} after {inferences} requests")
        details.append(f"{LATENCY_COUNTER} {latency / 1e6:.1f} ms over {inferences} requests")
    if BATCH_HISTOGRAM in families and not problems:
        count = _value(samples, f"{BATCH_HISTOGRAM}_count", model)
        total = _value(samples, f"{BATCH_HISTOGRAM}_sum", model)
        if count != executions or total != inferences:
            problems.append(f"{BATCH_HISTOGRAM} counts {count:g} executions of {total:g} requests; the server's "
                            f"statistics say {executions} executions of {inferences} requests")
        details.append(f"{BATCH_HISTOGRAM}: {executions} executions of {inferences} requests, as the statistics say")
    others = [f for f in families if f not in (LATENCY_COUNTER, BATCH_HISTOGRAM)]
    if others and not problems:
        details.append(f"{', '.join(others)} published")
    if problems:
        raise AssertionError("; ".join(problems) + f" (http://{metrics_url}/metrics)")
    return "; ".join(details)


def custom_metrics_results(metrics_url: str, endpoints: Endpoints, models: dict[str, tuple[str, ...]],
                           named: bool = False) -> list[SmokeResult]:
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
