"""A python backend stub that died or hung while the smoke suite ran, found and named; and, on a server that
reports a python instance's health, the check that such an instance turns its model not ready.

After each check the suite looks at the server's stubs (``runtime.stub_watch``: a local server only). A stub
found dead or hung breaks its model: the check fails, the model's remaining checks are not run (each of its
requests would only fail, after a second, or wait out its deadline on a stream), and the report names the
model, the instance, how the process ended, the check it happened in, what the server answered about the
model's readiness right then, and what a request to it got.

The server's release (from its metadata, not the project's) decides what it should answer:

- before 25.12 (the 2.51 server of the embedded wheel is 24.10) python_backend has no
  TRITONBACKEND_ModelInstanceReady: the server keeps answering that the model is ready (server issue #8604);
- from 25.12 python_backend reports an instance whose stub is gone (or whose is_ready() says no) as not
  ready, so the model-ready endpoint answers false; from 26.04 the server-ready endpoint fails too. On such a
  local server the suite checks it last (it kills a stub of each python model, which that model does not
  survive): :func:`plan_unhealthy_instance_checks` decides.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.errors import UnknownReleaseError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.server import TritonServer
from triton_backend_gen.runtime.stub_watch import StubTrouble, StubWatch
from triton_backend_gen.smoke.clients import Endpoints, error_text, infer
from triton_backend_gen.smoke.model import load_model_specs
from triton_backend_gen.smoke.run import SmokeCheck, SmokeResult

httpclient = lazy_module("tritonclient.http")

STUB_CHECK = "python stub"  # the name of the result about a stub that died or hung (+ its instance)
UNHEALTHY_CHECK = "an instance made unhealthy turns the model not ready"
READY_DEADLINE_S = 10.0  # how long a server of 25.12+ may take to answer "not ready" after a stub was killed
PROBE_TIMEOUT_S = 10.0  # one readiness or inference request sent to find out what the server answers now
# A 2.51 server does not unload a model whose stub died or hung: it waits out its exit timeout (30 s) and
# exits 1. A run that found one stops it with this timeout, then kills it.
BROKEN_STOP_TIMEOUT_S = 2.0
ISSUE_8604 = "server issue #8604"
# What python_backend fails a request of a dead or stopped stub with (src/stub_launcher.cc, python_be.cc).
_BACKEND_ERROR = re.compile(
    r"Stub process (?:'[^']*' )?is not healthy[^.;\n]*\.?|Failed to obtain the health mutex\.?"
)


@dataclass(frozen=True)
class ServedRelease:
    """Which server answers: its version ("2.51.0"), and its release when tbgen knows it."""

    version: str
    release: versions.Release | None

    def describe(self) -> str:
        return f"the {self.version} server" + (f" (release {self.release.container})" if self.release else "")


@dataclass(frozen=True)
class StubDeath:
    """A stub found dead or hung, with what the server answered right after."""

    trouble: StubTrouble
    during: str | None  # the check (or phase) after which it was found: "infer [http]"; None: before any
    server: ServedRelease
    model_ready: bool | None  # the model-ready endpoint's answer (None: no answer)
    server_ready: bool | None
    request: str | None  # what one request to the model got: the server's error, "" when it was answered


# --- decisions -------------------------------------------------------------------------------------------
def served_release(version: str) -> ServedRelease:
    """The release of a server that says it is ``version`` (a release tbgen does not know: none)."""
    try:
        return ServedRelease(version, versions.resolve(version))
    except UnknownReleaseError:
        return ServedRelease(version, None)


def plans_unhealthy_instance_checks(release: versions.Release | None, *, sees_stubs: bool) -> bool:
    """Whether the suite ends by killing a stub of each python model to see the model turn not ready: where
    the server's ``release`` reports a python instance's health (25.12+) and this machine sees the server's
    stub processes (``sees_stubs``: a local server). Not on a release tbgen does not know (what it answers is
    not known), nor where the check could not kill a stub."""
    return release is not None and release.has("python_instance_ready") and sees_stubs


def server_goes_unready(release: versions.Release) -> bool:
    """Whether the server's ready endpoint fails while an instance of a READY model is not ready (26.04+)."""
    return release.has("server_ready_checks_instances")


def broken_reason(trouble: StubTrouble, during: str | None) -> str:
    """One line: why a model's remaining checks were not run (``during``: the check or phase it happened in,
    None before these checks began, or in an earlier run of checks against the same server)."""
    stub = trouble.stub
    what = "died" if trouble.dead else "hung"
    when = f"during '{during}'" if during is not None else "earlier"
    again = "" if during is not None else "; it serves again once the model is loaded again"
    return (
        f"the python stub of model '{stub.model}' instance {stub.instance} {what} {when} ({trouble.how})"
        + again
    )


def death_text(death: StubDeath) -> str:
    """What the report says about a stub that died or hung: what happened, what the server answered, what a
    request got, what to do."""
    stub = death.trouble.stub
    what = "died" if death.trouble.dead else "hung"
    text = (
        f"the python stub of model '{stub.model}' instance {stub.instance} {what} "
        + (f"during '{death.during}'" if death.during is not None else "before these checks began")
        + f": {death.trouble.state}."
    )
    text += _readiness_sentence(death)
    if death.request:
        text += f" Requests to it fail: {death.request}"
    elif death.request == "":
        text += " A request to the model was still answered (by another of its instances)."
    return text + (
        " python_backend does not restart a stub (loading the model again starts a new one), so the model's "
        "remaining checks were not run. "
        "If nothing outside killed or stopped it, the fault is in the model's code (or a library it calls): "
        "it comes back every run."
    )


def _readiness_sentence(death: StubDeath) -> str:
    """What the server answered about the model's (and its own) readiness, against what its release does."""
    server = death.server
    said = server.describe()
    said = said[0].upper() + said[1:]
    if death.model_ready is None:
        return f" {said} did not answer whether the model is ready."
    if not death.model_ready:
        also = " and that it is not ready itself" if death.server_ready is False else ""
        return f" {said} answers that the model is not ready{also}."
    reports = server.release is not None and server.release.has("python_instance_ready")
    why = (
        ""
        if reports
        else f" ({ISSUE_8604}: python_backend before 25.12 does not report an instance's health, so a "
        "readiness probe does not notice)"
    )
    return f" {said} still answers that the model is ready{why}."


def backend_error(detail: str) -> str | None:
    """The python backend's error about a stub in a failed check's ``detail``, if it holds one."""
    match = _BACKEND_ERROR.search(detail)
    return match.group(0) if match else None


# --- the health of a run's stubs ----------------------------------------------------------------------------
@dataclass
class StubHealth:
    """The stubs of one server during a run: asked after each check (:meth:`after`, run_smoke's
    ``broken_models``) and after the fuzzer (:meth:`look`); what it found, as results (:meth:`results`)."""

    triton: TritonServer
    endpoints: Endpoints
    watch: StubWatch | None  # None: this machine does not see the server's processes
    # what a request to a model gets: the server's error, "" when answered, None when none can be sent
    request: Callable[[str], str | None] = field(default=lambda model: None)
    deaths: list[StubDeath] = field(default_factory=list)
    broken: dict[str, str] = field(default_factory=dict)  # model -> why its checks stopped
    _server: ServedRelease | None = None

    def __post_init__(self) -> None:
        # what an earlier run against the same server found (`tbgen dev` keeps one watch per server)
        for trouble in self.watch.reported.values() if self.watch is not None else ():
            self.broken.setdefault(trouble.stub.model, broken_reason(trouble, None))
        self.look(None)  # what died since it last looked (between two turns of `tbgen dev`)

    def after(self, check: SmokeCheck, result: SmokeResult) -> dict[str, str]:
        """The models broken after ``check`` (with ``result``), each with why: those found now and before."""
        label = f"{check.name} [{check.protocol}]" if check.protocol != "-" else check.name
        self.look(label, result.detail if not result.passed else "")
        return dict(self.broken)

    def look(self, during: str | None, detail: str = "") -> dict[str, str]:
        """The models whose stub was found dead or hung now (``during``: the check or phase just run, None
        before any; ``detail``: its failure, which may hold the server's error)."""
        if self.watch is None or not self.triton.running:  # a server that stopped is reported as such
            return {}
        found: dict[str, str] = {}
        for trouble in self.watch.look():
            self.deaths.append(self._death(trouble, during, detail))
            found.setdefault(trouble.stub.model, broken_reason(trouble, during))
        self.broken.update(found)
        return found

    @property
    def server(self) -> ServedRelease:
        """The server's version and release, asked once."""
        if self._server is None:
            self._server = served_release(_server_version(self.endpoints))
        return self._server

    @property
    def instances(self) -> set[str]:
        """The instances whose stub was found dead or hung."""
        return {death.trouble.stub.instance for death in self.deaths}

    def results(self, name: str) -> list[SmokeResult]:
        """A failed result per stub found dead or hung, named ``name`` and its instance, with the server
        log's lines (the stub prints its fatal errors there)."""
        if not self.deaths:
            return []
        lines = "\n".join(self.triton.relevant_log_lines(limit=15)) or "(nothing about it)"
        return [
            SmokeResult(
                f"{name} {death.trouble.stub.instance}",
                "-",
                False,
                f"{death_text(death)}\nServer log ({self.triton.log_file}):\n{lines}",
                0.0,
            )
            for death in self.deaths
        ]

    def _death(self, trouble: StubTrouble, during: str | None, detail: str) -> StubDeath:
        """``trouble`` with what the server answers now: readiness, and a request's error (from ``detail``
        when the check met it already)."""
        model = trouble.stub.model
        model_ready, server_ready = _readiness(self.endpoints, model)
        seen = backend_error(detail)
        request = seen if seen is not None else self.request(model)
        return StubDeath(trouble, during, self.server, model_ready, server_ready, request)


def stub_health(
    project: Project,
    triton: TritonServer,
    endpoints: Endpoints,
    watch: StubWatch | None,
    repository: Path | None = None,
    served: Mapping | None = None,
) -> StubHealth:
    """The StubHealth of a run of ``project``'s models on ``triton``; a request it sends to a broken model
    is made from the model's reference.py (``repository``, ``served``: as the plan was made)."""
    return StubHealth(
        triton, endpoints, watch, partial(_probe_request, project, endpoints, repository, served)
    )


def _probe_request(
    project: Project, endpoints: Endpoints, repository: Path | None, served: Mapping | None, model: str
) -> str | None:
    """What one request to ``model`` (its reference's inputs for its first batch size, over HTTP) gets: the
    server's error, "" when it was answered, None when no such request can be sent (a decoupled model
    answers only on a stream; a model without a usable reference)."""
    try:
        [(reference, spec, _)] = load_model_specs(project, project.model(model), repository, served)
        inputs = reference.make_inputs(spec.batch_sizes[0], seed=0)
    except Exception:  # noqa: BLE001 - a reference that cannot make a request (a SmokeError too): no probe
        return None
    if spec.decoupled:
        return None
    client = httpclient.InferenceServerClient(
        endpoints.http_url, connection_timeout=PROBE_TIMEOUT_S, network_timeout=PROBE_TIMEOUT_S
    )
    try:
        infer("http", client, spec, inputs)
    except Exception as err:  # noqa: BLE001 - what the server answered is the finding
        return error_text(err) or type(err).__name__
    finally:
        client.close()
    return ""


def _readiness(endpoints: Endpoints, model: str) -> tuple[bool | None, bool | None]:
    """(whether the server answers that ``model`` is ready, whether it answers that it is ready itself);
    None for a question it did not answer."""
    client = httpclient.InferenceServerClient(
        endpoints.http_url, connection_timeout=PROBE_TIMEOUT_S, network_timeout=PROBE_TIMEOUT_S
    )
    try:
        return _answer(lambda: client.is_model_ready(model)), _answer(client.is_server_ready)
    finally:
        client.close()


def _answer(ask: Callable[[], bool]) -> bool | None:
    try:
        return bool(ask())
    except Exception:  # noqa: BLE001 - no answer (a timeout, a refused connection)
        return None


def _server_version(endpoints: Endpoints) -> str:
    client = httpclient.InferenceServerClient(
        endpoints.http_url, connection_timeout=PROBE_TIMEOUT_S, network_timeout=PROBE_TIMEOUT_S
    )
    try:
        return str(client.get_server_metadata().get("version", "unknown"))
    except Exception:  # noqa: BLE001 - a server that does not say
        return "unknown"
    finally:
        client.close()


# --- the check of a server that reports an instance's health ----------------------------------------------
def unhealthy_instance_checks(
    watch: StubWatch, models: Sequence[str], release: versions.Release, named: bool
) -> list[SmokeCheck]:
    """The checks that a killed stub of each of ``models`` turns it not ready (and, from 26.04, the server);
    ``named``: the check names carry the model's (a project with several)."""
    return [
        SmokeCheck(
            (f"{model}: " if named else "") + UNHEALTHY_CHECK,
            "http",
            partial(_check_unhealthy_instance, watch, model, server_goes_unready(release)),
            quick=False,
            model=model,
        )
        for model in models
    ]


def _check_unhealthy_instance(watch: StubWatch, model: str, server_too: bool, endpoints: Endpoints) -> str:
    """Kill one stub of ``model`` (SIGKILL) and wait until the server answers that the model (and, with
    ``server_too``, the server) is not ready."""
    stub = watch.kill_one(model)
    if stub is None:
        raise AssertionError(f"no live python stub of model '{model}' was found to kill")
    started = time.monotonic()
    while True:
        model_ready, server_ready = _readiness(endpoints, model)
        if model_ready is False and (not server_too or server_ready is False):
            also = " and the server not ready" if server_too else ""
            return (
                f"killed the stub of {stub.instance} (SIGKILL): the model answered not ready{also} after "
                f"{time.monotonic() - started:.1f} s"
            )
        if time.monotonic() - started > READY_DEADLINE_S:
            raise AssertionError(
                f"{READY_DEADLINE_S:.0f} s after the stub of {stub.instance} was killed (SIGKILL), the "
                f"server still answers model ready: {model_ready}, server ready: {server_ready}"
                + (" (from 26.04 the server is not ready either)" if server_too else "")
            )
        time.sleep(0.1)
