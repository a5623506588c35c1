"""The fuzzer: a deterministic plan of malformed requests, a run that judges the server and its memory, the
report."""

from __future__ import annotations

import http.client
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from triton_backend_gen.smoke.clients import Endpoints, error_text
from triton_backend_gen.smoke.fuzz_requests import (
    FUZZ_KINDS,
    HUGE_MIB,
    FuzzCase,
    fuzz_tensors,
    fuzz_valid,
    run_fuzz_case,
    send_wire,
    stream_deadline_of,
)
from triton_backend_gen.smoke.model import ModelSpec, load_model_specs, reference_mismatch
from triton_backend_gen.smoke.run import SmokeResult
from triton_backend_gen.smoke.stream_protocol import LogWindow

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from triton_backend_gen.project import ModelEntry, Project


# Each case is planned (kind, protocol, seed) without building anything; its request is made when it runs,
# from a random generator seeded with (seed, index), so a plan is cheap and a run is reproducible.

# The 2.51 server's gRPC frontend keeps the buffers of the largest messages it has parsed in its pools, for
# good: memory_limit allows about this many times the largest gRPC "huge tensor" (HUGE_MIB).
GRPC_POOL_FACTOR = 24


@dataclass
class FuzzReport:
    """What a fuzz run sent, how the server answered, and its memory: bytes of private resident memory of
    the server and its stubs (:func:`memory_of`), before (after a warm-up) and at the end."""

    seed: int
    planned: int  # cases in the plan
    requests: int = 0  # cases sent
    outcomes: Counter = field(default_factory=Counter)  # "ok", "http 400", "grpc INVALID_ARGUMENT", ...
    kinds: Counter = field(default_factory=Counter)  # cases sent per kind
    failures: list[str] = field(default_factory=list)
    rss_before: int | None = None
    rss_after: int | None = None
    rss_limit: int | None = None
    healthy: bool = True
    truncated: bool = False  # the time limit stopped the run early
    seconds: float = 0.0

    @property
    def memory_ok(self) -> bool:
        return self.rss_after is None or self.rss_limit is None or self.rss_after <= self.rss_limit

    @property
    def passed(self) -> bool:
        return not self.failures and self.healthy and self.memory_ok

    @property
    def errors(self) -> Counter:
        """The refusals, by how the server answered."""
        return Counter(
            {k: v for k, v in self.outcomes.items() if k not in ("ok", "cancelled", "disconnected")}
        )

    def memory_line(self) -> str:
        if self.rss_before is None or self.rss_after is None:
            return "server memory not measured (no pid)"
        mib = 1024 * 1024
        verdict = "within" if self.memory_ok else "ABOVE"
        return (
            f"server memory (private RSS of the server and its stubs): {self.rss_before / mib:.1f} MiB "
            f"before, {self.rss_after / mib:.1f} MiB after ({verdict} the limit of "
            f"{(self.rss_limit or 0) / mib:.1f} MiB)"
        )

    def summary(self) -> str:
        sent = (
            f"{self.requests} of {self.planned} requests" if self.truncated else f"{self.requests} requests"
        )
        outcomes = ", ".join(f"{k}: {v}" for k, v in sorted(self.outcomes.items(), key=lambda kv: -kv[1]))
        lines = [f"fuzz seed {self.seed}: {sent} in {self.seconds:.1f} s; {outcomes}", self.memory_line()]
        if self.truncated:
            lines.append("stopped early: the time limit was reached or the server stopped answering")
        if not self.healthy:
            lines.append("the server was not healthy afterwards")
        lines += self.failures[:20]
        return "\n".join(lines)

    def as_results(self) -> list[SmokeResult]:
        """The report as results for the table and JUnit: one per failure, plus the totals."""
        results = [
            SmokeResult(f"fuzz {failure.split(':', 1)[0]}", "-", False, failure, 0.0)
            for failure in self.failures
        ]
        results.append(
            SmokeResult(
                f"fuzz: {self.planned} malformed requests", "-", self.passed, self.summary(), self.seconds
            )
        )
        return results


def plan_fuzz(
    project: Project,
    count: int,
    seed: int = 0,
    model: ModelEntry | None = None,
    repository: Path | None = None,
    served: Mapping[str, ModelConfig] | None = None,
) -> list[FuzzCase]:
    """``count`` fuzz cases spread over the project's models (or ``model``), deterministic for ``seed``;
    models that reference.py does not describe are left out (the smoke plan reports them). ``served``: as for
    plan_smoke."""
    loaded = load_model_specs(project, model, repository, served)
    specs = [
        (spec, reference)
        for reference, spec, _config in loaded
        if reference_mismatch(spec, reference) is None
    ]
    if not specs:
        return []
    rng = random.Random(seed)
    return [_plan_case(index, *specs[index % len(specs)], rng, seed) for index in range(count)]


def _plan_case(index: int, spec: ModelSpec, reference: ModuleType, rng: random.Random, seed: int) -> FuzzCase:
    """Case ``index``, for one model: a kind that applies to it and a protocol, drawn by weight; its seed."""
    kinds = [k for k in FUZZ_KINDS if _kind_applies(k, spec, reference)]
    kind = rng.choices(kinds, weights=[FUZZ_KINDS[k][0] for k in kinds])[0]
    protocols = FUZZ_KINDS[kind][1]
    # HTTP refuses every inference request to a decoupled model up front: send it a quarter only.
    weights = [1 if spec.decoupled and p == "http" else 3 for p in protocols]
    protocol = rng.choices(protocols, weights=weights)[0]
    return FuzzCase(index, kind, protocol, rng.randrange(2**31), seed, spec, reference)


def _kind_applies(kind: str, spec: ModelSpec, reference: ModuleType) -> bool:
    if kind == "sequence controls":
        return spec.sequence is not None
    if kind == "batch too large":
        return spec.max_batch_size > 0
    if kind == "garbage values":
        # A decoupled model's inputs may say how long to stream (the repeat example's DELAY): random ones
        # can hang, unless its reference bounds its streams (MAX_RESPONSES, the placeholder's).
        return not spec.decoupled or hasattr(reference, "MAX_RESPONSES")
    return True


def memory_of(pid: int) -> int | None:
    """Private resident memory (bytes, ``RssAnon`` in /proc) of ``pid`` and its descendants (the python
    stubs); None when ``pid`` is gone.

    Shared memory is left out: the python backend's shm pool is mapped by the server and by each stub (it
    would count twice) and it grows by design up to its configured size."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        memory = private_memory(current)
        if memory is None and current == pid:
            return None
        total += memory or 0
        todo += children.get(current, [])
    return total


def private_memory(pid: int) -> int | None:
    """``RssAnon`` of process ``pid`` alone, in bytes; None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return None


def run_fuzz(
    cases: list[FuzzCase],
    endpoints: Endpoints,
    server_pid: int | None = None,
    is_healthy: Callable[[], bool] | None = None,
    time_limit_s: float = 300.0,
    progress: Callable[[FuzzCase, str], None] | None = None,
) -> FuzzReport:
    """Send every case (stopping at ``time_limit_s``) and judge the server.

    Pass = every case answered or cleanly refused (valid ones answered correctly), the server healthy at
    the end, and its memory (``server_pid`` and its stubs, :func:`memory_of`) back under
    :func:`memory_limit` of its level before, which is taken after a warm-up (valid requests and one
    largest "huge tensor" per protocol: first requests allocate what a leak check must not count), and no
    line the server's log gained meanwhile (where ``endpoints`` name it) names a protocol fault a client
    cannot see (smoke.stream_protocol: a send after a decoupled request's final flag). A decoupled model's
    stream breaking the protocol fails its case, named so."""
    report = FuzzReport(seed=cases[0].plan_seed if cases else 0, planned=len(cases))
    models = {case.model.name: case for case in cases}
    start = time.monotonic()
    log = LogWindow(endpoints.log_file)  # what only the server's log shows (smoke.stream_protocol)
    for case in models.values():
        failure = _warm_up(case, endpoints)
        if failure is not None:
            report.failures.append(failure)
    if server_pid is not None:
        report.rss_before = memory_of(server_pid)
    _send_cases(report, cases, endpoints, models, start + time_limit_s, progress)
    report.healthy = _healthy_after(report, endpoints, models, is_healthy)
    report.failures += [f"the server log: {fault}" for fault in log.faults()]
    if server_pid is not None and report.rss_before is not None:
        report.rss_limit = memory_limit(report.rss_before)
        report.rss_after = _settled_memory(server_pid, report.rss_limit)
    report.seconds = time.monotonic() - start
    return report


def _send_cases(
    report: FuzzReport,
    cases: list[FuzzCase],
    endpoints: Endpoints,
    models: dict[str, FuzzCase],
    deadline: float,
    progress: Callable[[FuzzCase, str], None] | None,
) -> None:
    """Send ``cases`` in order into ``report``, until ``deadline`` or the server stops answering its health
    requests (asked every 25 cases)."""
    for case in cases:
        if time.monotonic() > deadline:
            report.truncated = True
            return
        report.requests += 1
        report.kinds[case.kind] += 1
        outcome, failure = _send_case(case, endpoints)
        if failure is not None:
            report.failures.append(failure)
        report.outcomes[outcome] += 1
        if progress is not None:
            progress(case, outcome)
        if case.index % 25 == 24 and not _server_answers(endpoints, models):
            report.failures.append(
                f"{case.label}: the server stopped answering health requests after this case"
            )
            report.truncated = True
            return


def _send_case(case: FuzzCase, endpoints: Endpoints) -> tuple[str, str | None]:
    """(the case's outcome, why it failed or None)."""
    try:
        return run_fuzz_case(case, endpoints), None
    except AssertionError as err:
        return "failed", f"{case.label}: {err}"
    except Exception as err:  # noqa: BLE001 - an unexpected client-side failure is a failed case
        return "failed", f"{case.label}: {type(err).__name__}: {error_text(err)}"


def _healthy_after(
    report: FuzzReport,
    endpoints: Endpoints,
    models: dict[str, FuzzCase],
    is_healthy: Callable[[], bool] | None,
) -> bool:
    """Whether the server is live, its models ready and answering a valid request each (failures go into
    ``report``)."""
    if not (_server_answers(endpoints, models) and (is_healthy is None or is_healthy())):
        return False
    healthy = True
    for case in models.values():
        try:
            fuzz_valid(case, random.Random(1), "grpc" if case.model.decoupled else "http", endpoints)
        except Exception as err:  # noqa: BLE001 - reported as the reason the server is not healthy
            healthy = False
            report.failures.append(f"after fuzzing, a valid request to '{case.model.name}' failed: {err}")
    return healthy


def _settled_memory(pid: int, limit: int) -> int | None:
    """The memory of ``pid`` (:func:`memory_of`) once under ``limit``, or after 10 s: freed memory returns
    with a delay."""
    deadline = time.monotonic() + 10
    while True:
        rss = memory_of(pid)
        if rss is None or rss <= limit or time.monotonic() > deadline:
            return rss
        time.sleep(0.5)


def memory_limit(before: int) -> int:
    """The most memory the server may hold after fuzzing when it held ``before``: 25% and 64 MiB more for
    allocator noise, plus the gRPC frontend's pools (GRPC_POOL_FACTOR times the largest gRPC request).

    Coarse by necessity: it catches a backend that leaks its requests' tensors (a few hundred requests of
    the sizes fuzzed), not a leak of a few bytes per request."""
    mib = 1024 * 1024
    return int(before * 1.25 + 64 * mib + GRPC_POOL_FACTOR * max(HUGE_MIB["grpc"]) * mib)


def _warm_up(case: FuzzCase, endpoints: Endpoints) -> str | None:
    """Valid requests and a largest "huge tensor" per protocol to the case's model; None, or why the model
    failed them (a failed case: e.g. a decoupled model whose streams never end, named so)."""
    rng = random.Random(0)
    try:
        for protocol in ("http", "grpc"):
            for _ in range(3):
                fuzz_valid(case, rng, protocol, endpoints)
            model, wires = fuzz_tensors(
                replace(case, kind="huge tensor", protocol=protocol), rng, huge_mib=max(HUGE_MIB[protocol])
            )
            deadline_s = stream_deadline_of(case)
            send_wire(
                protocol, endpoints, model, wires, case.model, case.model.decoupled, deadline_s=deadline_s
            )
    except AssertionError as err:
        return f"warm-up of '{case.model.name}': {err}"
    except Exception as err:  # noqa: BLE001 - an unexpected client-side failure fails the warm-up
        return f"warm-up of '{case.model.name}': {type(err).__name__}: {error_text(err)}"
    return None


def _server_answers(endpoints: Endpoints, models: dict[str, FuzzCase]) -> bool:
    host, port = endpoints.http_url.rsplit(":", 1)
    paths = ["/v2/health/live"] + [f"/v2/models/{name}/ready" for name in models]
    try:
        for path in paths:
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            try:
                connection.request("GET", path)
                if connection.getresponse().status != 200:
                    return False
            finally:
                connection.close()
    except OSError:
        return False
    return True
