"""Triton in a container, through the docker SDK: `tbgen build/test/serve --docker`.

The image is the release's NGC image (``nvcr.io/nvidia/tritonserver:<YY.MM>-py3``) unless ``--image`` names
another one with the same layout (``/opt/tritonserver``). The specs (``server_spec``, ``build_spec``) only
decide and are unit-tested; ``ContainerServer`` and ``build_in_container`` start and stop containers.

Every container tbgen starts:

- carries the labels ``tbgen=1``, ``tbgen.role`` (build or server), ``tbgen.project`` and ``tbgen.owner``
  (``<host>:<pid>`` of the tbgen that started it): `tbgen doctor` lists and `tbgen clean --containers`
  removes leftovers, and a new run removes those whose tbgen on this host is gone;
- runs as the invoking user's uid:gid with HOME=/tmp, so nothing it writes on the host belongs to root;
- streams its log to ``<project>/build/tbgen/`` and is stopped and removed on success, failure and Ctrl-C
  (removed only after its log was read: ``remove=True`` would lose a failed container's log);
- uses host networking: servers bind 127.0.0.1 on ports checked free, and readiness is this container's own
  server answering with its unique ``--id`` (not just any server on the port).
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_backend_gen import versions
from triton_backend_gen.errors import BuildError, ServerError, UsageError
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.backend_dir import BackendLayout, project_backend_dir
from triton_backend_gen.runtime.server import ServerOptions, TritonServer, _signals_deferred

NGC_IMAGE = "nvcr.io/nvidia/tritonserver:{container}-py3"
LABEL = "tbgen"
ROLE_LABEL = "tbgen.role"
PROJECT_LABEL = "tbgen.project"
OWNER_LABEL = "tbgen.owner"
ROLE_BUILD, ROLE_SERVER = "build", "server"
IMAGE_ROOT = Path("/opt/tritonserver")
IMAGE_BACKENDS = IMAGE_ROOT / "backends"
MODELS = Path("/models")
CONTAINER_HOME = "/tmp"
# The python backend keeps each model's tensors in /dev/shm; Docker's default 64 MB fails larger models.
SHM_SIZE = "1g"
STOP_TIMEOUT_S = 15
# A client connection left open makes tritonserver wait for it on shutdown (30 s by default).
EXIT_TIMEOUT_S = 5


def default_image(release: str) -> str:
    """The NGC tritonserver image of ``release`` ("24.10", "r24.10" or "2.51.0")."""
    return NGC_IMAGE.format(container=versions.resolve(release).container)


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def labels(role: str, project_path: Path) -> dict[str, str]:
    return {LABEL: "1", ROLE_LABEL: role, PROJECT_LABEL: str(project_path), OWNER_LABEL: owner()}


def invoking_user() -> str:
    return f"{os.getuid()}:{os.getgid()}"


# --- the engine ----------------------------------------------------------------------------------------------
def connect() -> Any:
    """A docker client whose engine answered; ServerError naming the fix when it cannot be reached."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as err:  # pragma: no cover - docker is a dependency of tbgen
        raise ServerError("The docker Python package is missing.", "pip install docker") from err
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as err:
        text = str(err)
        if "Permission denied" in text or "PermissionError" in text:
            raise ServerError(
                f"Permission denied on the Docker socket ({os.environ.get('DOCKER_HOST', '/var/run/docker.sock')}).",
                "Add yourself to the docker group (sudo usermod -aG docker $USER, then log in again), "
                "or run tbgen as a user that may use Docker.",
            ) from err
        raise ServerError(
            f"The Docker engine is not reachable: {text.splitlines()[0] if text else err!r}",
            "Start it (sudo systemctl start docker, or run dockerd), or point DOCKER_HOST at a running engine.",
        ) from err
    return client


def ensure_image(client: Any, image: str) -> None:
    """ServerError with the exact pull command when ``image`` is not on the engine (tbgen never pulls)."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound as err:
        raise ServerError(f"The image {image} is not on this Docker engine.",
                          f"Pull it: docker pull {image}   (or pass --image NAME for another image)") from err


def gpu_requests(client: Any, gpu: bool) -> list[Any]:
    """The device request for all GPUs, or [] without ``gpu``; UsageError when the engine has no NVIDIA runtime."""
    if not gpu:
        return []
    from docker.types import DeviceRequest

    runtimes = client.info().get("Runtimes") or {}
    if "nvidia" not in runtimes:
        raise UsageError(
            f"--gpu needs the NVIDIA container runtime, and this Docker engine has none (it has: "
            f"{', '.join(sorted(runtimes)) or 'none'}).",
            "Install the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker, then restart "
            "Docker), or run without --gpu (KIND_CPU instances).",
        )
    return [DeviceRequest(count=-1, capabilities=[["gpu"]])]


def tbgen_containers(client: Any) -> list[Any]:
    """Every container with tbgen's label, running or not."""
    return client.containers.list(all=True, filters={"label": LABEL})


def remove_containers(containers: Iterable[Any]) -> list[str]:
    """Stop and remove ``containers``; their names."""
    from docker.errors import NotFound

    removed = []
    for container in containers:
        try:
            container.remove(force=True)
            removed.append(container.name)
        except NotFound:
            pass
    return removed


def orphans(containers: Iterable[Any], host: str | None = None) -> list[Any]:
    """The containers started by a tbgen on this host whose process is gone."""
    host = host or socket.gethostname()
    found = []
    for container in containers:
        name, _, pid = container.labels.get(OWNER_LABEL, "").rpartition(":")
        if name == host and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            found.append(container)
    return found


# --- specs (pure) --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mount:
    source: Path
    target: Path
    read_only: bool = True

    def volume(self) -> tuple[str, dict[str, str]]:
        return str(self.source), {"bind": str(self.target), "mode": "ro" if self.read_only else "rw"}


def server_mounts(model_repository: Path, project: Project | None) -> list[Mount]:
    """The model repository at /models and the project's own backend under /opt/tritonserver/backends."""
    mounts = [Mount(model_repository.resolve(), MODELS)]
    own = project_backend_dir(project) if project is not None else None
    if own is not None:
        mounts.append(Mount(own.resolve(), IMAGE_BACKENDS / project.backend))
    return mounts


def server_command(server_id: str, host: str, http: int, grpc: int, metrics: int, *, verbose: bool = False,
                   extra_args: Iterable[str] = ()) -> list[str]:
    """tritonserver's command line inside the container (the image's layout)."""
    command = [
        "tritonserver", f"--id={server_id}", f"--model-repository={MODELS}", f"--backend-directory={IMAGE_BACKENDS}",
        f"--http-address={host}", f"--http-port={http}", f"--grpc-address={host}", f"--grpc-port={grpc}",
        f"--metrics-address={host}", f"--metrics-port={metrics}", "--exit-on-error=false",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
    ]
    if verbose:
        command.append("--log-verbose=1")
    return command + list(extra_args)


def server_spec(image: str, command: list[str], mounts: list[Mount], project_path: Path, *,
                device_requests: list[Any] = (), user: str | None = None) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a server container."""
    return {
        "image": image,
        "command": command,
        "volumes": dict(mount.volume() for mount in mounts),
        "network_mode": "host",
        "shm_size": SHM_SIZE,
        "user": user or invoking_user(),
        "environment": {"HOME": CONTAINER_HOME},
        "labels": labels(ROLE_SERVER, project_path),
        "device_requests": list(device_requests),
        "detach": True,
    }


def build_script(project: Project, build_dir: Path, install_dir: Path, *, sources: Path | None, gpu: bool,
                 build_type: str, jobs: int | None, cuda_architectures: str | None = None) -> str:
    """The shell script a build container runs: configure, build and install with the image's own tools
    (Ninja when the image has it, the image's googletest when the cache holds none)."""
    from triton_backend_gen.toolchain.cmake import configure_command

    defines = {}
    if gpu:
        defines["CMAKE_CUDA_COMPILER"] = "/usr/local/cuda/bin/nvcc"
        if cuda_architectures:
            defines["CMAKE_CUDA_ARCHITECTURES"] = cuda_architectures
    configure = configure_command(project.root, build_dir, triton_sources=sources, gpu=gpu, build_type=build_type,
                                  install_prefix=install_dir, extra_defines=defines, host_tools=False)
    parallel = str(jobs) if jobs else '"$(nproc)"'
    return "\n".join([
        "set -ex",  # each command is echoed into the log
        "command -v ninja >/dev/null 2>&1 && export CMAKE_GENERATOR=Ninja",
        'gtest=""',
        "[ -f /usr/src/googletest/CMakeLists.txt ] && gtest=-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest",
        f"{shlex.join(configure)} $gtest",
        f"cmake --build {shlex.quote(str(build_dir))} --parallel {parallel}",
        f"cmake --install {shlex.quote(str(build_dir))} --prefix {shlex.quote(str(install_dir))}",
    ])


def build_spec(image: str, script: str, project: Project, *, sources: Path | None,
               user: str | None = None) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for a build container: the project mounted read-write
    at its own path (so paths in errors are the host's), the source cache read-only at its own path."""
    mounts = [Mount(project.root, project.root, read_only=False)]
    if sources is not None:
        mounts.append(Mount(sources.resolve(), sources.resolve()))
    return {
        "image": image,
        "command": ["sh", "-c", script],
        "volumes": dict(mount.volume() for mount in mounts),
        "working_dir": str(project.root),
        "network_mode": "host",
        "user": user or invoking_user(),
        "environment": {"HOME": CONTAINER_HOME},
        "labels": labels(ROLE_BUILD, project.root),
        "detach": True,
    }


def image_slug(image: str) -> str:
    """A directory name for ``image`` (each image gets its own CMake build tree)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", image).strip("_")


# --- running ---------------------------------------------------------------------------------------------------
class _LogPump:
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


def run_container(client: Any, spec: dict[str, Any], log_file: Path,
                  on_line: Callable[[str], None] | None = None) -> int:
    """Run a container to its end with its output in ``log_file``; its exit status. The container is removed
    afterwards, also on error and Ctrl-C."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    container = client.containers.create(**spec)
    try:
        with log_file.open("wb") as log:
            container.start()
            pump = _LogPump(container, log, on_line)
            status = container.wait()["StatusCode"]
            pump.join()
        return status
    finally:
        with _signals_deferred():
            remove_containers([container])


def build_in_container(project: Project, image: str, *, gpu: bool, build_type: str, jobs: int | None,
                       progress: Callable[[int, int, str], None] | None = None):
    """``tbgen build --docker`` for a C++ project: CMake runs in ``image`` (offline when the source cache holds
    the release) into <project>/build/docker/<image>, installing into <project>/build/install."""
    from triton_backend_gen.toolchain.cmake import LOG_NAME, CMakeRun, first_error_line, progress_of
    from triton_backend_gen.toolchain.sources import cached_sources

    release = versions.resolve(project.triton_version)
    sources = cached_sources(release.branch)
    build_dir = project.root / "build" / "docker" / image_slug(image)
    install_dir = project.root / "build" / "install"
    for directory in (build_dir, install_dir):
        directory.mkdir(parents=True, exist_ok=True)  # made here, so owned by the user
    archs = ";".join(release.cuda_architectures) if gpu else None
    script = build_script(project, build_dir, install_dir, sources=sources, gpu=gpu, build_type=build_type,
                          jobs=jobs, cuda_architectures=archs)
    client = connect()
    ensure_image(client, image)
    remove_containers(orphans(tbgen_containers(client)))
    stepped = False

    def on_line(line: str) -> None:
        nonlocal stepped
        step = progress_of(line)
        if step is not None:
            stepped = True
            if progress is not None:
                progress(step[0], step[1], line)

    log_file = build_dir / LOG_NAME
    status = run_container(client, build_spec(image, script, project, sources=sources), log_file, on_line)
    if status != 0:
        error = first_error_line(log_file.read_text(errors="replace")) or f"exit status {status}"
        raise BuildError(f"The build in {image} failed: {error}\nFull log: {log_file}",
                         "Fix the first error above; the log has the complete compiler and CMake output.")
    return CMakeRun(install_dir=install_dir, log_file=log_file, configured=True, work_done=stepped)


class ContainerServer(TritonServer):
    """tritonserver in a container; the same interface as a local TritonServer (context manager, URLs,
    model states, log lines)."""

    def __init__(self, image: str, options: ServerOptions, project: Project | None, *, gpu: bool = False,
                 mount: bool = True) -> None:
        """``mount=False`` serves what the image holds (a `tbgen package` image) instead of the project."""
        layout = BackendLayout(backend_dir=IMAGE_BACKENDS, library_path=(), path_prefix=())
        super().__init__(None, layout, options)  # type: ignore[arg-type] - no local install
        self.image = image
        self.project = project
        self.gpu = gpu
        self.mount = mount
        self._client: Any = None
        self._container: Any = None
        self._pump: _LogPump | None = None

    def __enter__(self) -> ContainerServer:
        if self._container is None:
            self.start()
        return self

    def describe(self) -> str:
        return f"tritonserver in a container of {self.image}"

    def start(self) -> None:
        if self._container is not None:
            raise ServerError("This server was already started; create a new one to start another.")
        self._client = connect()
        ensure_image(self._client, self.image)
        requests = gpu_requests(self._client, self.gpu)
        remove_containers(orphans(tbgen_containers(self._client)))
        self.ports = self._choose_ports()
        o = self.options
        command = server_command(self.server_id, o.host, self.ports.http, self.ports.grpc, self.ports.metrics,
                                 verbose=o.verbose, extra_args=o.extra_args)
        where = self.project.root if self.project is not None else o.model_repository
        mounts = server_mounts(o.model_repository, self.project) if self.mount else []
        spec = server_spec(self.image, command, mounts, where, device_requests=requests)
        log_file = Path(o.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_file.open("wb")
        self._log.write(f"$ docker run {self.image} {shlex.join(command)}\n".encode())
        self._log.flush()
        try:
            self._container = self._client.containers.create(**spec)
            self._container.start()
            self._pump = _LogPump(self._container, self._log)
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        with self._lock, _signals_deferred():
            if self._container is None:
                self._close_log()
                return 0
            if self._returncode is None:
                try:
                    self._container.stop(timeout=int(timeout))
                    self._returncode = self._container.wait(timeout=timeout + 30)["StatusCode"]
                except Exception:  # noqa: BLE001 - gone already, or a wait that timed out: removed below
                    self._returncode = -1
                if self._pump is not None:
                    self._pump.join()
                remove_containers([self._container])
                self._close_log()
            return self._returncode

    @property
    def pid(self) -> int | None:
        """The server's pid on this host (the container's first process), for memory readings."""
        if self._container is None:
            return None
        try:
            self._container.reload()
        except Exception:  # noqa: BLE001
            return None
        return self._container.attrs.get("State", {}).get("Pid") or None

    @property
    def running(self) -> bool:
        return self._exit_status() is None and self._container is not None

    def _exit_status(self) -> int | None:
        from docker.errors import NotFound

        if self._container is None:
            return None
        try:
            self._container.reload()
        except NotFound:
            return -1
        state = self._container.attrs.get("State", {})
        return None if state.get("Running") or state.get("Status") == "created" else int(state.get("ExitCode", -1))

