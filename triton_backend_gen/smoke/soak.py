"""The soak: sustained valid load against every model for a while, every answer still compared with
reference.py, the private memory of the server and of each python stub sampled throughout; then judged by
smoke.growth (a leak with its slope and process, a latency drift) and reported per model and per process.

The load: ``concurrency`` clients (at least one per model), each a thread with a client of its own, spread
over the models and over the protocols each supports (HTTP and gRPC in turn; a decoupled model's over a gRPC
stream, each request's responses up to its final flag; a sequence model's as whole sequences of
SEQUENCE_LENGTH requests, a sequence always finished). Requests take the model's own ``reference.make_inputs``
at up to MOST_BATCH_SIZES of the batch sizes the smoke suite tests, with SEEDS seeds; a plain model's expected
answers are computed once, before the load starts, so that the clients cost the server's CPU as little as
they can. A request's latency ends with its (final) answer, before the answer is compared. ``rate`` paces the
requests (in total per second); without it each client sends its next request when the last is answered.

What is kept stays bounded however long the soak: a uniform sample of POINTS_KEPT answers per model for the
drift's fit, and of STRETCH_KEPT latencies per stretch for its percentiles.

Memory is each process's ``RssAnon`` (private resident memory: what a leak in the backend or the model's
Python code grows; the python backend's shared-memory pool is left out, it grows by design).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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
from triton_backend_gen.smoke.fuzz import private_memory
from triton_backend_gen.smoke.growth import (
    LatencyDrift,
    MemoryGrowth,
    Window,
    latency_drift,
    memory_growth,
    stretch_of,
    warmup_seconds,
    window,
)
from triton_backend_gen.smoke.model import ModelSpec, reference_mismatch
from triton_backend_gen.smoke.run import SmokeResult
from triton_backend_gen.smoke.sequences import Refused, SequenceConnection, SequenceFlags, new_sequence_id

tritonutils = lazy_module("tritonclient.utils")

SEEDS = 4  # inputs per batch size: the answers vary, the pool stays small
MOST_BATCH_SIZES = 6  # of a large max_batch_size, the smallest, the largest and some between
SEQUENCE_LENGTH = 4
SERVER = "tritonserver"
POINTS_KEPT = 4000  # answers per model kept for the drift's fit (Theil-Sen thins them to 400)
STRETCH_KEPT = 20000  # latencies per stretch kept for its percentiles
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
    """What one model's clients saw: the answers (a uniform sample of (seconds, requests of the model served
    before it, latency in us), and of each stretch's latencies), the failed requests, the first failures."""

    name: str
    duration_s: float
    answered: int = 0
    points: list[tuple[float, int, float]] = field(default_factory=list)
    stretches: dict[int, list[float]] = field(default_factory=dict)
    stretch_answers: dict[int, int] = field(default_factory=dict)
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    protocols: set[str] = field(default_factory=set)
    _rng: random.Random = field(default_factory=lambda: random.Random(0), repr=False)

    def record(self, seconds: float, served: int, latency_us: float) -> None:
        """One answer, kept by reservoir sampling (every answer equally likely to be kept)."""
        self.answered += 1
        _keep(self.points, (seconds, served, latency_us), self.answered, POINTS_KEPT, self._rng)
        index = stretch_of(seconds, self.duration_s)
        count = self.stretch_answers[index] = self.stretch_answers.get(index, 0) + 1
        _keep(self.stretches.setdefault(index, []), latency_us, count, STRETCH_KEPT, self._rng)

    def fail(self, text: str) -> None:
        self.failed += 1
        if len(self.failures) < _FAILURES_KEPT:
            self.failures.append(text)


def _keep(kept: list, item, seen: int, most: int, rng: random.Random) -> None:
    """Reservoir sampling: ``item``, the ``seen``-th, into ``kept`` (at most ``most``)."""
    if len(kept) < most:
        kept.append(item)
    elif (slot := rng.randrange(seen)) < most:
        kept[slot] = item


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
        return sum(load.answered + load.failed for load in self.models.values())

    def memory(self) -> list[MemoryGrowth]:
        """Each sampled process's growth after the warm-up, fitted against the requests it served: the server
        all of them; a stub its model's, shared among the model's stubs (Triton spreads a model's requests
        over its instances), so that a slope is per request the stub served."""
        found = []
        for process in dict.fromkeys(p for s in self.samples for p in s.memory):
            points = [
                (s.seconds, self.served_by(process, s), s.memory[process])
                for s in self.samples
                if process in s.memory
            ]
            growth = memory_growth(process, points, self.warmup_s)
            if growth is not None:
                found.append(growth)
        return found

    def served_by(self, process: str, sample: Sample) -> int:
        """The requests ``process`` (sampled at ``sample``) had served then."""
        model = self.process_models.get(process)
        if model is None:
            return sample.requests
        stubs = sum(self.process_models.get(other) == model for other in sample.memory)
        return sample.per_model.get(model, 0) // max(1, stubs)

    def drift(self, model: str) -> LatencyDrift | None:
        return latency_drift(sorted(self.models[model].points), self.warmup_s)

    def windows(self, model: str) -> list[Window]:
        load = self.models[model]
        found = (
            window(index, self.options.seconds, kept, load.stretch_answers[index])
            for index, kept in sorted(load.stretches.items())
        )
        return [w for w in found if w is not None]


# ---- the processes' memory ------------------------------------------------------------------------------


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
    """(inputs, expected) of every request the model's clients send in turn: a plain model's answer from the
    reference, computed once (None for a decoupled model: its responses are compared by the smoke check's
    rule after each stream)."""
    reference, spec = model.reference, model.spec
    pool = []
    for seed, batch in itertools.product(range(SEEDS), _batch_sizes(spec)):
        inputs = reference.make_inputs(batch, seed=seed)
        pool.append((inputs, None if spec.decoupled else reference.compute(inputs)))
    return pool


# A request: sends, returns when it is answered, and hands back the check of its answer (run off the clock).
Send = Callable[[], Callable[[], None]]


class _Client:
    """One client of one model: sends its requests in turn, each answer checked, until told to stop (a
    sequence model's client first finishes the sequence it is in)."""

    def __init__(self, model: SoakModel, protocol: str, endpoints: Endpoints, pool: list, shared) -> None:
        self.model, self.protocol, self.endpoints = model, protocol, endpoints
        self.pool, self.shared = pool, shared
        self.load = shared.run.models[model.spec.name]
        self.load.protocols.add(protocol)

    def run(self, stop: threading.Event, pace: Callable[[], bool]) -> None:
        spec = self.model.spec
        if spec.sequence is not None:
            with SequenceConnection(spec, self.protocol, self.endpoints) as connection:
                self._loop(stop, pace, self._sequences(connection))
        elif spec.decoupled:
            with Stream(self.endpoints) as stream:
                self._loop(stop, pace, ((send, True) for send in self._streamed(stream)))
        else:
            with open_client(self.protocol, self.endpoints) as client:
                self._loop(stop, pace, ((send, True) for send in self._requests(client)))

    def _loop(
        self, stop: threading.Event, pace: Callable[[], bool], sends: Iterator[tuple[Send, bool]]
    ) -> None:
        """Each request of ``sends`` ((send, whether it ends a sequence)), timed to its answer; stops only
        between sequences."""
        between = True
        for send, ends in sends:
            if between and (stop.is_set() or not pace()):
                return
            started = time.monotonic()
            try:
                check = send()
                answered = time.monotonic()
                check()
            except Exception as err:  # noqa: BLE001 - every failure is counted and the first ones kept
                self.shared.failed(self.load, err)
            else:
                self.shared.answered(self.load, started, answered)
            between = ends

    def _requests(self, client) -> Iterator[Send]:
        spec, tolerance = self.model.spec, self.model.reference.TOLERANCE
        for index, (inputs, expected) in enumerate(itertools.cycle(self.pool)):

            def send(inputs=inputs, expected=expected, where=f"soak request {index}") -> Callable[[], None]:
                got = infer(self.protocol, client, spec, inputs)
                return lambda: assert_outputs_match(got, expected, tolerance, where)

            yield send

    def _streamed(self, stream: Stream) -> Iterator[Send]:
        spec, reference = self.model.spec, self.model.reference
        for index, (inputs, _) in enumerate(itertools.cycle(self.pool)):

            def send(inputs=inputs, request_id=f"soak{index}") -> Callable[[], None]:
                stream.send(spec, inputs, request_id=request_id)
                results = stream.collect([request_id])[request_id]
                return lambda: _assert_stream_matches(spec, reference, results, inputs, request_id)

            yield send

    def _sequences(self, connection: SequenceConnection) -> Iterator[tuple[Send, bool]]:
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

                def send(inputs=inputs, want=want, flags=flags) -> Callable[[], None]:
                    try:
                        got = connection.infer(inputs, flags)
                    except Refused as err:
                        raise AssertionError(f"sequence {flags.id!r}: refused: {err}") from None
                    return lambda: assert_outputs_match(
                        got, want, reference.TOLERANCE, f"sequence {flags.id!r}"
                    )

                yield send, flags.end


class _Shared:
    """What the clients and the sampler share: the run, when it started, the requests served per model."""

    def __init__(self, run: SoakRun, started: float) -> None:
        self.run, self.started = run, started
        self.lock = threading.Lock()
        self.served: dict[str, int] = {}

    def answered(self, load: ModelLoad, sent: float, done: float) -> None:
        with self.lock:
            served = self.served.get(load.name, 0)
            load.record(done - self.started, served, (done - sent) * 1e6)
            self.served[load.name] = served + 1

    def failed(self, load: ModelLoad, err: Exception) -> None:
        text = str(err) if isinstance(err, AssertionError) else f"{type(err).__name__}: {error_text(err)}"
        with self.lock:
            load.fail(text)

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
    (``server_pid``) and of its python stubs (``watch``) every hundredth of the soak (at least every 5 s). A
    model whose reference.py fails or disagrees with it is not loaded: its result says why."""
    run = SoakRun(options, models={m.spec.name: ModelLoad(m.spec.name, options.seconds) for m in models})
    if server_pid is None:
        run.notes.append("the soak could not sample the server's memory: its process is not on this machine")
    elif watch is None:
        run.notes.append(
            "the soak sampled the server's memory but not its python stubs': they are not this machine's "
            "processes to read (a server in a container)"
        )
    pools = _pools(models, run)
    loaded = [m for m in models if m.spec.name in pools]
    stop = threading.Event()
    started = time.monotonic()
    shared = _Shared(run, started)
    pace = _pacer(options, started, stop)
    clients = [
        _Client(model, protocol, endpoints, pools[model.spec.name], shared)
        for model, protocol in _assignments(loaded, options.concurrency)
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


def _pools(models: list[SoakModel], run: SoakRun) -> dict[str, list]:
    """Each model's requests (see _pool; none for a sequence model, whose clients make theirs); a model whose
    reference.py disagrees with its config or raises is left out, its load failed with why."""
    pools = {}
    for model in models:
        name = model.spec.name
        problem = reference_mismatch(model.spec, model.reference)
        try:
            pool = [] if problem or model.spec.sequence is not None else _pool(model)
        except Exception as err:  # noqa: BLE001 - the user's reference.py: any error it raises is said
            problem = f"reference.py raised {type(err).__name__}: {err}"
        if problem:
            run.models[name].fail(f"not soaked: {problem}")
            continue
        pools[name] = pool
    return pools


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
    answered = load.answered
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
