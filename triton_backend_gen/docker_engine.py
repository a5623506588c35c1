"""The Docker engine, through the docker SDK: images, containers, mounts, labels, uid mapping.

What both sides above it share: `toolchain` builds in containers, `runtime` serves in them. Nothing here
knows about builds or servers. Every container tbgen starts:

- carries the labels ``tbgen=1``, ``tbgen.role`` (build, server, or check: ldd in an image), ``tbgen.project``
  and ``tbgen.owner`` (``<host>:<pid>:<start>`` of the tbgen that started it, the start time telling a reused
  pid apart):
  `tbgen doctor` lists and `tbgen clean --containers` removes leftovers, and a new run removes those whose
  tbgen on this host is gone;
- runs as the invoking user's uid:gid with HOME=/tmp, so nothing it writes on the host belongs to root;
- is removed only after its log was read (``remove=True`` would lose a failed container's log).

tbgen never pulls: a missing image is an error that prints the ``docker pull`` command.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_backend_gen import versions
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.signals import signals_deferred

docker = lazy_module("docker")
docker_errors = lazy_module("docker.errors")
docker_types = lazy_module("docker.types")

NGC_IMAGE = "nvcr.io/nvidia/tritonserver:{container}-py3"
LABEL = "tbgen"
ROLE_LABEL = "tbgen.role"
PROJECT_LABEL = "tbgen.project"
OWNER_LABEL = "tbgen.owner"
ROLE_BUILD, ROLE_SERVER, ROLE_CHECK = "build", "server", "check"
CONTAINER_HOME = "/tmp"


def default_image(release: versions.Release) -> str:
    """The NGC tritonserver image of ``release``."""
    return NGC_IMAGE.format(container=release.container)


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (/proc), or None when it does not run."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; field 22 is the start time.
    return stat.rpartition(")")[2].split()[19]


def owner() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start(pid)}"


def labels(role: str, project_path: Path) -> dict[str, str]:
    return {LABEL: "1", ROLE_LABEL: role, PROJECT_LABEL: str(project_path), OWNER_LABEL: owner()}


def invoking_user() -> str:
    return f"{os.getuid()}:{os.getgid()}"


# --- the engine ---------------------------------------------------------------------------------------------
def connect() -> Any:
    """A docker client whose engine answered; ServerError naming the fix when it cannot be reached."""
    try:
        client = docker.from_env()
        client.ping()
    except docker_errors.DockerException as err:
        text = str(err)
        if "Permission denied" in text or "PermissionError" in text:
            raise ServerError(
                "Permission denied on the Docker socket "
                f"({os.environ.get('DOCKER_HOST', '/var/run/docker.sock')}).",
                "Add yourself to the docker group (sudo usermod -aG docker $USER, then log in again), "
                "or run tbgen as a user that may use Docker.",
            ) from err
        raise ServerError(
            f"The Docker engine is not reachable: {text.splitlines()[0] if text else err!r}",
            "Start it (sudo systemctl start docker, or run dockerd), or point DOCKER_HOST at a running "
            "engine.",
        ) from err
    return client


def ensure_image(client: Any, image: str) -> None:
    """ServerError with the exact pull command when ``image`` is not on the engine (tbgen never pulls)."""
    try:
        client.images.get(image)
    except docker_errors.ImageNotFound as err:
        raise ServerError(
            f"The image {image} is not on this Docker engine.",
            f"Pull it: docker pull {image}   (or pass --image NAME for another image)",
        ) from err


def gpu_requests(client: Any, gpu: bool) -> list[Any]:
    """The device request for all GPUs, or [] without ``gpu``; UsageError when the engine has no NVIDIA
    runtime."""
    if not gpu:
        return []
    runtimes = client.info().get("Runtimes") or {}
    if "nvidia" not in runtimes:
        raise UsageError(
            f"--gpu needs the NVIDIA container runtime, and this Docker engine has none (it has: "
            f"{', '.join(sorted(runtimes)) or 'none'}).",
            "Install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker, then "
            "restart Docker), or run without --gpu (KIND_CPU instances).",
        )
    return [docker_types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


def tbgen_containers(client: Any) -> list[Any]:
    """Every container with tbgen's label, running or not."""
    return client.containers.list(all=True, filters={"label": LABEL})


def remove_containers(containers: Iterable[Any]) -> list[str]:
    """Stop and remove ``containers``; their names. A container another client is removing already (the
    engine answers 409, "removal ... is already in progress") is waited for until it is gone."""
    removed = []
    for container in containers:
        try:
            container.remove(force=True)
            removed.append(container.name)
        except docker_errors.NotFound:
            pass
        except docker_errors.APIError as err:
            if err.status_code != 409 or "already in progress" not in str(err):
                raise
            if _gone_within(container):
                removed.append(container.name)
    return removed


def _gone_within(container: Any, timeout_s: float = 60) -> bool:
    """Whether ``container`` is gone from the engine within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            container.reload()
        except docker_errors.NotFound:
            return True
        time.sleep(0.2)
    return False


def orphans(containers: Iterable[Any], host: str | None = None) -> list[Any]:
    """The containers started by a tbgen on this host whose process is gone (a process that now holds its pid
    started at another time)."""
    host = host or socket.gethostname()
    found = []
    for container in containers:
        name, pid, *start = container.labels.get(OWNER_LABEL, "").split(":")
        if name != host or not pid.isdigit():
            continue
        running = process_start(int(pid))
        if running is None or (start and start[0] != running):
            found.append(container)
    return found


# --- specs and runs ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mount:
    source: Path
    target: Path
    read_only: bool = True

    def volume(self) -> tuple[str, dict[str, str]]:
        return str(self.source), {"bind": str(self.target), "mode": "ro" if self.read_only else "rw"}


def script_spec(
    image: str,
    script: str,
    mounts: Iterable[Mount],
    role: str,
    labelled: Path,
    *,
    working_dir: Path | None = None,
    environment: dict[str, str] | None = None,
    user: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a container that runs ``script`` with sh: host
    networking, the invoking user (or ``user``) with HOME=/tmp and ``environment``, labels naming ``role`` and
    ``labelled`` (the project)."""
    spec: dict[str, Any] = {
        "image": image,
        "command": ["sh", "-c", script],
        "volumes": dict(mount.volume() for mount in mounts),
        "network_mode": "host",
        "user": user or invoking_user(),
        "environment": {"HOME": CONTAINER_HOME, **(environment or {})},
        "labels": labels(role, labelled),
        "detach": True,
    }
    if working_dir is not None:
        spec["working_dir"] = str(working_dir)
    return spec


class LogPump:
    """Copies a container's output into a file (and to ``on_line``, line by line) until the container ends."""

    def __init__(self, container: Any, log: Any, on_line: Callable[[str], None] | None = None) -> None:
        self._container, self._log, self._on_line = container, log, on_line
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pending = b""
        try:
            for chunk in self._container.logs(stream=True, follow=True):
                self._log.write(chunk)
                self._log.flush()
                if self._on_line is not None:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        self._on_line(line.decode(errors="replace"))
        except Exception:  # noqa: BLE001 - the container went away; its log ends here
            pass

    def join(self, timeout: float = 10) -> None:
        self._thread.join(timeout)


def run_container(
    client: Any, spec: dict[str, Any], log_file: Path, on_line: Callable[[str], None] | None = None
) -> int:
    """Run a container to its end with its output in ``log_file``; its exit status. The container is removed
    afterwards, also on error and Ctrl-C."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    container = client.containers.create(**spec)
    try:
        with log_file.open("wb") as log:
            container.start()
            pump = LogPump(container, log, on_line)
            status = container.wait()["StatusCode"]
            pump.join()
        return status
    finally:
        with signals_deferred():
            remove_containers([container])
