"""tritonserver in a container of a tritonserver image (the container launcher of
``runtime.server.TritonServer``).

The image is the release's NGC image (``nvcr.io/nvidia/tritonserver:<YY.MM>-py3``) unless ``--image`` names
another one with the same layout (``/opt/tritonserver``). ``server_spec`` and ``server_command`` only decide
and are unit-tested; ``ContainerServer`` starts and stops the container (the engine's labels, uid mapping and
log pump). Host networking: the server binds 127.0.0.1 on ports checked free, and readiness is this
container's own server answering with its unique ``--id``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from triton_backend_gen.docker_engine import (
    CONTAINER_HOME,
    ROLE_SERVER,
    LogPump,
    Mount,
    connect,
    ensure_image,
    gpu_requests,
    invoking_user,
    labels,
    orphans,
    remove_containers,
    tbgen_containers,
)
from triton_backend_gen.errors import ServerError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.runtime.server import ServerOptions, TritonServer
from triton_backend_gen.signals import signals_deferred

docker_errors = lazy_module("docker.errors")

IMAGE_ROOT = Path("/opt/tritonserver")
IMAGE_BACKENDS = IMAGE_ROOT / "backends"
MODELS = Path("/models")
# The python backend keeps each model's tensors in /dev/shm; Docker's default 64 MB fails larger models.
SHM_SIZE = "1g"
STOP_TIMEOUT_S = 15
# A client connection left open makes tritonserver wait for it on shutdown (30 s by default).
EXIT_TIMEOUT_S = 5


def server_mounts(model_repository: Path, backend: tuple[str, Path] | None) -> list[Mount]:
    """The model repository at /models and the project's own backend (name, directory) under
    /opt/tritonserver/backends."""
    mounts = [Mount(model_repository.resolve(), MODELS)]
    if backend is not None:
        name, directory = backend
        mounts.append(Mount(directory.resolve(), IMAGE_BACKENDS / name))
    return mounts


def server_command(
    server_id: str,
    host: str,
    http: int,
    grpc: int,
    metrics: int,
    *,
    verbose: bool = False,
    extra_args: Iterable[str] = (),
) -> list[str]:
    """tritonserver's command line inside the container (the image's layout)."""
    command = [
        "tritonserver",
        f"--id={server_id}",
        f"--model-repository={MODELS}",
        f"--backend-directory={IMAGE_BACKENDS}",
        f"--http-address={host}",
        f"--http-port={http}",
        f"--grpc-address={host}",
        f"--grpc-port={grpc}",
        f"--metrics-address={host}",
        f"--metrics-port={metrics}",
        "--exit-on-error=false",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
    ]
    if verbose:
        command.append("--log-verbose=1")
    return command + list(extra_args)


def server_spec(
    image: str,
    command: list[str],
    mounts: list[Mount],
    project_path: Path,
    *,
    device_requests: list[Any] = (),
    user: str | None = None,
) -> dict[str, Any]:
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


class ContainerServer(TritonServer):
    """tritonserver in a container; the same interface as a local TritonServer (context manager, URLs,
    model states, log lines). A launcher of another container overrides ``_container_spec`` (what to create)
    and ``_wait_started`` (when it serves); starting, logging and removing stay here."""

    in_container = True

    def __init__(
        self, image: str, options: ServerOptions, mounts: list[Mount], labelled: Path, *, gpu: bool = False
    ) -> None:
        """``mounts``: what the container sees (none for an image made by `tbgen package`, which serves what
        it holds); ``labelled``: the project (or model repository) its labels name."""
        super().__init__(options)
        self.image = image
        self.mounts = mounts
        self.labelled = labelled
        self.gpu = gpu
        self._client: Any = None
        self._container: Any = None
        self._pump: LogPump | None = None

    @property
    def started(self) -> bool:
        return self._container is not None

    def describe(self) -> str:
        return f"tritonserver in a container of {self.image}"

    def start(self) -> None:
        if self._container is not None:
            raise ServerError("This server was already started; create a new one to start another.")
        self._client = connect()
        remove_containers(orphans(tbgen_containers(self._client)))
        spec = self._container_spec()
        log_file = Path(self.options.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_file.open("wb")
        entry = shlex.join([*spec.get("entrypoint", ()), *spec["command"]])
        self._log.write(f"$ docker run {self.image} {entry}\n".encode())
        self._log.flush()
        try:
            self._container = self._client.containers.create(**spec)
            self._container.start()
            self._pump = LogPump(self._container, self._log)
            self._wait_started()
        except BaseException:
            self.stop()
            raise

    def _container_spec(self) -> dict[str, Any]:
        """Keyword arguments of ``client.containers.create`` (``self._client`` is connected); here the
        server's container (the image checked, GPUs requested, free ports chosen)."""
        ensure_image(self._client, self.image)
        requests = gpu_requests(self._client, self.gpu)
        self.ports = self._choose_ports()
        o = self.options
        command = server_command(
            self.server_id,
            o.host,
            self.ports.http,
            self.ports.grpc,
            self.ports.metrics,
            verbose=o.verbose,
            extra_args=o.extra_args,
        )
        return server_spec(self.image, command, self.mounts, self.labelled, device_requests=requests)

    def _wait_started(self) -> None:
        """Wait until the started container serves (raise when it does not; start() then stops it)."""
        self._wait_until_ready()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        with self._lock, signals_deferred():
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

    def _exit_status(self) -> int | None:
        if self._container is None:
            return None
        try:
            self._container.reload()
        except docker_errors.NotFound:
            return -1
        state = self._container.attrs.get("State", {})
        return (
            None
            if state.get("Running") or state.get("Status") == "created"
            else int(state.get("ExitCode", -1))
        )
