"""A running tritonserver, whatever launched it: ports, URLs, readiness, model states, logs.

``TritonServer`` is the one launcher interface: a context manager that starts on enter and stops on exit,
with the endpoints, the model states and the log's relevant lines. Two launchers implement it:
``runtime.local.LocalServer`` (a process on this machine) and ``runtime.container.ContainerServer`` (a
container of a tritonserver image). ``relevant_log_lines`` and the port choice only decide.

Every server tbgen starts carries a unique ``--id``, so readiness is read from this server and never from
another one that happens to answer on the same port.
"""

from __future__ import annotations

import abc
import json
import os
import re
import socket
import threading
import time
import urllib.error
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Self

from triton_backend_gen.errors import ServerError
from triton_backend_gen.lazy import lazy_module

urllib_request = lazy_module("urllib.request")  # with http.client: 30 ms of every tbgen start

if TYPE_CHECKING:
    from triton_backend_gen.runtime.release_note import ReleaseNote

LOOPBACK = "127.0.0.1"
_POLL_S = 0.05
READY, UNAVAILABLE = "READY", "UNAVAILABLE"
_IN_PROGRESS = {"LOADING", "UNLOADING"}

# Lines a CPU-only machine always logs: no CUDA driver, no NVML/DCGM, no pinned memory. Harmless there.
_CPU_NOISE = re.compile(
    r"CUDA driver version is insufficient|pinned memory pool will not be available|CUDA memory pool disabled"
    r"|CudaDriverHelper has not been initialized|\bNVML\b|\bDCGM\b|no CUDA-capable device|cudaGetDeviceCount"
    r"|GPU metrics|Collecting CPU metrics|Unable to get number of GPUs",
    re.IGNORECASE,
)
_GLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+\]\s?(.*)$")
_TROUBLE = re.compile(
    r"fail|error|exception|traceback|unavailable|unable|cannot|invalid|not found", re.IGNORECASE
)


INTERRUPTED_STOP_TIMEOUT_S = (
    3.0  # how long a server may take to stop after Ctrl-C or SIGTERM before it is killed
)


@dataclass
class ServerOptions:
    model_repository: Path
    log_file: Path
    host: str = LOOPBACK
    http_port: int = 0  # 0: pick a free port
    grpc_port: int = 0
    metrics_port: int = 0
    exit_on_error: bool = False  # False: the server stays up when a model fails to load
    verbose: bool = False
    startup_timeout: float = 120.0
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelState:
    name: str
    version: str
    state: str  # READY, UNAVAILABLE, LOADING, UNLOADING, or "" before a load was attempted
    reason: str = ""


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int
    metrics: int


def relevant_log_lines(log: str, limit: int = 40) -> list[str]:
    """The lines of a server log that explain a failure: warnings, errors, and info lines that report one,
    with what the Python stub printed after them (its traceback); without a CPU machine's CUDA/NVML/DCGM noise
    and without the status tables (which repeat the errors)."""
    picked: list[str] = []
    following = False  # the unprefixed lines (tracebacks) after a picked line belong to it
    for line in log.splitlines():
        pick, following = _log_line_verdict(line, following)
        if pick:
            picked.append(line.rstrip())
    return picked[-limit:]


def _log_line_verdict(line: str, following: bool) -> tuple[bool, bool]:
    """(whether relevant_log_lines picks ``line``, whether the unprefixed lines after it belong to a picked
    line), given whether the lines before it did (``following``)."""
    if _CPU_NOISE.search(line) or line.startswith("$ "):  # "$ tritonserver ...": the command tbgen ran
        return False, False
    match = _GLOG.match(line)
    if match is None:
        return _unprefixed_line_verdict(line.strip(), following)
    level, message = match.groups()
    relevant = level in "WEF" or _TROUBLE.search(message) is not None
    return relevant, relevant


def _unprefixed_line_verdict(stripped: str, following: bool) -> tuple[bool, bool]:
    """_log_line_verdict of a line without glog's prefix: a status table's row is skipped; a line is picked
    when it follows a picked one (a traceback) or reports trouble itself ("error: creating server: ...")."""
    if stripped.startswith(("+", "|")):  # the model and backend status tables, which repeat the errors
        return False, following
    if (following and stripped) or _TROUBLE.search(stripped):
        return True, True
    return False, following


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free on ``host`` right now."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class TritonServer(abc.ABC):
    """One tritonserver run: a context manager that starts on enter and stops on exit (see the module)."""

    in_container = False  # the server runs in a container (its paths are the image's, not this machine's)

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.warnings: list[str] = []
        self.notes: list[str] = []  # what tbgen changed for this run (e.g. the instance kind), for the output
        self.release_note: ReleaseNote | None = None  # the server is not of the project's release
        self.server_id = f"tbgen-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.ports: Ports | None = None
        self.sanitizer_runtimes: tuple[Path, ...] = ()  # preloaded into the server (a sanitizer build)
        self._log: IO[bytes] | None = None
        self._returncode: int | None = None
        self._lock = threading.Lock()
        self.remove_on_stop: list[Path] = []  # scratch directories this server owns (never the log)

    # --- lifecycle: what each launcher implements ---------------------------------------------------------
    def __enter__(self) -> Self:
        if not self.started:
            self.start()
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            # Interrupted: what is still in flight is abandoned, so the server gets little time to finish it.
            self.stop(timeout=INTERRUPTED_STOP_TIMEOUT_S)
        else:
            self.stop()

    @property
    @abc.abstractmethod
    def started(self) -> bool:
        """Whether start() was called (the server may have stopped since)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Launch the server and wait until it is live and every model is READY or has failed.

        Raises ServerError (the server stopped again) for a busy port, an early exit or a timeout."""

    @abc.abstractmethod
    def stop(self, timeout: float = 15) -> int:
        """Stop the server and what it spawned; its exit status. Safe to call more than once, and on a server
        that never started (0)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Which server this is, in one line for people."""

    @property
    @abc.abstractmethod
    def pid(self) -> int | None:
        """The server's pid on this host, for CPU and memory readings."""

    @abc.abstractmethod
    def _exit_status(self) -> int | None:
        """The server's exit status once it has exited, else None."""

    # --- state -------------------------------------------------------------------------------------------
    @property
    def log_file(self) -> Path:
        return Path(self.options.log_file)

    @property
    def running(self) -> bool:
        return self.started and self._exit_status() is None

    @property
    def http_url(self) -> str:
        return self._url(self._ports().http)

    @property
    def grpc_url(self) -> str:
        return self._url(self._ports().grpc)

    @property
    def metrics_url(self) -> str:
        return self._url(self._ports().metrics)

    def model_states(self) -> list[ModelState]:
        """Every model of the repository with its state, from the server's repository index."""
        index = self._request("POST", "/v2/repository/index", b"{}")
        return [
            ModelState(
                str(entry.get("name", "")),
                str(entry.get("version", "")),
                str(entry.get("state", "")),
                str(entry.get("reason", "")),
            )
            for entry in index
        ]

    def python_stubs(self) -> set[str] | None:
        """The model instances (e.g. "add_sub_0_0") whose python backend stub process is alive, or None where
        this host cannot see the server's processes."""
        return None

    def log_text(self) -> str:
        """The server's log as written so far ("" before there is one)."""
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def relevant_log_lines(self, limit: int = 40) -> list[str]:
        """The log lines that explain a failure (see the module function of the same name)."""
        return relevant_log_lines(self.log_text(), limit)

    # --- internals --------------------------------------------------------------------------------------
    def _ports(self) -> Ports:
        if self.ports is None:
            raise ServerError("The server has not been started yet.")
        return self.ports

    def _client_host(self) -> str:
        host = self.options.host
        if host in ("0.0.0.0", "", "localhost"):
            return LOOPBACK
        if host == "::":
            return "::1"
        return host

    def _url(self, port: int) -> str:
        host = self._client_host()
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _choose_ports(self) -> Ports:
        """The ports of this run: those the options ask for, checked free and distinct, and a free port for
        each left at 0."""
        host = self.options.host
        requested = {
            "http": self.options.http_port,
            "grpc": self.options.grpc_port,
            "metrics": self.options.metrics_port,
        }
        _check_requested_ports(host, requested)
        taken = {port for port in requested.values() if port}
        chosen: dict[str, int] = {}
        for name, port in requested.items():
            chosen[name] = port or _free_port_except(host, taken)
            taken.add(chosen[name])
        return Ports(**chosen)

    def _request(self, method: str, path: str, body: bytes | None = None, timeout: float = 5):
        request = urllib_request.Request(f"http://{self.http_url}{path}", data=body, method=method)
        # Never through a proxy: the server is local.
        opener = urllib_request.build_opener(urllib_request.ProxyHandler({}))
        with opener.open(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.options.startup_timeout
        foreign = False
        while True:
            code = self._exit_status()
            if code is not None:
                raise self._failure(f"tritonserver exited with status {code} before it was ready")
            try:
                metadata = self._request("GET", "/v2", timeout=2)
                foreign = metadata.get("name") != self.server_id
                if not foreign and not any(m.state in _IN_PROGRESS for m in self.model_states()):
                    return
            except (OSError, ValueError, urllib.error.URLError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                what = (
                    f"another server answers on {self.http_url}"
                    if foreign
                    else f"it was not ready within {self.options.startup_timeout:g} s"
                )
                raise self._failure(f"tritonserver did not start: {what}")
            time.sleep(_POLL_S)

    def _failure(self, message: str) -> ServerError:
        lines = self.relevant_log_lines()
        detail = ("\n" + "\n".join(lines)) if lines else ""
        return ServerError(
            f"{message}.{detail}\nFull log: {self.log_file}",
            "The lines above are the server's warnings and errors; the full log has the rest.",
        )

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _check_requested_ports(host: str, requested: dict[str, int]) -> None:
    """ServerError when a port asked for (not 0) is in use on ``host``, or two asked for are the same."""
    for name, port in requested.items():
        if port and not port_is_free(host, port):
            raise ServerError(
                f"Port {port} on {host} (the {name.upper()} port) is already in use.",
                f"Stop what listens there, or pick another port with --{name}-port (0 picks a free one).",
            )
    asked = [port for port in requested.values() if port]
    if len(set(asked)) != len(asked):
        raise ServerError(f"The HTTP, gRPC and metrics ports must differ (got {requested}).")


def _free_port_except(host: str, taken: set[int]) -> int:
    """A free port on ``host`` that is none of ``taken`` (the ports this run already uses)."""
    while (port := free_port(host)) in taken:
        pass
    return port


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
