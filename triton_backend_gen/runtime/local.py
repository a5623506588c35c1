"""A tritonserver process on this machine (the local launcher of ``runtime.server.TritonServer``).

A server tbgen starts here:

- runs in its own process group and gets SIGKILL from the kernel if the thread that started it dies
  (PR_SET_PDEATHSIG), and a watchdog kills its group (the python stubs too) when tbgen is gone, so even a
  SIGKILLed tbgen leaves nothing behind;
- names the python backend's shared-memory regions after tbgen's pid, so that regions left by a killed
  run are removed by the next one.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from triton_backend_gen.discovery import ServerInstall
from triton_backend_gen.errors import ServerError
from triton_backend_gen.runtime.backend_dir import BackendLayout
from triton_backend_gen.runtime.server import Ports, ServerOptions, TritonServer
from triton_backend_gen.signals import signals_deferred

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "tbgen_"  # + "<tbgen pid>_<run>_": the python backend's shm-region-prefix-name
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.05


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


class LocalServer(TritonServer):
    """One tritonserver process of ``install`` with the backend tree ``layout``."""

    def __init__(self, install: ServerInstall, layout: BackendLayout, options: ServerOptions) -> None:
        super().__init__(options)
        self.install = install
        self.layout = layout
        self.warnings += layout.warnings
        self.sanitizer_runtimes = layout.sanitizer_runtimes
        self.shm_prefix = f"{SHM_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:6]}_"
        self._process: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None

    @property
    def started(self) -> bool:
        return self._process is not None

    def start(self) -> None:
        """Launch the server and wait until it is live and every model is READY or has failed.

        Raises ServerError (the server stopped again) for a busy port, an early exit or a timeout.
        Call it from a thread that outlives the server (normally the main thread): the kernel kills the
        server when the thread that started it ends (PR_SET_PDEATHSIG)."""
        if self._process is not None:
            raise ServerError("This server was already started; create a new LocalServer to start another.")
        self.ports = self._choose_ports()
        _remove_stale_shm_regions()
        log_file = Path(self.options.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_file.open("wb")
        command = server_command(
            self.install,
            self.layout,
            self.options,
            self.ports,
            server_id=self.server_id,
            shm_prefix=self.shm_prefix,
        )
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
        with self._lock, signals_deferred():
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
                # The python stubs of a killed server are still in its group; a cleanly stopped server has
                # none.
                _kill_group(process.pid)
                _wait_group_gone(process.pid, timeout=5)
                if (
                    self._watchdog is not None
                ):  # the group is gone: the watchdog finds nothing to kill and exits
                    self._watchdog.stdin.close()
                    self._watchdog.wait()
                _remove_shm_regions(self.shm_prefix)
                self._close_log()
                for path in self.remove_on_stop:
                    shutil.rmtree(path, ignore_errors=True)
            return self._returncode

    def describe(self) -> str:
        return self.install.describe()

    def python_stubs(self) -> set[str] | None:
        if self._process is None:
            return None
        instances = set()
        for pid in group_members(self._process.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # it has just exited
            # triton_python_backend_stub MODEL_PY SHM_REGION SHM_SIZE SHM_GROWTH PARENT_PID LIB_DIR IPC
            # INSTANCE ...
            if len(argv) > 8 and argv[0].endswith(b"triton_python_backend_stub"):
                instances.add(argv[8].decode(errors="replace"))
        return instances

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _exit_status(self) -> int | None:
        return self._process.poll() if self._process else None


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
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
