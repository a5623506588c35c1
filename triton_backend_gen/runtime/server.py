"""Run one tritonserver process: ports, launch, readiness, logs and shutdown.

``TritonServer`` is the edge that starts and stops a process; ``server_command`` and
``relevant_log_lines`` only decide. A server tbgen starts:

- listens on 127.0.0.1 unless told otherwise, on ports checked free before launch (0 picks free ones);
- runs in its own process group and gets SIGKILL from the kernel if the thread that started it dies
  (PR_SET_PDEATHSIG), so even a SIGKILLed tbgen leaves no server behind;
- carries a unique ``--id``, so readiness is read from this process's server and never from another
  one that happens to answer on the same port;
- names the python backend's shared-memory regions after tbgen's pid, so that regions left by a killed
  run are removed by the next one.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import Project, find_project_root, load_project
from triton_backend_gen.runtime.backend_dir import BackendLayout, assemble_backend_dir
from triton_backend_gen.runtime.discovery import ServerInstall, find_tritonserver

LOOPBACK = "127.0.0.1"
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "tbgen_"  # + "<tbgen pid>_<run>_": the python backend's shm-region-prefix-name
_PR_SET_PDEATHSIG = 1
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
_TROUBLE = re.compile(r"fail|error|exception|traceback|unavailable|unable|cannot|invalid|not found", re.IGNORECASE)


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


def server_command(
    install: ServerInstall,
    layout: BackendLayout,
    options: ServerOptions,
    ports: Ports,
    *,
    server_id: str,
    shm_prefix: str,
) -> list[str]:
    """The tritonserver command line for one run."""
    command = [
        str(install.executable),
        f"--id={server_id}",
        f"--model-repository={options.model_repository}",
        f"--backend-directory={layout.backend_dir}",
        f"--http-address={options.host}",
        f"--http-port={ports.http}",
        f"--grpc-address={options.host}",
        f"--grpc-port={ports.grpc}",
        f"--metrics-address={options.host}",
        f"--metrics-port={ports.metrics}",
        f"--exit-on-error={'true' if options.exit_on_error else 'false'}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
    ]
    if options.verbose:
        command.append("--log-verbose=1")
    return command + list(options.extra_args)


def relevant_log_lines(log: str, limit: int = 40) -> list[str]:
    """The lines of a server log that explain a failure: warnings, errors, and info lines that report one,
    with what the Python stub printed after them (its traceback); without a CPU machine's CUDA/NVML/DCGM noise
    and without the status tables (which repeat the errors)."""
    picked: list[str] = []
    following = False  # the unprefixed lines (tracebacks) after a picked line belong to it
    for line in log.splitlines():
        if _CPU_NOISE.search(line):
            following = False
            continue
        match = _GLOG.match(line)
        if match is None:
            stripped = line.strip()
            if following and stripped and not stripped.startswith(("+", "|")):
                picked.append(line.rstrip())
            elif not stripped.startswith(("+", "|")) and _TROUBLE.search(stripped):
                picked.append(line.rstrip())  # e.g. "error: creating server: ..."
                following = True
            continue
        level, message = match.groups()
        following = False
        if level in "WEF" or _TROUBLE.search(message):
            picked.append(line.rstrip())
            following = True
    return picked[-limit:]


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


class TritonServer:
    """One tritonserver process; a context manager that starts on enter and stops on exit."""

    def __init__(self, install: ServerInstall, layout: BackendLayout, options: ServerOptions) -> None:
        self.install = install
        self.layout = layout
        self.options = options
        self.warnings: list[str] = list(layout.warnings)
        self.server_id = f"tbgen-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.shm_prefix = f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:6]}_"
        self.ports: Ports | None = None
        self._process: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None
        self._returncode: int | None = None
        self._lock = threading.Lock()
        self.remove_on_stop: list[Path] = []  # scratch directories this server owns (never the log)

    # --- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the server and wait until it is live and every model is READY or has failed.

        Raises ServerError (the server stopped again) for a busy port, an early exit or a timeout.
        Call it from a thread that outlives the server (normally the main thread): the kernel kills the
        server when the thread that started it ends (PR_SET_PDEATHSIG)."""
        if self._process is not None:
            raise ServerError("This server was already started; create a new TritonServer to start another.")
        self.ports = self._choose_ports()
        _remove_stale_shm_regions()
        log_file = Path(self.options.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_file.open("wb")
        command = server_command(self.install, self.layout, self.options, self.ports,
                                 server_id=self.server_id, shm_prefix=self.shm_prefix)
        self._log.write(("$ " + " ".join(command) + "\n").encode())
        self._log.flush()
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.layout.environment(),
                start_new_session=True,  # its own process group: stop() reaches the python stubs too
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl() call, no locks taken
            )
        except OSError as err:
            self._close_log()
            raise ServerError(f"cannot run {self.install.executable}: {err.strerror}") from err
        self._watchdog = _start_watchdog(self._process.pid)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 15) -> int:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout`` s) and what it spawned; its exit status.

        Safe to call more than once and on a server that never started (0)."""
        with self._lock, _signals_deferred():
            if self._process is None:
                return 0
            if self._returncode is None:
                process = self._process
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(timeout)
                    except subprocess.TimeoutExpired:
                        _kill_group(process.pid)
                        process.wait()
                self._returncode = process.returncode
                # The python stubs of a killed server are still in its group; a cleanly stopped server has none.
                _kill_group(process.pid)
                _wait_group_gone(process.pid, timeout=5)
                if self._watchdog is not None:  # the group is gone: the watchdog finds nothing to kill and exits
                    self._watchdog.stdin.close()
                    self._watchdog.wait()
                _remove_shm_regions(self.shm_prefix)
                self._close_log()
                for path in self.remove_on_stop:
                    shutil.rmtree(path, ignore_errors=True)
            return self._returncode

    # --- state ------------------------------------------------------------------------------------------
    def describe(self) -> str:
        """Which server this is, in one line for people."""
        return self.install.describe()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_file(self) -> Path:
        return Path(self.options.log_file)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

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
            ModelState(str(entry.get("name", "")), str(entry.get("version", "")),
                       str(entry.get("state", "")), str(entry.get("reason", "")))
            for entry in index
        ]

    def relevant_log_lines(self, limit: int = 40) -> list[str]:
        """The log lines that explain a failure (see the module function of the same name)."""
        if self._log is not None:
            self._log.flush()
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return relevant_log_lines(text, limit)

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
        host = self.options.host
        requested = {"http": self.options.http_port, "grpc": self.options.grpc_port,
                     "metrics": self.options.metrics_port}
        chosen: dict[str, int] = {}
        for name, port in requested.items():
            if port and not port_is_free(host, port):
                raise ServerError(
                    f"Port {port} on {host} (the {name.upper()} port) is already in use.",
                    f"Stop what listens there, or pick another port with --{name}-port (0 picks a free one).",
                )
            chosen[name] = port
        taken = {port for port in chosen.values() if port}
        if len(taken) != sum(1 for port in chosen.values() if port):
            raise ServerError(f"The HTTP, gRPC and metrics ports must differ (got {requested}).")
        for name, port in chosen.items():
            while not port:
                port = free_port(host)
                if port in taken:
                    port = 0
            chosen[name] = port
            taken.add(port)
        return Ports(**chosen)

    def _request(self, method: str, path: str, body: bytes | None = None, timeout: float = 5):
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=body, method=method)
        # Never through a proxy: the server is local.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
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
                what = (f"another server answers on {self.http_url}" if foreign
                        else f"it was not ready within {self.options.startup_timeout:g} s")
                raise self._failure(f"tritonserver did not start: {what}")
            time.sleep(_POLL_S)

    def _exit_status(self) -> int | None:
        """The server's exit status once it has exited, else None."""
        return self._process.poll()

    def _failure(self, message: str) -> ServerError:
        lines = self.relevant_log_lines()
        detail = ("\n" + "\n".join(lines)) if lines else ""
        return ServerError(f"{message}.{detail}\nFull log: {self.log_file}",
                           "The lines above are the server's warnings and errors; the full log has the rest.")

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


# --- process hygiene ----------------------------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)


# Run beside the server: when tbgen is gone (its end of the pipe closed, even by SIGKILL), kill the server's
# whole process group. PR_SET_PDEATHSIG kills the server itself, but not the python stubs it forked.
_WATCHDOG = (
    "import os, signal, sys\n"
    "sys.stdin.buffer.read()\n"
    "try:\n    os.killpg(int(sys.argv[1]), signal.SIGKILL)\n"
    "except OSError:\n    pass\n"
)


def _start_watchdog(pgid: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(pgid)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C on the terminal must not reach it
    )


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent (thread) dies, even if the parent was SIGKILLed."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[int]:
    """The pids of live processes in process group ``pgid`` (zombies excluded), from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its closing parenthesis.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _wait_group_gone(pgid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _remove_shm_regions(prefix: str) -> None:
    for region in SHM_DIR.glob(f"{prefix}*") if SHM_DIR.is_dir() else ():
        try:
            region.unlink()
        except OSError:
            pass


def _remove_stale_shm_regions() -> None:
    """Remove shm regions of tbgen runs whose tbgen process is gone (their server died with it)."""
    if not SHM_DIR.is_dir():
        return
    for region in SHM_DIR.glob(f"{SHM_PREFIX}*"):
        owner = region.name[len(SHM_PREFIX) :].split("_", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            try:
                region.unlink()
            except OSError:
                pass


class _signals_deferred:
    """Hold SIGINT/SIGTERM/SIGHUP during a shutdown so a second Ctrl-C cannot interrupt it half-way;
    they are delivered once it is done."""

    _SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

    def __enter__(self) -> None:
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.pthread_sigmask(signal.SIG_BLOCK, self._SIGNALS)

    def __exit__(self, *exc_info) -> None:
        if self._previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._previous)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# --- the stage function -------------------------------------------------------------------------------------
def prepare_server(
    project_or_repo: Path,
    *,
    server: Path | None = None,
    python: Path = Path(sys.executable),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    mount: bool = True,
    **overrides: Any,
) -> TritonServer:
    """A TritonServer (not started) for a tbgen project or a bare model repository.

    For a project (a tbgen.toml at or above ``project_or_repo``): its model repository, the log at
    ``<project>/build/tbgen/server.log`` and the backend tree under ``<project>/build/tbgen/``. For a bare
    model repository: a temporary directory holds the backend tree and the log. ``overrides`` set
    ServerOptions fields (http_port=8000, verbose=True, ...). ``warnings`` says when the project targets
    another Triton release than the server's.

    With ``docker`` the server runs in a container of ``image`` (default: the NGC image of the project's
    release, or of the newest release for a bare repository), with all GPUs when ``gpu``; ``mount=False``
    serves the image's own /models and backends (an image made by `tbgen package`).
    """
    path = Path(project_or_repo).resolve()
    root = find_project_root(path)
    if root is not None:
        project = load_project(root)
        work_dir = root / "build" / "tbgen"
        repository = project.model_repository
    elif path.is_dir():
        project = None
        work_dir = Path(tempfile.mkdtemp(prefix="tbgen-server-"))
        repository = path
    else:
        raise ServerError(f"{path} is neither a tbgen project nor a model repository directory.",
                          "Pass a project made by `tbgen new`, or a directory of models.")
    options = dataclasses.replace(
        ServerOptions(model_repository=repository, log_file=work_dir / "server.log"), **overrides
    )
    if docker:
        from triton_backend_gen import versions
        from triton_backend_gen.runtime.container import ContainerServer, default_image

        release = project.triton_version if project is not None else versions.newest().container
        return ContainerServer(image or default_image(release), options, project, gpu=gpu, mount=mount)
    install = find_tritonserver(server)
    layout = assemble_backend_dir(install, work_dir, project, python)
    triton = TritonServer(install, layout, options)
    if project is not None:
        triton.warnings.extend(release_warnings(project, install))
    else:
        triton.remove_on_stop += [work_dir / "backends", work_dir / "lib"]  # the log stays for reading
    return triton


def start_server(
    project_or_repo: Path,
    *,
    server: Path | None = None,
    python: Path = Path(sys.executable),
    **overrides: Any,
) -> TritonServer:
    """The stage function of `tbgen serve` and `tbgen test`: ``prepare_server`` and start it (ready to use)."""
    triton = prepare_server(project_or_repo, server=server, python=python, **overrides)
    triton.start()
    return triton


def release_warnings(project: Project, install: ServerInstall) -> list[str]:
    """A warning when the project targets another Triton release than the server's."""
    release = install.release
    if release is None:
        return [(f"tritonserver {install.version} ({install.source}) is not a release tbgen knows; "
                 f"{project.name} targets {project.triton_version}.")]
    if release.container != project.triton_version:
        return [(f"{project.name} targets Triton {project.triton_version}, but the server is {release.container} "
                 f"(tritonserver {install.version}, {install.source}); results may differ from the target "
                 "release. Pass --server a tritonserver of that release to test against it.")]
    return []


# --- signals ------------------------------------------------------------------------------------------------
class SignalReceived(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into an exception, so that `with TritonServer(...)` unwinds and stops it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise SignalReceived (SIGINT already raises KeyboardInterrupt).

    Only the main thread can install handlers; elsewhere the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_signal(signum: int, _frame) -> None:
        raise SignalReceived(signum)

    previous = {signum: signal.signal(signum, raise_signal) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
