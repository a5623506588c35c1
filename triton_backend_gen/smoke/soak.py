"""The soak: sustained valid load against every model for a while, every answer still compared with
reference.py, the private memory of the server and of each python stub sampled throughout; then judged by
smoke.growth (a leak with its slope and process, a latency drift) and reported per model and per process.

The load: ``concurrency`` clients (at least one per model), each a thread with a client of its own, spread
over the models and over the protocols each supports (HTTP and gRPC in turn; a decoupled model's over a gRPC
stream, each request's responses up to its final flag; a sequence model's as whole sequences of
SEQUENCE_LENGTH requests). Requests take the model's own ``reference.make_inputs`` at every batch size the
smoke suite tests, with a few seeds; the expected answers are computed once, before the load starts, so that
the clients cost the server's CPU as little as they can. ``rate`` paces the requests (in total per second);
without it each client sends its next request when the last is answered.

Memory is each process's ``RssAnon`` (private resident memory: what a leak in the backend or the model's
Python code grows; the python backend's shared-memory pool is left out, it grows by design).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.runtime.stub_watch import StubWatch
from triton_backend_gen.smoke.checks import _assert_stream_matches
from triton_backend_gen.smoke.clients import (
    REQUEST_TIMEOUT_S,
    Endpoints,
    Stream,
    error_text,
    infer,
    open_client,
)
from triton_backend_gen.smoke.compare import assert_outputs_match
from triton_backend_gen.smoke.growth import (
    LatencyDrift,
    MemoryGrowth,
    Window,
    latency_drift,
    memory_growth,
    warmup_seconds,
    windows,
)
from triton_backend_gen.smoke.model import ModelSpec
from triton_backend_gen.smoke.run import SmokeResult
from triton_backend_gen.smoke.sequences import Refused, SequenceConnection, SequenceFlags, new_sequence_id

tritonutils = lazy_module("tritonclient.utils")

SEEDS = 4  # inputs per batch size: the answers vary, the pool stays small
MOST_BATCH_SIZES = 6  # of a large max_batch_size, the smallest, the largest and some between
SEQUENCE_LENGTH = 4
SERVER = "tritonserver"
MIN_SOAK_S = 15.0  # a warm-up of 5 s, then enough samples for a line
_FAILURES_KEPT = 3


@dataclass(frozen=True)
class SoakOptions:
    seconds: float
    concurrency: int = 4  # clients in all, at least one per model
    rate: float | None = None  # requests per second in all; None: each client as fast as it is answered


@dataclass(frozen=True)
class SoakModel:
    """A model the soak loads: its spec and its reference."""

    spec: ModelSpec
    reference: ModuleType


@dataclass
class Sample:
    """One look at the processes: when (seconds into the soak), the requests served so far (in all and per
    model), each process's private memory (bytes)."""

    seconds: float
    requests: int
    per_model: dict[str, int]
    memory: dict[str, int]


@dataclass
class ModelLoad:
    """What one model's clients saw: (seconds, requests of the model served before it, latency in us) of each
    answer, the count of failed ones and the first few failures."""

    name: str
    answers: list[tuple[float, int, float]] = field(default_factory=list)
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    protocols: set[str] = field(default_factory=set)


@dataclass
class SoakRun:
    """A whole soak: its options, what each model's clients saw, the memory samples, and the verdicts."""

    options: SoakOptions
    seconds: float = 0.0
    models: dict[str, ModelLoad] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    process_models: dict[str, str] = field(default_factory=dict)  # a stub's process -> its model
    notes: list[str] = field(default_factory=list)

    @property
    def warmup_s(self) -> float:
        return warmup_seconds(self.seconds)

    @property
    def requests(self) -> int:
        return sum(len(load.answers) + load.failed for load in self.models.values())

    def memory(self) -> list[MemoryGrowth]:
        """Each sampled process's growth after the warm-up, fitted against the requests it served (a stub:
        its model's; the server: all)."""
        found = []
        for process in dict.fromkeys(p for s in self.samples for p in s.memory):
            model = self.process_models.get(process)
            points = [
                (s.seconds, s.per_model.get(model, 0) if model else s.requests, s.memory[process])
                for s in self.samples
                if process in s.memory
            ]
            growth = memory_growth(process, points, self.warmup_s)
            if growth is not None:
                found.append(growth)
        return found

    def drift(self, model: str) -> LatencyDrift | None:
        return latency_drift(self.models[model].answers, self.warmup_s)

    def windows(self, model: str) -> list[Window]:
        return windows(self.models[model].answers, self.seconds)


# ---- the processes' memory ------------------------------------------------------------------------------


def private_memory(pid: int) -> int | None:
    """``RssAnon`` of process ``pid`` in bytes; None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return None


def stub_process(model: str, instance: str) -> str:
    """How a python stub's process is named in the soak's results."""
    return f"python stub {model} {instance}"


def _sample_memory(server_pid: int | None, watch: StubWatch | None, run: SoakRun) -> dict[str, int]:
    found = {}
    if server_pid is not None and (server := private_memory(server_pid)) is not None:
        found[SERVER] = server
    for stub in watch.stubs() if watch is not None else []:
        if (value := private_memory(stub.pid)) is not None:
            name = stub_process(stub.model, stub.instance)
            run.process_models[name] = stub.model
            found[name] = value
    return found


# ---- the load -----------------------------------------------------------------------------------------


def _batch_sizes(spec: ModelSpec) -> list[int | None]:
    sizes = spec.batch_sizes
    if len(sizes) <= MOST_BATCH_SIZES:
        return sizes
    step = (len(sizes) - 1) / (MOST_BATCH_SIZES - 1)
    return sorted({sizes[round(i * step)] for i in range(MOST_BATCH_SIZES)})


def _pool(model: SoakModel) -> list[tuple[dict, object]]:
    """(inputs, expected) of every request the model's clients send in turn: the reference's answer (a
    decoupled model's: its responses' count, compared by the smoke check's rule), computed once."""
    reference, spec = model.reference, model.spec
    pool = []
    for seed, batch in itertools.product(range(SEEDS), _batch_sizes(spec)):
        inputs = reference.make_inputs(batch, seed=seed)
        pool.append((inputs, None if spec.decoupled else reference.compute(inputs)))
    return pool


class _Client:
    """One client of one model: sends its requests in turn, each answer checked, until told to stop."""

    def __init__(self, model: SoakModel, protocol: str, endpoints: Endpoints, pool: list, shared) -> None:
        self.model, self.protocol, self.endpoints, self.pool, self.shared = (
            model,
            protocol,
            endpoints,
            pool,
            shared,
        )
        self.load = shared.run.models[model.spec.name]
        self.load.protocols.add(protocol)

    def run(self, stop: threading.Event, pace: Callable[[], bool]) -> None:
        spec = self.model.spec
        if spec.sequence is not None:
            with SequenceConnection(spec, self.protocol, self.endpoints) as connection:
                self._loop(stop, pace, self._sequences(connection))
        elif spec.decoupled:
            with Stream(self.endpoints) as stream:
                self._loop(stop, pace, self._streamed(stream))
        else:
            with open_client(self.protocol, self.endpoints) as client:
                self._loop(stop, pace, self._requests(client))

    def _loop(
        self, stop: threading.Event, pace: Callable[[], bool], sends: Iterator[Callable[[], None]]
    ) -> None:
        for send in sends:
            if stop.is_set() or not pace():
                return
            started = time.monotonic()
            try:
                send()
            except Exception as err:  # noqa: BLE001 - every failure is counted and the first ones kept
                self.shared.failed(self.load, err)
                continue
            self.shared.answered(self.load, started, time.monotonic())

    def _requests(self, client) -> Iterator[Callable[[], None]]:
        spec, tolerance = self.model.spec, self.model.reference.TOLERANCE
        for index, (inputs, expected) in enumerate(itertools.cycle(self.pool)):
            yield lambda inputs=inputs, expected=expected, index=index: assert_outputs_match(
                infer(self.protocol, client, spec, inputs), expected, tolerance, f"soak request {index}"
            )

    def _streamed(self, stream: Stream) -> Iterator[Callable[[], None]]:
        spec, reference = self.model.spec, self.model.reference
        for index, (inputs, _) in enumerate(itertools.cycle(self.pool)):

            def send(inputs=inputs, request_id=f"soak{index}") -> None:
                stream.send(spec, inputs, request_id=request_id)
                results = stream.collect([request_id])[request_id]
                _assert_stream_matches(spec, reference, results, inputs, request_id)

            yield send

    def _sequences(self, connection: SequenceConnection) -> Iterator[Callable[[], None]]:
        spec, reference = self.model.spec, self.model.reference
        batch = 1 if spec.max_batch_size > 0 else None
        for seed in itertools.cycle(range(SEEDS)):
            steps = [
                reference.make_inputs(batch, seed=seed * SEQUENCE_LENGTH + i) for i in range(SEQUENCE_LENGTH)
            ]
            expected = reference.compute_sequence(steps)
            sequence_id = new_sequence_id(spec)
            for index, (inputs, want) in enumerate(zip(steps, expected, strict=True)):
                flags = SequenceFlags(sequence_id, start=index == 0, end=index == SEQUENCE_LENGTH - 1)
                yield lambda inputs=inputs, want=want, flags=flags: _sequence_step(
                    connection, reference, inputs, want, flags
                )


def _sequence_step(connection: SequenceConnection, reference, inputs: dict, want: dict, flags) -> None:
    try:
        got = connection.infer(inputs, flags)
    except Refused as err:
        raise AssertionError(f"sequence {flags.id!r}: refused: {err}") from None
    assert_outputs_match(got, want, reference.TOLERANCE, f"sequence {flags.id!r}")


class _Shared:
    """What the clients and the sampler share: the run, when it started, the requests served per model."""

    def __init__(self, run: SoakRun, started: float) -> None:
        self.run, self.started = run, started
        self.lock = threading.Lock()
        self.served: dict[str, int] = {}

    def answered(self, load: ModelLoad, sent: float, done: float) -> None:
        with self.lock:
            served = self.served.get(load.name, 0)
            load.answers.append((done - self.started, served, (done - sent) * 1e6))
            self.served[load.name] = served + 1

    def failed(self, load: ModelLoad, err: Exception) -> None:
        text = str(err) if isinstance(err, AssertionError) else f"{type(err).__name__}: {error_text(err)}"
        with self.lock:
            load.failed += 1
            if len(load.failures) < _FAILURES_KEPT:
                load.failures.append(text)

    def counts(self) -> tuple[int, dict[str, int]]:
        with self.lock:
            return sum(self.served.values()), dict(self.served)


def _pacer(options: SoakOptions, started: float, stop: threading.Event) -> Callable[[], bool]:
    """Each client's wait before its next request under ``rate`` (a shared schedule: one slot per request);
    False once the soak is over."""
    if options.rate is None:
        return lambda: not stop.is_set()
    slots = itertools.count()
    lock = threading.Lock()
    interval = 1.0 / options.rate

    def pace() -> bool:
        with lock:
            due = started + next(slots) * interval
        return not stop.wait(max(0.0, due - time.monotonic()))

    return pace


def run_soak(
    models: list[SoakModel],
    endpoints: Endpoints,
    options: SoakOptions,
    *,
    server_pid: int | None,
    watch: StubWatch | None,
    is_healthy: Callable[[], bool] = lambda: True,
    progress: Callable[[str], None] = lambda text: None,
) -> SoakRun:
    """Load ``models`` for ``options.seconds`` (see the module), sampling the memory of the server
    (``server_pid``) and of its python stubs (``watch``) about a hundred times."""
    run = SoakRun(options, models={m.spec.name: ModelLoad(m.spec.name) for m in models})
    if server_pid is None:
        run.notes.append("the soak could not sample the server's memory: its process is not on this machine")
    stop = threading.Event()
    started = time.monotonic()
    shared = _Shared(run, started)
    pace = _pacer(options, started, stop)
    pools = {m.spec.name: _pool(m) if m.spec.sequence is None else [] for m in models}
    clients = [
        _Client(model, protocol, endpoints, pools[model.spec.name], shared)
        for model, protocol in _assignments(models, options.concurrency)
    ]
    threads = [threading.Thread(target=_guarded(c, stop, pace, shared), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    interval = min(5.0, max(0.25, options.seconds / 100))
    try:
        _sample_until(
            run, shared, started, options.seconds, interval, server_pid, watch, is_healthy, progress
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(REQUEST_TIMEOUT_S)
    run.seconds = min(time.monotonic() - started, options.seconds)
    if any(thread.is_alive() for thread in threads):
        run.notes.append(f"a soak client still waited for an answer {REQUEST_TIMEOUT_S:.0f} s after the end")
    return run


def _guarded(client: _Client, stop: threading.Event, pace: Callable[[], bool], shared: _Shared):
    def run() -> None:
        try:
            client.run(stop, pace)
        except Exception as err:  # noqa: BLE001 - a client that cannot even connect fails its model
            shared.failed(client.load, err)

    return run


def _assignments(models: list[SoakModel], concurrency: int) -> list[tuple[SoakModel, str]]:
    """(model, protocol) of each client: the models in turn, each model's protocols in turn."""
    protocols = {m.spec.name: itertools.cycle(_protocols(m.spec)) for m in models}
    chosen = itertools.islice(itertools.cycle(models), max(concurrency, len(models)))
    return [(model, next(protocols[model.spec.name])) for model in chosen]


def _protocols(spec: ModelSpec) -> list[str]:
    return ["grpc"] if spec.decoupled else ["http", "grpc"]


def _sample_until(run, shared, started, seconds, interval, server_pid, watch, is_healthy, progress) -> None:
    """Sample every ``interval`` until ``seconds`` are over or the server stops; say how far it got every
    tenth of the way (at most every 10 s)."""
    told = -1.0
    while (now := time.monotonic() - started) < seconds:
        requests, per_model = shared.counts()
        run.samples.append(Sample(now, requests, per_model, _sample_memory(server_pid, watch, run)))
        if now - told >= max(10.0, seconds / 10):
            told = now
            progress(f"soak: {now:.0f} of {seconds:.0f} s, {requests:,} requests answered")
        if not is_healthy():
            run.notes.append(f"the server stopped {now:.0f} s into the soak")
            return
        time.sleep(min(interval, max(0.0, seconds - now)))
    requests, per_model = shared.counts()
    run.samples.append(Sample(seconds, requests, per_model, _sample_memory(server_pid, watch, run)))


# ---- the verdicts ------------------------------------------------------------------------------------------


def soak_results(run: SoakRun, named: bool) -> list[SmokeResult]:
    """One result per model (every answer right, no latency drift) and one per sampled process (no leak)."""
    results = [_model_result(run, name, load, named) for name, load in run.models.items()]
    for growth in run.memory():
        results.append(
            SmokeResult(f"soak memory: {growth.process}", "-", not growth.leaks, growth.describe(), 0.0)
        )
    if not run.samples or not any(s.memory for s in run.samples):
        results.append(
            SmokeResult(
                "soak memory", "-", True, "not sampled: " + "; ".join(run.notes or ["no process"]), 0.0
            )
        )
    return results


def _model_result(run: SoakRun, name: str, load: ModelLoad, named: bool) -> SmokeResult:
    answered = len(load.answers)
    rate = answered / run.seconds if run.seconds else 0.0
    lines = [
        f"{answered:,} answers in {run.seconds:.0f} s ({rate:,.0f}/s over "
        f"{', '.join(sorted(load.protocols))}), "
        + (
            f"{load.failed:,} FAILED: " + "; ".join(load.failures)
            if load.failed
            else "each equal to reference.py"
        )
    ]
    drift = run.drift(name)
    if drift is not None:
        lines.append(drift.describe())
    lines += [
        f"  {w.start_s:5.0f}-{w.end_s:.0f} s: p50 {w.p50_us / 1000:.2f} ms, p99 {w.p99_us / 1000:.2f} ms "
        f"({w.answers:,} answers)"
        for w in run.windows(name)
    ]
    passed = answered > 0 and not load.failed and not (drift is not None and drift.drifts)
    return SmokeResult(f"soak {name}" if named else "soak", "-", passed, "\n".join(lines), run.seconds)
