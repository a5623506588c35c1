"""What a run carries from step to step, a step's shape and outcome, and the commands a step runs (each
logged, bounded by the step's time)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpu_check.device import FAIL, tail_lines


@dataclass
class Outcome:
    status: str
    summary: str
    detail: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)


@dataclass
class StepResult:
    name: str
    status: str
    seconds: float
    summary: str
    detail: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)


@dataclass
class Step:
    """One step of the run. ``gpu``: "needs" (skipped without a GPU), "for" (its point is the GPU steps:
    without a GPU it runs only with --cpu-steps) or "no". ``after``: the steps that must have passed.
    ``group``: consecutive steps of one group run side by side. ``least``: not started with less time left."""

    name: str
    action: Callable[[RunState], Outcome]
    gpu: str = "no"
    after: tuple[str, ...] = ()
    timeout: float = 120
    least: float = 10
    group: str = ""


@dataclass
class RunState:
    work: Path
    out: Path
    carry: Path
    cpu_steps: bool
    deadline: float
    python: str = sys.executable
    started: float = field(default_factory=time.monotonic)
    env: dict[str, str] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    manifest: dict = field(default_factory=dict)
    projects: dict[str, Path] = field(default_factory=dict)
    results: dict[str, StepResult] = field(default_factory=dict)

    @property
    def gpu(self) -> dict | None:
        gpus = self.facts.get("gpus") or []
        return gpus[0] if gpus else None

    @property
    def logs(self) -> Path:
        return self.work / "logs"

    def left(self) -> float:
        return self.deadline - time.monotonic()


@dataclass(frozen=True)
class Completed:
    returncode: int | None  # None: stopped at its time limit
    output: str
    seconds: float


def run_logged(command: list, log: Path, timeout: float, env: dict[str, str], cwd: Path) -> Completed:
    """Run ``command`` with its output in ``log``; past ``timeout`` its process group is stopped (SIGTERM,
    then SIGKILL): tbgen then stops the servers it started."""
    command = [str(part) for part in command]
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # its own process group, which a timeout stops as a whole
        )
        try:
            returncode: int | None = process.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            stop_group(process)
            returncode = None
    return Completed(returncode, log.read_text(errors="replace"), time.monotonic() - started)


def stop_group(process: subprocess.Popen) -> None:
    """Stop the process group this script started for one command: SIGTERM, then SIGKILL, each followed by a
    wait until the leader has exited and no member of its group still runs (a member's signal is delivered
    when it next runs, which may be after the leader is gone)."""
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if process.poll() is not None and not _group_runs(process.pid):
                return
            time.sleep(0.05)


def _group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie awaiting its reaper does not), from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()  # "pid (comm) state ppid pgrp ...": comm may hold spaces
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            return True
    return False


def tbgen(state: RunState, *args: str | Path) -> list[str]:
    return [state.python, "-m", "triton_backend_gen", *map(str, args)]


# When the running step's time ends, in each thread (the builds run side by side).
_STEP_TIME = threading.local()


def begin_step(seconds: float) -> None:
    """The step this thread runs now has ``seconds``: its commands are stopped then."""
    _STEP_TIME.ends = time.monotonic() + seconds


def run_step_command(state: RunState, name: str, command: list) -> Completed:
    """A command of the running step, logged in logs/<name>.log, stopped at the end of the step's time."""
    timeout = getattr(_STEP_TIME, "ends", time.monotonic() + 600) - time.monotonic()
    return run_logged(command, state.logs / f"{slug(name)}.log", timeout, state.env, state.work)


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-")


def failed(completed: Completed, what: str, lines: int = 12) -> Outcome:
    """The outcome of a command that failed or ran out of time."""
    detail = tail_lines(completed.output, lines).splitlines()
    if completed.returncode is None:
        return Outcome(FAIL, f"{what}: stopped at its time limit ({completed.seconds:.0f} s)", detail)
    return Outcome(FAIL, f"{what}: exit status {completed.returncode}", detail)
