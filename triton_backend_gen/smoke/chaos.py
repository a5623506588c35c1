"""`tbgen test --chaos`: faults of the server's own parts, caused on purpose while valid requests flow, and
what the server made of them. The suite runs it last (it breaks the server), on a local server it started
with explicit model control.

Two faults, each reported step by step as results named ``chaos: ...``:

- **a BLS model's callees unloaded**: while requests flow to a model whose tbgen.toml entry ``calls`` others
  (a BLS model; not an ensemble, which the server itself takes down with its steps), the models it calls are
  unloaded through the repository API. Every request must then fail within DEADLINE_S with an error that
  names a callee (a BLS that waits on a model that is not there hangs its clients; one that answers anyway
  does not call it); then the callees are loaded again and the BLS model must answer correctly again within
  RECOVER_S.
- **a python stub killed**: while requests flow to every python model (its reference's make_inputs, each
  answer checked against reference.compute), one stub of each is SIGKILLed (runtime.stub_watch), callers
  first. For WINDOW_S the phase watches what follows: whether the server starts a new stub for that instance
  and answers again (recovered), what it answers about the model's readiness, and the requests that failed
  meanwhile. No release of python_backend restarts a stub (r24.10 to r26.06: "TODO: Implement restart"); from
  25.12 the model turns not ready, from 26.04 the server too; a 2.51 server (24.10) keeps answering that both
  are READY (server issue #8604).

The rule of a killed stub's result: it passes when the server recovered the instance, or stopped calling the
model ready (a readiness probe, /v2/health/ready or the model's, then takes the server out of rotation), or
no request failed at all; it fails when a request hung or got a wrong answer, or when requests failed while
the server went on answering that the model is READY. That is what a deployment needs to know: a backend
that fails its requests while its server claims to be ready is a black hole behind a load balancer, whoever's
fault it is. On 2.51 the result therefore fails, and says that the server is at fault and what changes it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from triton_backend_gen.errors import ServerError, TbgenError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime.model_control import load_model, unload_model
from triton_backend_gen.runtime.stub_watch import Stub, StubWatch
from triton_backend_gen.smoke.clients import Endpoints, Stream, error_text, infer, output_arrays
from triton_backend_gen.smoke.compare import output_mismatches
from triton_backend_gen.smoke.model import ModelSpec, load_model_specs, reference_mismatch
from triton_backend_gen.smoke.run import SmokeResult
from triton_backend_gen.smoke.stub_health import ISSUE_8604, ServedRelease

httpclient = lazy_module("tritonclient.http")

CHAOS_PREFIX = "chaos: "  # what every result of the phase is named with
DEADLINE_S = 5.0  # one request of the phase: answered, failed, or reported as hung
HUNG_AFTER_S = DEADLINE_S - 0.1  # a request that took this long ran into the client's deadline
WINDOW_S = 5.0  # how long after a kill the phase waits for the server to recover the stub or say not ready
BASELINE_ANSWERS = 2  # correct answers a model gives before anything is broken
OUTAGE_REQUESTS = 3  # requests a BLS model must fail while its callees are unloaded
RECOVER_S = 10.0  # how long after its callees are back a BLS model may take to answer correctly again
PACE_S = 0.02  # the pause between two requests of a flow (one that fails at once does not spin)
POLL_S = 0.2  # how often the phase asks the server and /proc while it watches
PROBE_TIMEOUT_S = 2.0  # one readiness question


@dataclass(frozen=True)
class Answer:
    """One request of a flow: when it was sent (time.monotonic()), how long it took, what came back."""

    sent: float
    seconds: float
    error: str = ""  # "": answered as reference.py computes; else the server's error, or what was wrong
    hung: bool = False  # no answer within DEADLINE_S
    wrong: bool = False  # answered, but not as reference.py computes

    @property
    def ok(self) -> bool:
        return not self.error


# --- decisions -------------------------------------------------------------------------------------------
def bls_callees(models: Sequence[ModelEntry]) -> list[tuple[str, tuple[str, ...]]]:
    """(model, the models it calls) of each BLS model among ``models``: a model that calls others and is not
    an ensemble (the server unloads an ensemble with its steps; a BLS model stays and must answer)."""
    return [(m.name, m.calls) for m in models if m.calls and m.pattern != "ensemble"]


def kill_order(python: Sequence[str], models: Sequence[ModelEntry]) -> list[str]:
    """``python`` (the models a python stub serves) with the models that call others first: their requests
    then fail for their own stub, not for a callee's killed a moment earlier."""
    callers = {m.name for m in models if m.calls}
    return sorted(python, key=lambda name: name not in callers)


def baseline_problem(answers: Sequence[Answer]) -> str | None:
    """Why ``answers``, sent before anything was broken, show no model that works (None: they do)."""
    failed = next((a for a in answers if not a.ok), None)
    if failed is not None:
        return f"a request failed: {failed.error}"
    if len(answers) < BASELINE_ANSWERS:
        return f"{len(answers)} request(s) answered within {2 * DEADLINE_S:g} s"
    return None


def failures_text(answers: Sequence[Answer]) -> str:
    """What the failed ones among ``answers`` were: how many, how long each took, the first error (a
    sentence)."""
    failed = [a for a in answers if not a.ok]
    if not failed:
        return f"all {len(answers)} requests were answered correctly."
    hung = sum(a.hung for a in failed)
    took = (
        f"{hung} of them hung (no answer within {DEADLINE_S:g} s)"
        if hung
        else f"each within {max(a.seconds for a in failed):.2f} s"
    )
    return sentence(f"{len(failed)} of {len(answers)} requests failed, {took}; the first: {failed[0].error}")


def sentence(text: str) -> str:
    """``text`` ending with a full stop (a server's error often has one already)."""
    return text if text.rstrip().endswith((".", "!", "?")) else text.rstrip() + "."


@dataclass(frozen=True)
class KillOutcome:
    """What followed the kill of one stub of ``model`` (``stub``: None when it had no live stub to kill)."""

    model: str
    stub: Stub | None
    server: ServedRelease
    before: tuple[Answer, ...] = ()  # the answers before the kill
    at: float = 0.0  # when it was killed (time.monotonic())
    after: tuple[Answer, ...] = ()  # the requests sent from the kill to the end of the window
    new_stub_at: float | None = None  # when a new stub served the killed instance
    not_ready_at: float | None = None  # when the server first answered that the model is not ready
    server_not_ready: bool = False  # it answered (once at least) that it is not ready itself
    ready_answered: bool = True  # the server answered the readiness questions at all

    @property
    def recovered_at(self) -> float | None:
        """When the model first answered correctly on a new stub of the killed instance."""
        if self.new_stub_at is None:
            return None
        return next((a.sent for a in self.after if a.ok and a.sent >= self.new_stub_at), None)

    @property
    def meanwhile(self) -> tuple[Answer, ...]:
        """The requests sent after the kill and before the model recovered."""
        until = self.recovered_at
        return tuple(a for a in self.after if until is None or a.sent < until)


def judge_kill(outcome: KillOutcome) -> SmokeResult:
    """The result of a killed stub (see the module's rule)."""
    name = f"{CHAOS_PREFIX}stub killed {outcome.model}"
    if outcome.stub is None:
        return SmokeResult(name, "-", False, f"no live python stub of model '{outcome.model}' to kill", 0.0)
    early = baseline_problem(outcome.before)
    if early is not None:
        return SmokeResult(name, "-", False, f"not killed: before anything was broken, {early}", 0.0)
    stub = outcome.stub
    told = (
        f"killed the python stub of instance {stub.instance} (pid {stub.pid}, SIGKILL) while requests flowed "
        f"to '{outcome.model}' ({len(outcome.before)} answered correctly before). "
    )
    passed, verdict = _kill_verdict(outcome)
    seconds = outcome.after[-1].sent + outcome.after[-1].seconds - outcome.at if outcome.after else 0.0
    return SmokeResult(name, "-", passed, told + verdict, seconds)


def _kill_verdict(outcome: KillOutcome) -> tuple[bool, str]:
    """(passed, what happened after the kill and why that passes or fails)."""
    meanwhile = outcome.meanwhile
    failed = [a for a in meanwhile if not a.ok]
    story = _recovery_sentence(outcome) + " " + _readiness_sentence(outcome)
    story += f" Meanwhile {failures_text(meanwhile)}" if meanwhile else " No request was sent meanwhile."
    if any(a.hung or a.wrong for a in outcome.after):
        return False, story + " Failed: after a stub died every request must be answered or fail in time."
    if outcome.recovered_at is not None or outcome.not_ready_at is not None or not failed:
        return True, story
    return False, story + (
        " Failed: requests failed while the server claimed the model READY, so its readiness probes keep "
        "sending it requests that all fail."
        + (
            " A server of release 25.12 or later answers that such a model is not ready, one of 26.04 or "
            "later that it is not ready itself (`tbgen update --triton-version 26.04`); on this one only a "
            "restart brings the model back (loading it again does nothing while its files are unchanged)."
            if _predates_instance_health(outcome.server)
            else ""
        )
    )


def _recovery_sentence(outcome: KillOutcome) -> str:
    window = f"{WINDOW_S:g} s"
    if outcome.recovered_at is not None:
        return (
            f"The server recovered it: a new stub served {outcome.stub.instance} and the model answered "
            f"correctly {outcome.recovered_at - outcome.at:.1f} s after the kill."
        )
    if outcome.new_stub_at is not None:
        return (
            f"A new stub served {outcome.stub.instance}, but the model answered no request correctly "
            f"within {window}."
        )
    return f"The server did not recover it: no new stub served {outcome.stub.instance} within {window}."


def _readiness_sentence(outcome: KillOutcome) -> str:
    said = outcome.server.describe()
    said = said[0].upper() + said[1:]
    if not outcome.ready_answered:
        return f"{said} did not answer whether the model is ready."
    if outcome.not_ready_at is not None:
        seconds = outcome.not_ready_at - outcome.at
        after = f"{said} answered that the model is not ready {seconds:.1f} s after the kill"
        if outcome.server_not_ready:
            return (
                after
                + ", and that it is not ready itself: a readiness probe of the server or the model sees it."
            )
        return after + (
            f" (and that it is ready itself): a readiness probe of the model "
            f"(/v2/models/{outcome.model}/ready) sees it, one of the server (/v2/health/ready) does not."
        )
    also = " (and itself ready)" if not outcome.server_not_ready else ""
    why = (
        f" ({ISSUE_8604}: python_backend before 25.12 does not report an instance's health)"
        if _predates_instance_health(outcome.server)
        else ""
    )
    return f"{said} still claimed the model READY{also} all the while{why}."


def _predates_instance_health(server: ServedRelease) -> bool:
    return server.release is not None and not server.release.has("python_instance_ready")


@dataclass(frozen=True)
class OutageOutcome:
    """What a BLS ``model`` answered while its ``callees`` were unloaded, and after they were loaded again."""

    model: str
    callees: tuple[str, ...]
    before: tuple[Answer, ...] = ()  # the answers before the callees were unloaded
    unload_error: str | None = None  # None: not tried; "": unloaded
    during: tuple[Answer, ...] = ()  # the requests sent while they were unloaded
    load_error: str | None = None  # None: not tried; "": loaded again
    load_seconds: float = 0.0
    after: tuple[Answer, ...] = ()  # the requests sent once they were loaded again
    loaded_at: float = 0.0

    @property
    def names(self) -> str:
        return ", ".join(self.callees)


def judge_outage(outcome: OutageOutcome) -> SmokeResult:
    """The result of the callees' unloading: every request failed in time, naming a callee."""
    name = f"{CHAOS_PREFIX}{outcome.model} with {outcome.names} unloaded"
    early = baseline_problem(outcome.before)
    if early is not None:
        return SmokeResult(name, "-", False, f"not unloaded: before anything was broken, {early}", 0.0)
    if outcome.unload_error:
        return SmokeResult(name, "-", False, f"could not unload {outcome.names}: {outcome.unload_error}", 0.0)
    told = f"unloaded {outcome.names} through the repository API while requests flowed to '{outcome.model}': "
    seconds = (
        outcome.during[-1].sent + outcome.during[-1].seconds - outcome.during[0].sent
        if outcome.during
        else 0.0
    )
    return SmokeResult(name, "-", *_outage_verdict(outcome, told), seconds)


def _outage_verdict(outcome: OutageOutcome, told: str) -> tuple[bool, str]:
    during = outcome.during
    failed = [a for a in during if not a.ok]
    unnamed = [a for a in failed if not a.hung and not any(c in a.error for c in outcome.callees)]
    story = told + (failures_text(during) if during else "no request came back.")
    if any(a.hung for a in during):
        return False, story + (
            f" Failed: a BLS request must not wait on a model that is not there (give its requests to "
            f"{outcome.names} a timeout, and fail the request when one fails)."
        )
    if any(a.wrong for a in during):
        return False, story + " Failed: a request was answered with outputs reference.py does not compute."
    if unnamed:
        return False, story + (
            f" Failed: the error does not name the model that is missing ({outcome.names}): "
            f"{unnamed[0].error}"
        )
    if not failed:
        return False, story + (
            f" Failed: tbgen.toml says '{outcome.model}' calls {outcome.names}, but it answered without them."
        )
    return True, story + " Every error names the model that is missing."


def judge_return(outcome: OutageOutcome) -> SmokeResult:
    """The result of the callees' loading again: the BLS model answers correctly again in time."""
    name = f"{CHAOS_PREFIX}{outcome.model} with {outcome.names} loaded again"
    if outcome.load_error is None:
        return SmokeResult(name, "-", False, "not run: the callees were not unloaded", 0.0)
    if outcome.load_error:
        return SmokeResult(
            name, "-", False, f"could not load {outcome.names} again: {outcome.load_error}", 0.0
        )
    told = f"loaded {outcome.names} again ({outcome.load_seconds:.1f} s): "
    first = next((a for a in outcome.after if a.ok), None)
    if first is None:
        last = outcome.after[-1].error if outcome.after else "no request came back"
        return SmokeResult(
            name,
            "-",
            False,
            told
            + f"'{outcome.model}' answered no request correctly within {RECOVER_S:g} s; the last: {last}",
            RECOVER_S,
        )
    failed = sum(not a.ok for a in outcome.after if a.sent < first.sent)
    waited = first.sent + first.seconds - outcome.loaded_at
    return SmokeResult(
        name,
        "-",
        True,
        told
        + f"'{outcome.model}' answered correctly again {waited:.2f} s later"
        + (f" ({failed} request(s) failed before)" if failed else ""),
        waited,
    )


# --- requests that flow ------------------------------------------------------------------------------------
Send = Callable[[int], Answer]  # one request (made with this seed), its answer


def sender(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints) -> Send:
    """One valid request to the model of ``spec`` per call (reference.make_inputs with the call's seed, its
    first batch size), judged against reference.py, with a deadline: over HTTP, or a gRPC stream for a
    decoupled model."""
    ask = _ask_stream if spec.decoupled else _ask_unary
    return lambda seed: _timed(lambda: ask(spec, reference, endpoints, seed))


def _timed(ask: Callable[[], list[str]]) -> Answer:
    """``ask``'s mismatches with reference.py as an Answer, timed (an exception: the request failed)."""
    sent = time.monotonic()
    try:
        problems = ask()
    except Exception as err:  # noqa: BLE001 - what the server answered is the finding
        seconds = time.monotonic() - sent
        text = error_text(err) or type(err).__name__
        if seconds >= HUNG_AFTER_S:
            return Answer(sent, seconds, f"no answer within {DEADLINE_S:g} s ({text})", hung=True)
        return Answer(sent, seconds, text)
    seconds = time.monotonic() - sent
    if problems:
        return Answer(sent, seconds, "wrong answer: " + "; ".join(problems[:3]), wrong=True)
    return Answer(sent, seconds)


def _ask_unary(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints, seed: int) -> list[str]:
    inputs = reference.make_inputs(spec.batch_sizes[0], seed=seed)
    client = httpclient.InferenceServerClient(
        endpoints.http_url, connection_timeout=DEADLINE_S, network_timeout=DEADLINE_S
    )
    try:
        got = infer("http", client, spec, inputs)
    finally:
        client.close()
    # a one-request sequence of a sequence model: compute_sequence's answer to it
    expected = reference.compute_sequence([inputs])[-1] if spec.sequence else reference.compute(inputs)
    return output_mismatches(got, expected, reference.TOLERANCE)


def _ask_stream(spec: ModelSpec, reference: ModuleType, endpoints: Endpoints, seed: int) -> list[str]:
    """One request on a stream of its own: its responses up to the final flag, against reference.responses."""
    inputs = reference.make_inputs(spec.batch_sizes[0], seed=seed)
    with Stream(endpoints, deadline_s=DEADLINE_S) as stream:
        data = stream.infer_results(spec, inputs, request_id="chaos")
    expected = reference.responses(inputs)
    if len(data) != len(expected):
        return [f"{len(data)} responses, reference.responses gives {len(expected)}"]
    return [
        problem
        for result, want in zip(data, expected, strict=True)
        for problem in output_mismatches(output_arrays(result, want), want, reference.TOLERANCE)
    ]


class Flow:
    """Requests sent one after another (``send``, seeds counting up) from a thread of their own."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.answers: list[Answer] = []
        self._halted = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tbgen-chaos-flow")

    def _run(self) -> None:
        seed = 0
        while not self._halted.is_set():
            self.answers.append(self.send(seed))
            seed += 1
            self._halted.wait(PACE_S)

    def start(self) -> None:
        self._thread.start()

    def halt(self) -> None:
        """Send no more requests (the one in flight ends within its deadline)."""
        self._halted.set()

    def join(self) -> None:
        """Wait for the request in flight (see halt)."""
        if self._thread.is_alive():
            self._thread.join(DEADLINE_S + 1.0)

    def since(self, moment: float, until: float | None = None) -> tuple[Answer, ...]:
        """The answers to the requests sent from ``moment`` (up to ``until``)."""
        return tuple(a for a in list(self.answers) if a.sent >= moment and (until is None or a.sent < until))

    def wait(self, done: Callable[[list[Answer]], bool], timeout: float) -> None:
        """Until ``done(answers)`` or ``timeout`` seconds passed."""
        ends = time.monotonic() + timeout
        while not done(list(self.answers)) and time.monotonic() < ends:
            time.sleep(POLL_S / 2)


@contextlib.contextmanager
def flowing(flows: Sequence[Flow]) -> Iterator[None]:
    """``flows`` running, halted and joined on any way out."""
    try:
        for flow in flows:
            flow.start()
        yield
    finally:
        for flow in flows:
            flow.halt()
        for flow in flows:
            flow.join()


def _baseline_seen(answers: list[Answer]) -> bool:
    """Whether a flow has shown how the model answers while nothing is broken (enough answers, a failure)."""
    return len(answers) >= BASELINE_ANSWERS or any(not a.ok for a in answers)


# --- the phase ---------------------------------------------------------------------------------------------
@dataclass
class ChaosRun:
    """What the phase needs of the suite's run: the models to break (none of them broken), their plan's
    repository and served configs, the server, its stubs, and where results, steps and notes go."""

    project: Project
    models: list[ModelEntry]
    python: list[str]  # those of ``models`` a python stub serves
    repository: Path
    served: Mapping | None
    endpoints: Endpoints
    watch: StubWatch | None  # None: this machine does not see the server's processes
    server: ServedRelease
    add: Callable[[SmokeResult], None]
    phase: Callable[[str], None] = lambda text: None
    notes: list[str] = field(default_factory=list)


def run_chaos(run: ChaosRun) -> bool:
    """The BLS models' callees unloaded and loaded again, one BLS model after another; then a stub of each
    python model killed; each step's results added as they come. Whether a stub was killed (the server then
    never finishes unloading that model)."""
    senders = _senders(run)
    bls = bls_callees(run.models)
    targets = [name for name in kill_order(run.python, run.models) if name in senders]
    if not targets and not any(model in senders for model, _ in bls):
        run.notes.append("--chaos had nothing to break: no BLS model and no python model to drive")
        return False
    for model, callees in bls:
        if model in senders:
            run.phase(
                f"chaos: {', '.join(callees)} unloaded while requests flow to {model}, then loaded again"
            )
            outcome = _outage(run, model, callees, senders[model])
            run.add(judge_outage(outcome))
            run.add(judge_return(outcome))
    if targets and run.watch is None:
        run.notes.append("--chaos killed no stub: this machine does not see the server's processes")
        return False
    if not targets:
        return False
    run.phase(f"chaos: a python stub of {', '.join(targets)} killed while requests flow ({WINDOW_S:g} s)")
    killed = False
    for outcome in _kill_stubs(run, targets, senders):
        run.add(judge_kill(outcome))
        killed = killed or outcome.stub is not None
    return killed


def _senders(run: ChaosRun) -> dict[str, Send]:
    """A sender per model of the run that reference.py can drive (the others noted as left out)."""
    senders = {}
    for entry in run.models:
        try:
            [(reference, spec, _)] = load_model_specs(run.project, entry, run.repository, run.served)
            why = reference_mismatch(spec, reference)
        except TbgenError as err:
            why = err.message
        if why is None:
            senders[entry.name] = sender(spec, reference, run.endpoints)
        else:
            run.notes.append(f"--chaos left out {entry.name}: {why}")
    return senders


def _outage(run: ChaosRun, model: str, callees: tuple[str, ...], send: Send) -> OutageOutcome:
    """``callees`` unloaded while requests flow to ``model``, then loaded again."""
    flow = Flow(send)
    with flowing([flow]):
        flow.wait(_baseline_seen, 2 * DEADLINE_S)
        before = flow.since(0.0)
        if baseline_problem(before) is not None:
            return OutageOutcome(model, callees, before)
        unload_error = _model_control(unload_model, run.endpoints.http_url, callees)
        unloaded_at = time.monotonic()
        if unload_error:  # those it unloaded are loaded again
            _model_control(load_model, run.endpoints.http_url, callees)
            return OutageOutcome(model, callees, before, unload_error)
        flow.wait(lambda answers: _outage_seen(answers, unloaded_at), OUTAGE_REQUESTS * DEADLINE_S + 1.0)
        loading = time.monotonic()
        load_error = _model_control(load_model, run.endpoints.http_url, callees)
        loaded_at = time.monotonic()
        if run.watch is not None:
            run.watch.forget(list(callees))  # their stubs are new ones now
        if not load_error:
            flow.wait(lambda answers: any(a.ok and a.sent >= loaded_at for a in answers), RECOVER_S)
    during = flow.since(unloaded_at, loading)
    after = flow.since(loaded_at)
    return OutageOutcome(
        model, callees, before, "", during, load_error, loaded_at - loading, after, loaded_at
    )


def _outage_seen(answers: list[Answer], unloaded_at: float) -> bool:
    """Whether enough requests sent after ``unloaded_at`` came back (or one hung) to judge the outage."""
    since = [a for a in answers if a.sent >= unloaded_at]
    return len(since) >= OUTAGE_REQUESTS or any(a.hung for a in since)


def _model_control(action: Callable[[str, str], None], http_url: str, models: Sequence[str]) -> str:
    """``action`` (load_model, unload_model) of each of ``models``: "" when all went well, else the error."""
    for name in models:
        try:
            action(http_url, name)
        except ServerError as err:
            return err.message
    return ""


@dataclass
class _Watching:
    """What the phase saw of one killed stub's model during the window."""

    stub: Stub | None
    at: float
    new_stub_at: float | None = None
    not_ready_at: float | None = None
    server_not_ready: bool = False
    answered: bool = True


def _kill_stubs(run: ChaosRun, targets: list[str], senders: Mapping[str, Send]) -> list[KillOutcome]:
    """Requests flowing to each of ``targets``, one stub of each killed, WINDOW_S watched."""
    flows = {name: Flow(senders[name]) for name in targets}
    watching: dict[str, _Watching] = {}
    with flowing(list(flows.values())):
        for flow in flows.values():
            flow.wait(_baseline_seen, 2 * DEADLINE_S)
        befores = {name: flow.since(0.0) for name, flow in flows.items()}
        for name in targets:
            if baseline_problem(befores[name]) is None:
                watching[name] = _Watching(run.watch.kill_one(name), time.monotonic())
        ends = time.monotonic() + WINDOW_S
        while watching and time.monotonic() < ends and not _all_recovered(watching, flows):
            _look(run, watching)
            time.sleep(POLL_S)
    return [
        _kill_outcome(run, name, befores[name], watching.get(name), flows[name], ends if watching else 0.0)
        for name in targets
    ]


def _look(run: ChaosRun, watching: dict[str, _Watching]) -> None:
    """What the server and /proc say now about each killed stub's model."""
    live = run.watch.stubs()
    client = httpclient.InferenceServerClient(
        run.endpoints.http_url, connection_timeout=PROBE_TIMEOUT_S, network_timeout=PROBE_TIMEOUT_S
    )
    try:
        server_ready = _ask(client.is_server_ready)
        for name, seen in watching.items():
            if seen.stub is None:
                continue
            if seen.new_stub_at is None and any(
                s.instance == seen.stub.instance and s.pid != seen.stub.pid for s in live
            ):
                seen.new_stub_at = time.monotonic()
            ready = _ask(lambda name=name: client.is_model_ready(name))
            seen.answered = seen.answered and ready is not None
            if ready is False and seen.not_ready_at is None:
                seen.not_ready_at = time.monotonic()
            seen.server_not_ready = seen.server_not_ready or server_ready is False
    finally:
        client.close()


def _all_recovered(watching: dict[str, _Watching], flows: Mapping[str, Flow]) -> bool:
    """Whether every killed stub's model answers correctly on a new stub (nothing more to wait for)."""
    return all(
        seen.stub is None
        or (seen.new_stub_at is not None and any(a.ok for a in flows[name].since(seen.new_stub_at)))
        for name, seen in watching.items()
    )


def _kill_outcome(
    run: ChaosRun, name: str, before: tuple[Answer, ...], seen: _Watching | None, flow: Flow, ends: float
) -> KillOutcome:
    if seen is None:  # not killed: its requests failed before
        return KillOutcome(name, _any_stub(run, name), run.server, before)
    return KillOutcome(
        name,
        seen.stub,
        run.server,
        before,
        seen.at,
        flow.since(seen.at, ends),
        seen.new_stub_at,
        seen.not_ready_at,
        seen.server_not_ready,
        seen.answered,
    )


def _any_stub(run: ChaosRun, name: str) -> Stub | None:
    """A live stub of ``name`` (to tell "not killed" from "nothing to kill")."""
    return next((s for s in run.watch.stubs() if s.model == name), None) if run.watch else None


def _ask(question: Callable[[], bool]) -> bool | None:
    try:
        return bool(question())
    except Exception:  # noqa: BLE001 - no answer (a timeout, a refused connection)
        return None
