"""The chart's pod spec as a container on the local Docker engine, probed as the kubelet probes it (what
`tbgen deploy local` runs the smoke suite against).

The Deployment the chart renders gives the container: image, command, args, env, ports, the size of the
memory-backed /dev/shm, the other emptyDir volumes (tmpfs), the user and group, a read-only root file system,
dropped capabilities, no privilege escalation, and the CPU and memory limits. It runs with host networking,
its servers bound to 127.0.0.1 (three address flags are appended to its args; the chart's ports are used when
they are free there, else free ones are rendered into it and a note says so).

:class:`ProbeMonitor` runs the chart's probes as the kubelet would: the startup probe from the container's
start (initialDelaySeconds, then every periodSeconds, each attempt an HTTP GET within timeoutSeconds, 200-399
a success; failureThreshold failures in a row: the kubelet would restart the container, a failure here); then
readiness and liveness on their own schedules while the smoke suite runs (readiness: successThreshold
successes in a row make the pod ready, failureThreshold failures unready; liveness: failureThreshold failures
in a row would restart it). The container is stopped and removed on every way out (the runtime's
ContainerServer).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_backend_gen.deploy.chart import split_documents, template_chart
from triton_backend_gen.deploy.values import DeployError, quantity
from triton_backend_gen.docker_engine import ROLE_SERVER, labels
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.container import STOP_TIMEOUT_S, ContainerServer
from triton_backend_gen.runtime.server import LOOPBACK, Ports, ServerOptions, free_port, port_is_free
from triton_backend_gen.signals import signals_deferred
from triton_backend_gen.smoke import SmokeResult

urllib_request = lazy_module("urllib.request")  # with http.client: 30 ms of every tbgen start

yaml = lazy_module("yaml")

docker_errors = lazy_module("docker.errors")
docker_types = lazy_module("docker.types")

LOG_NAME = "deploy-local.log"
RELEASE = "tbgen-local"
PORT_NAMES = ("http", "grpc", "metrics")
ADDRESS_FLAGS = ("--http-address", "--grpc-address", "--metrics-address")
# The kubelet's defaults for a probe's fields.
PROBE_DEFAULTS = {
    "initialDelaySeconds": 0,
    "periodSeconds": 10,
    "timeoutSeconds": 1,
    "successThreshold": 1,
    "failureThreshold": 3,
}
READY_WAIT_S = 120  # how long readiness may take after the startup probe passed


# --- the pod spec ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    kind: str  # startup, readiness or liveness
    path: str
    port: int
    initial_delay: int
    period: int
    timeout: int
    success: int
    failure: int

    def describe(self) -> str:
        return (
            f"GET {self.path} every {self.period} s (timeout {self.timeout} s, {self.failure} failures in a "
            f"row{'' if self.success == 1 else f', {self.success} successes'})"
        )


@dataclass(frozen=True)
class PodContainer:
    """The first container of a Deployment's pod template, as Docker can run it."""

    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]
    ports: dict[str, int]  # name -> containerPort
    shm_bytes: int | None  # the memory-backed emptyDir at /dev/shm
    tmpfs: tuple[str, ...]  # the other emptyDir mounts
    user: str | None  # uid[:gid]
    read_only: bool
    drop_all: bool
    no_new_privileges: bool
    memory_limit: int | None
    nano_cpus: int | None
    gpus: int
    probes: dict[str, Probe] = field(default_factory=dict)


def deployment_of(rendered: str) -> dict[str, Any]:
    """The one Deployment of rendered YAML."""
    deployments = [
        obj
        for _, body in split_documents(rendered)
        if isinstance(obj := yaml.safe_load(body), dict) and obj.get("kind") == "Deployment"
    ]
    if len(deployments) != 1:
        raise DeployError(
            f"The chart renders {len(deployments)} Deployments; `tbgen deploy local` runs one.",
            "Render it with `tbgen deploy helm`.",
        )
    return deployments[0]


def probe_of(kind: str, spec: dict[str, Any] | None, ports: dict[str, int]) -> Probe | None:
    if spec is None:
        return None
    get = spec.get("httpGet")
    if get is None:
        raise DeployError(
            f"The {kind} probe is not an httpGet probe; `tbgen deploy local` runs httpGet probes.",
            "Use the chart's probes (`tbgen deploy helm`).",
        )
    port = get.get("port")
    number = ports.get(port) if isinstance(port, str) and not port.isdigit() else int(port)
    if number is None:
        raise DeployError(
            f"The {kind} probe asks for port {port!r}, which the container does not name.",
            f"Its ports: {', '.join(ports)}.",
        )
    fields = {**PROBE_DEFAULTS, **spec}
    return Probe(
        kind,
        str(get.get("path", "/")),
        number,
        int(fields["initialDelaySeconds"]),
        int(fields["periodSeconds"]),
        int(fields["timeoutSeconds"]),
        int(fields["successThreshold"]),
        int(fields["failureThreshold"]),
    )


def pod_container(deployment: dict[str, Any]) -> PodContainer:
    """What Docker needs of the Deployment's first container (see the module)."""
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    ports = {
        p.get("name", str(p["containerPort"])): int(p["containerPort"]) for p in container.get("ports", [])
    }
    shm, tmpfs = _mounts(pod, container)
    security = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    limits = (container.get("resources") or {}).get("limits") or {}
    return PodContainer(
        image=container["image"],
        command=tuple(container.get("command", ())),
        args=tuple(container.get("args", ())),
        env=_literal_env(container),
        ports=ports,
        shm_bytes=shm,
        tmpfs=tuple(tmpfs),
        user=_user(security),
        read_only=bool(security.get("readOnlyRootFilesystem", False)),
        drop_all="ALL" in ((security.get("capabilities") or {}).get("drop") or ()),
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
        memory_limit=int(quantity(limits["memory"])) if "memory" in limits else None,
        nano_cpus=int(quantity(limits["cpu"]) * 1e9) if "cpu" in limits else None,
        gpus=int(limits.get("nvidia.com/gpu", 0)),
        probes=_probes(container, ports),
    )


def _mounts(pod: dict[str, Any], container: dict[str, Any]) -> tuple[int | None, list[str]]:
    """(the size of /dev/shm, the other mount paths) of the container's emptyDir volumes."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    shm, tmpfs = None, []
    for mount in container.get("volumeMounts", []):
        empty = volumes.get(mount["name"], {}).get("emptyDir")
        if empty is None:
            raise DeployError(
                f"The container mounts {mount['name']}, which is not an emptyDir volume.",
                "`tbgen deploy local` runs the chart's own volumes (emptyDir) only.",
            )
        if mount["mountPath"] == "/dev/shm":
            shm = int(quantity(empty.get("sizeLimit", "64Mi")))
        else:
            tmpfs.append(mount["mountPath"])
    return shm, tmpfs


def _literal_env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for item in container.get("env", []):
        if "value" not in item:
            raise DeployError(
                f"env {item['name']} takes its value from elsewhere (valueFrom).",
                "`tbgen deploy local` passes literal values only.",
            )
        env[item["name"]] = str(item["value"])
    return env


def _user(security: dict[str, Any]) -> str | None:
    """Docker's USER[:GROUP] of runAsUser and runAsGroup."""
    user, group = security.get("runAsUser"), security.get("runAsGroup")
    if user is None:
        return None
    return f"{user}:{group}" if group is not None else str(user)


def _probes(container: dict[str, Any], ports: dict[str, int]) -> dict[str, Probe]:
    keys = (("startup", "startupProbe"), ("readiness", "readinessProbe"), ("liveness", "livenessProbe"))
    return {
        kind: probe for kind, key in keys if (probe := probe_of(kind, container.get(key), ports)) is not None
    }


def docker_spec(pod: PodContainer, container_labels: dict[str, str], host: str = LOOPBACK) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` running ``pod`` with host networking on ``host``."""
    args = [*pod.args, *(f"{flag}={host}" for flag in ADDRESS_FLAGS)]
    spec: dict[str, Any] = {
        "image": pod.image,
        "command": args,
        "environment": dict(pod.env),
        "network_mode": "host",
        "read_only": pod.read_only,
        "tmpfs": {path: "" for path in pod.tmpfs},
        "labels": container_labels,
        "detach": True,
    }
    if pod.command:
        spec["entrypoint"] = list(pod.command)
    optional = {
        "shm_size": pod.shm_bytes,
        "user": pod.user,
        "mem_limit": pod.memory_limit,
        "nano_cpus": pod.nano_cpus,
        "cap_drop": ["ALL"] if pod.drop_all else None,
        "security_opt": ["no-new-privileges"] if pod.no_new_privileges else None,
        # the chart's nvidia.com/gpu limit: that many GPUs, as the device plugin would give the pod
        "device_requests": [docker_types.DeviceRequest(count=pod.gpus, capabilities=[["gpu"]])]
        if pod.gpus
        else None,
    }
    spec.update({key: value for key, value in optional.items() if value is not None})
    return spec


# --- the probes --------------------------------------------------------------------------------------------
def http_probe(host: str, probe: Probe) -> tuple[bool, str]:
    """One attempt of an httpGet probe: (success, what happened), as the kubelet judges it."""
    request = urllib_request.Request(
        f"http://{host}:{probe.port}{probe.path}", headers={"User-Agent": "kube-probe"}
    )
    opener = urllib_request.build_opener(urllib_request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=probe.timeout) as response:
            return 200 <= response.status < 400, f"HTTP {response.status}"
    except urllib.error.HTTPError as err:
        return 200 <= err.code < 400, f"HTTP {err.code}"
    except (OSError, urllib.error.URLError) as err:
        reason = getattr(err, "reason", err)
        return False, f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason


@dataclass
class ProbeRecord:
    probe: Probe
    attempts: int = 0
    failures: int = 0
    in_a_row: int = 0  # consecutive failures (or successes, for readiness, while not ready)
    successes_in_a_row: int = 0
    ready_at: float | None = None  # readiness: when successThreshold was reached; startup: when it succeeded
    unready: int = 0  # readiness: times it went unready after being ready
    tripped: bool = False  # startup/liveness: failureThreshold reached (the kubelet would restart)
    last: str = ""

    def observe(self, ok: bool, what: str, now: float) -> None:
        self.attempts += 1
        self.last = what
        if ok:
            self.in_a_row = 0
            self.successes_in_a_row += 1
            if self.ready_at is None and self.successes_in_a_row >= self.probe.success:
                self.ready_at = now
            return
        self.failures += 1
        self.in_a_row += 1
        self.successes_in_a_row = 0
        if self.in_a_row >= self.probe.failure:
            if self.probe.kind == "readiness":
                if self.ready_at is not None:
                    self.unready += 1
                    self.ready_at = None
            else:
                self.tripped = True


class ProbeMonitor:
    """The chart's probes against a started container, on the kubelet's schedule (see the module)."""

    def __init__(
        self,
        probes: dict[str, Probe],
        alive: Callable[[], bool],
        *,
        host: str = LOOPBACK,
        attempt: Callable[[str, Probe], tuple[bool, str]] = http_probe,
    ) -> None:
        self.records = {kind: ProbeRecord(probe) for kind, probe in probes.items()}
        self.alive, self.host, self.attempt = alive, host, attempt
        self.started_at = time.monotonic()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def _try(self, kind: str) -> None:
        record = self.records[kind]
        ok, what = self.attempt(self.host, record.probe)
        record.observe(ok, what, time.monotonic())

    @property
    def ever_ready(self) -> bool:
        """Whether the readiness probe has passed at least once (it may have gone unready since)."""
        record = self.records.get("readiness")
        return record is not None and (record.ready_at is not None or record.unready > 0)

    def wait_started(self) -> float:
        """Run the startup probe until it passes (seconds from the container's start); DeployError when it
        trips or the container exits."""
        record = self.records.get("startup")
        if record is None:
            return 0.0
        probe = record.probe
        due = self.started_at + probe.initial_delay
        while True:
            self._sleep_until(due)
            if not self.alive():
                raise DeployError("The container exited before its startup probe passed.", "")
            self._try("startup")
            if record.ready_at is not None:
                return record.ready_at - self.started_at
            if record.tripped:
                raise DeployError(
                    f"The startup probe failed {_times(record.in_a_row)} in a row ({probe.describe()}; last: "
                    f"{record.last}): the kubelet would restart the container.",
                    f"The chart allows {probe.failure * probe.period} s for the models to load; measure "
                    "the load time with `tbgen test` and render the chart again, or raise "
                    "probes.startup.failureThreshold.",
                )
            due += probe.period

    def run_in_background(self) -> None:
        """Readiness and liveness on their own schedules, until :meth:`halt`."""
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        now = time.monotonic()
        due = {
            kind: max(now, self.started_at + r.probe.initial_delay)
            for kind, r in self.records.items()
            if kind != "startup"
        }
        while due and not self._halt.is_set():
            kind = min(due, key=due.get)
            if self._halt.wait(max(0.0, due[kind] - time.monotonic())):
                return
            self._try(kind)
            due[kind] += self.records[kind].probe.period

    def wait_ready(self, timeout: float = READY_WAIT_S) -> float:
        """Until readiness makes the pod ready (seconds from the container's start); DeployError when liveness
        trips, the container exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        readiness, liveness = self.records.get("readiness"), self.records.get("liveness")
        while readiness is not None and readiness.ready_at is None:
            if liveness is not None and liveness.tripped:
                raise DeployError(
                    f"The liveness probe failed {_times(liveness.in_a_row)} in a row before the pod was "
                    f"ready (last: {liveness.last}): the kubelet would restart the container.",
                    "",
                )
            if not self.alive():
                raise DeployError("The container exited before its readiness probe passed.", "")
            if time.monotonic() > deadline:
                raise DeployError(
                    f"The readiness probe did not pass within {timeout:g} s after the startup probe "
                    f"(last: {readiness.last}).",
                    "",
                )
            time.sleep(0.1)
        return (readiness.ready_at if readiness is not None else time.monotonic()) - self.started_at

    def halt(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def results(self) -> list[SmokeResult]:
        """One result per probe: startup passed in time, readiness became and stayed ready, liveness never
        tripped."""
        found = []
        for kind, record in self.records.items():
            probe = record.probe
            counts = (
                f"{record.attempts} probe{'s' if record.attempts != 1 else ''}, {record.failures} failed; "
                f"{probe.describe()}"
            )
            if kind == "startup":
                passed = record.ready_at is not None
                detail = (
                    f"passed {record.ready_at - self.started_at:.1f} s after the start (allowed: "
                    f"{probe.failure * probe.period} s); {counts}"
                    if passed
                    else f"never passed; {counts}"
                )
            elif kind == "readiness":
                passed = self.ever_ready and not record.unready
                detail = (
                    f"went unready {record.unready} time(s); "
                    if record.unready
                    else "ready throughout the tests; "
                    if passed
                    else "never ready; "
                ) + counts
            else:
                passed = not record.tripped
                detail = ("tripped: the kubelet would have restarted it; " if record.tripped else "") + counts
            found.append(SmokeResult(f"{kind} probe", "http", passed, detail, 0.0))
        return found

    def _sleep_until(self, due: float) -> None:
        time.sleep(max(0.0, due - time.monotonic()))


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


# --- the container ------------------------------------------------------------------------------------------
class PodServer(ContainerServer):
    """The chart's pod spec in a container: the runtime's launcher interface, started when its probes say
    so."""

    def __init__(self, pod: PodContainer, project: Project, log_file: Path) -> None:
        super().__init__(
            pod.image,
            ServerOptions(model_repository=project.model_repository, log_file=log_file),
            [],
            project.root,
            gpu=pod.gpus > 0,
        )
        self.pod = pod
        self.ports = Ports(**{name: pod.ports[name] for name in PORT_NAMES})
        self.monitor: ProbeMonitor | None = None
        self.memory_used: int | None = None  # bytes, read before the container stops
        self.started_after: float | None = None  # seconds until ready

    def describe(self) -> str:
        return f"the chart's pod spec in a container of {self.image}"

    def start(self) -> None:
        try:
            super().start()
        except docker_errors.APIError as err:  # the container is gone (start() removed it)
            raise self._explained(
                f"Docker refused the pod's container: {err.explanation or err}",
                "Its settings come from the chart's Deployment.",
            ) from err
        except DeployError as err:  # a probe failed
            raise self._explained(err.message, err.hint) from err

    def _explained(self, message: str, hint: str) -> DeployError:
        """``message`` with ``hint``, the log lines that explain it and where the whole log is."""
        return DeployError(
            message, "\n".join([hint, *self.relevant_log_lines(), f"Full log: {self.log_file}"]).strip()
        )

    def _container_spec(self) -> dict[str, Any]:
        return docker_spec(self.pod, labels(ROLE_SERVER, self.labelled))

    def _wait_started(self) -> None:
        self.monitor = ProbeMonitor(self.pod.probes, alive=lambda: self._exit_status() is None)
        self.monitor.wait_started()
        self.monitor.run_in_background()
        self.started_after = self.monitor.wait_ready()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        with signals_deferred():
            if self.monitor is not None:
                self.monitor.halt()
            if self._container is not None and self._returncode is None and self.memory_used is None:
                self.memory_used = _memory_used(self._container)
        return super().stop(timeout)

    def probe_results(self) -> list[SmokeResult]:
        return self.monitor.results() if self.monitor is not None else []


def _memory_used(container: Any) -> int | None:
    try:
        stats = container.stats(stream=False)
        return int(stats["memory_stats"]["usage"])
    except Exception:  # noqa: BLE001 - a reading only; the container may be gone
        return None


# --- the pod here -------------------------------------------------------------------------------------------
def pod_for_local(chart: Path) -> tuple[PodContainer, list[str]]:
    """The pod of the chart's rendered Deployment (a chart: helm template; manifests: the files), with free
    ports on 127.0.0.1 when the chart's are taken (a chart only), and notes saying what changed."""
    if not (chart / "Chart.yaml").is_file():
        pod = pod_container(
            deployment_of("\n---\n".join(path.read_text() for path in sorted(chart.glob("*.yaml"))))
        )
        busy = [f"{name} {port}" for name, port in pod.ports.items() if not port_is_free(LOOPBACK, port)]
        if busy:
            raise DeployError(
                f"Ports of the manifests are taken on {LOOPBACK}: {', '.join(busy)}.",
                "Free them, or run the chart (`tbgen deploy helm`), whose ports tbgen can move.",
            )
        return pod, []
    pod = pod_container(deployment_of(template_chart(chart, release=RELEASE)))
    if all(port_is_free(LOOPBACK, pod.ports[name]) for name in PORT_NAMES if name in pod.ports):
        return pod, []
    chosen: dict[str, int] = {}
    for name in PORT_NAMES:
        while (port := free_port()) in chosen.values():
            pass
        chosen[name] = port
    rendered = template_chart(chart, release=RELEASE, settings=[f"ports.{k}={v}" for k, v in chosen.items()])
    return pod_container(deployment_of(rendered)), [
        f"the chart's ports are taken on {LOOPBACK}: ran with ports.http={chosen['http']}, "
        f"ports.grpc={chosen['grpc']}, ports.metrics={chosen['metrics']}"
    ]


def fit_to_engine(pod: PodContainer, cpus: int) -> tuple[PodContainer, list[str]]:
    """``pod`` with its CPU limit cut to the engine's ``cpus`` (Docker refuses more; a node may have them),
    and a note when it was."""
    if pod.nano_cpus is None or not cpus or pod.nano_cpus <= cpus * 10**9:
        return pod, []
    return dataclasses.replace(pod, nano_cpus=cpus * 10**9), [
        f"the CPU limit ({pod.nano_cpus / 1e9:g}) is above this engine's {cpus} CPUs: ran with {cpus}"
    ]


def check_gpus(pod: PodContainer, engine: dict[str, Any]) -> None:
    """DeployError when ``pod`` asks for GPUs and the engine (its ``docker info``) has no NVIDIA runtime."""
    if not pod.gpus:
        return
    runtimes = engine.get("Runtimes") or {}
    if "nvidia" not in runtimes:
        raise DeployError(
            f"The chart asks each pod for {pod.gpus} nvidia.com/gpu (a model has KIND_GPU instances), and "
            "this Docker engine has no NVIDIA runtime.",
            "Run `tbgen deploy local` where the NVIDIA Container Toolkit is installed; `tbgen deploy "
            "check` validates the chart without one.",
        )
