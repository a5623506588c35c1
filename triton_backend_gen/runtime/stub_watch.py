"""The python backend's stub processes of a local server: which model instance each serves, and whether it
is alive, dead or hung.

python_backend runs every instance of a python model in a process of its own, ``triton_python_backend_stub``,
forked by tritonserver (src/stub_launcher.cc, r24.10: through ``bash -c "exec STUB ..."``, so the stub keeps
the forked pid and the server stays its parent) with the arguments

    STUB MODEL_DIR/VERSION/model.py SHM_REGION SHM_SIZE SHM_GROWTH SERVER_PID LIB_DIR IPC_HANDLE INSTANCE
    RUNTIME_MODELDIR

A stub that dies is not restarted (python_backend r24.10 to r26.06: "TODO: Implement restart"): the server
answers every later request of that instance "Stub process '<instance>' is not healthy." after a second, and
a 2.51 server (release 24.10) still reports the model READY (server issue #8604). Nor does the 24.10 server
reap it: the stub stays a zombie, whose /proc entry keeps its wait status, until the model unloads. From
r25.12 the server's readiness probe reaps it (StubLauncher::StubActive calls waitpid), so a stub may also be
simply gone.

What this module calls **hung** is what /proc can tell without guessing: a stub stopped by a signal (state
T, e.g. SIGSTOP) or by a debugger (t). Its health thread stops with it, so the server fails its requests as
"not healthy" too. A stub that loops or blocks inside the model's Python code still looks alive here (its
health thread keeps running, and the server waits on it): the smoke suite's request deadlines catch that
one.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.runtime.local import LocalServer
from triton_backend_gen.runtime.server import TritonServer

STUB_EXECUTABLE = "triton_python_backend_stub"
PROC = Path("/proc")
_INSTANCE_ARG = 8  # argv[8]: the model instance's name ("add_sub_0_0")
_STOP_SIGNALS = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}


@dataclass(frozen=True)
class Stub:
    """One stub process: the model instance it serves."""

    pid: int
    model: str
    instance: str
    started: int  # its start time in clock ticks after boot (/proc/PID/stat field 22): tells a reused pid


@dataclass(frozen=True)
class ProcStat:
    """What /proc/PID/stat says about a process."""

    state: str  # R, S, D, T, t, Z, ...
    ppid: int
    started: int
    exit_code: int  # field 52: a zombie's status as waitpid(2) reports it; a stopped process's stop signal


@dataclass(frozen=True)
class StubTrouble:
    """A stub that died or hung, and how."""

    stub: Stub
    dead: bool  # False: it hung (its process still exists, stopped)
    how: str  # "killed by SIGKILL", "exited with status 1", "stopped by SIGSTOP", ...

    @property
    def state(self) -> str:
        """What became of its process, for a sentence: "its process had exited (killed by SIGKILL)"."""
        if self.dead:
            return f"its process had exited ({self.how})"
        return f"its process was still running (it hung): {self.how}"


# --- decisions -------------------------------------------------------------------------------------------
def parse_stat(text: str) -> ProcStat | None:
    """The fields of a /proc/PID/stat line that the watch uses (None for a line it cannot read)."""
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
    fields = text[text.rfind(")") + 2 :].split()
    try:
        # field numbers in proc(5) count from 1 at pid: state is 3, ppid 4, starttime 22, exit_code 52
        exit_code = int(fields[49]) if len(fields) > 49 else -1  # Linux 3.5+
        return ProcStat(fields[0], int(fields[1]), int(fields[19]), exit_code)
    except (IndexError, ValueError):
        return None


def stub_of(pid: int, argv: list[bytes], started: int) -> Stub | None:
    """The stub that ``argv`` (a process's /proc/PID/cmdline, split at NULs) launched, or None when it is no
    model instance's stub (another program, or a stub's auto-complete run with fewer arguments)."""
    if len(argv) <= _INSTANCE_ARG or not argv[0].endswith(STUB_EXECUTABLE.encode()):
        return None
    model = Path(os.fsdecode(argv[1])).parent.parent.name  # MODEL_DIR/VERSION/model.py
    return Stub(pid, model, argv[_INSTANCE_ARG].decode(errors="replace"), started)


def wait_status_text(status: int) -> str:
    """A waitpid(2) status in words: "killed by SIGKILL", "exited with status 1"."""
    if status < 0:
        return "its exit status is unknown"
    if os.WIFSIGNALED(status):
        dumped = " (core dumped)" if status & 0x80 else ""
        return f"killed by {_signal_name(os.WTERMSIG(status))}{dumped}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"ended with wait status {status}"


def judge(stub: Stub, stat: ProcStat | None) -> StubTrouble | None:
    """What became of ``stub`` given its pid's stat now (None: no such process): None while it lives."""
    if stat is None or stat.started != stub.started:  # gone, or the pid now belongs to another process
        return StubTrouble(stub, True, "the server collected its exit status")
    if stat.state == "Z":
        return StubTrouble(stub, True, wait_status_text(stat.exit_code))
    if stat.state == "T":
        stopped_by = stat.exit_code in _STOP_SIGNALS and _signal_name(stat.exit_code)
        return StubTrouble(stub, False, f"stopped by {stopped_by or 'a signal'} (state T)")
    if stat.state == "t":
        return StubTrouble(stub, False, "stopped by a debugger (state t)")
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# --- the watch ---------------------------------------------------------------------------------------------
@dataclass
class StubWatch:
    """The stubs of the server with pid ``server_pid``: those it has seen (a stub that died is a zombie with
    no command line left, so the watch must have met it alive), and those it has reported."""

    server_pid: int
    proc: Path = PROC
    known: dict[int, Stub] = field(default_factory=dict)
    reported: dict[int, StubTrouble] = field(default_factory=dict)  # found dead or hung (said once), by pid
    expected: set[int] = field(default_factory=set)  # pids killed on purpose (kill_one): never reported

    def look(self) -> list[StubTrouble]:
        """The stubs found dead or hung since the last look, each said once. Stubs started since are met; a
        stub that a new one of the same instance replaced (the model was loaded again) is forgotten, unless
        it died unseen."""
        live = self._children()
        troubles = []
        for pid, stub in list(self.known.items()):
            stat = _stat_of(stub, live)
            if _replaced(stub, live) and (stat is None or pid in self.reported or pid in self.expected):
                self._drop(pid)  # unloaded and loaded again, not dead (or said already)
                continue
            if pid in self.reported or pid in self.expected:
                continue
            trouble = judge(stub, stat)
            if trouble is not None:
                self.reported[pid] = trouble
                troubles.append(trouble)
        return troubles

    def forget(self, models: set[str] | list[str]) -> None:
        """``models`` were loaded again: forget their stubs that are gone (an instance fewer) or replaced, and
        meet the new ones. A stub the server kept (a load it ignored, nothing having changed) is kept."""
        live = self._children()
        for pid, stub in list(self.known.items()):
            if stub.model in models and (_stat_of(stub, live) is None or _replaced(stub, live)):
                self._drop(pid)

    def _drop(self, pid: int) -> None:
        del self.known[pid]
        self.reported.pop(pid, None)
        self.expected.discard(pid)

    def stubs(self) -> list[Stub]:
        """The stubs alive now, by instance name."""
        live = self._children()
        return sorted(
            (s for stat, s in live.values() if s and judge(s, stat) is None), key=lambda s: s.instance
        )

    def kill_one(self, model: str) -> Stub | None:
        """SIGKILL one live stub of ``model`` on purpose (look() does not report it); None if it has none."""
        for stub in self.stubs():
            if stub.model == model:
                self.expected.add(stub.pid)
                try:
                    os.kill(stub.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return stub
        return None

    def _children(self) -> _Children:
        """The server's child processes now, with the stub each is (remembered ones too: a zombie has no
        command line)."""
        children: _Children = {}
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            stat = _read_stat(entry)
            if stat is None or stat.ppid != self.server_pid:
                continue
            pid = int(entry.name)
            stub = self.known.get(pid)
            if stub is None or stub.started != stat.started:
                stub = _read_stub(entry, pid, stat)
                if stub is not None:
                    self.known[pid] = stub
            children[pid] = (stat, stub)
        return children


_Children = dict[int, tuple[ProcStat, Stub | None]]  # a server's child processes: pid -> (stat, stub)


def _stat_of(stub: Stub, live: _Children) -> ProcStat | None:
    """The stat of ``stub``'s process among the server's children, None when it is gone (or its pid now
    belongs to another process)."""
    stat = live[stub.pid][0] if stub.pid in live else None
    return stat if stat is not None and stat.started == stub.started else None


def _replaced(stub: Stub, live: _Children) -> bool:
    """Whether another live stub serves ``stub``'s instance now."""
    return any(
        other is not None and other.instance == stub.instance and other != stub and judge(other, stat) is None
        for stat, other in live.values()
    )


def _read_stat(entry: Path) -> ProcStat | None:
    try:
        return parse_stat(entry.joinpath("stat").read_text(errors="replace"))
    except OSError:
        return None  # it has just gone


def _read_stub(entry: Path, pid: int, stat: ProcStat) -> Stub | None:
    try:
        argv = entry.joinpath("cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return stub_of(pid, argv, stat.started)


def watch_stubs(triton: TritonServer) -> StubWatch | None:
    """A watch over the stubs of ``triton`` once it has started, where this machine sees its processes (a
    local server); None elsewhere (a container, a server at --url)."""
    if not isinstance(triton, LocalServer) or triton.pid is None or not PROC.is_dir():
        return None
    watch = StubWatch(triton.pid)
    watch.look()  # meet every stub alive now
    return watch
