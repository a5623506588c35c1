"""The python stub watch: which model instance each stub serves, and whether it is alive, dead or hung.

The decisions are tested on /proc text; the watch itself on real processes that look like stubs to /proc (a
program called triton_python_backend_stub with the stub's arguments), children of the test process as stubs
are of tritonserver. No server: tests/smoke/test_stub_health.py kills real stubs of a real one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from triton_backend_gen.runtime.stub_watch import (
    STUB_EXECUTABLE,
    ProcStat,
    Stub,
    StubWatch,
    judge,
    parse_stat,
    stub_of,
    wait_status_text,
)

# What a 2.51 server's stub of add_sub's first instance runs with (src/stub_launcher.cc, r24.10).
ARGV = [
    b"/p/build/tbgen/backends/python/triton_python_backend_stub",
    b"/p/model_repository/add_sub/1/model.py",
    b"tbgen_20565_522fe1_8c8601b8",
    b"1048576",
    b"1048576",
    b"20664",
    b"/p/build/tbgen/backends/python",
    b"336",
    b"add_sub_0_0",
    b"DEFAULT",
    b"",
]


def stat_line(
    pid: int, state: str, ppid: int, started: int, exit_code: int, comm: str = "triton_python_b"
) -> str:
    """A /proc/PID/stat line: 52 fields, those the watch reads set."""
    after = ["0"] * 50
    after[0], after[1], after[19], after[49] = state, str(ppid), str(started), str(exit_code)
    return f"{pid} ({comm}) {' '.join(after)}\n"


def test_a_stub_is_named_by_its_model_directory_and_instance_argument():
    assert stub_of(7, ARGV, 99) == Stub(7, "add_sub", "add_sub_0_0", 99)
    assert stub_of(7, [b"/usr/bin/bash", *ARGV[1:]], 99) is None  # another program
    assert stub_of(7, ARGV[:5], 99) is None  # too few arguments for a model instance's stub


def test_stat_fields_are_read_after_the_command_name_whatever_it_holds():
    text = stat_line(5, "Z", 4, 1234, 9, comm="a (b) c")
    assert parse_stat(text) == ProcStat("Z", 4, 1234, 9)
    assert parse_stat("5 (x) R 4") is None


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (signal.SIGKILL, "killed by SIGKILL"),
        (signal.SIGSEGV | 0x80, "killed by SIGSEGV (core dumped)"),
        (1 << 8, "exited with status 1"),
        (-1, "its exit status is unknown"),
    ],
)
def test_wait_status_in_words(status, words):
    assert wait_status_text(status) == words


def test_judging_a_stub_by_its_stat():
    stub = Stub(7, "m", "m_0_0", 100)
    assert judge(stub, ProcStat("S", 1, 100, 0)) is None
    assert judge(stub, ProcStat("R", 1, 100, 0)) is None
    died = judge(stub, ProcStat("Z", 1, 100, signal.SIGKILL))
    assert died.dead and died.how == "killed by SIGKILL"
    assert died.state == "its process had exited (killed by SIGKILL)"
    hung = judge(stub, ProcStat("T", 1, 100, signal.SIGSTOP))
    assert not hung.dead and hung.how == "stopped by SIGSTOP (state T)"
    assert "still running (it hung)" in hung.state
    assert judge(stub, ProcStat("t", 1, 100, 0)).how == "stopped by a debugger (state t)"
    assert judge(stub, None).how == "the server collected its exit status"
    reused = judge(stub, ProcStat("S", 1, 555, 0))  # the pid now belongs to another process
    assert reused.dead


# --- the watch, on processes that look like stubs -----------------------------------------------------------
@pytest.fixture
def spawn(tmp_path):
    """spawn(instance, model="m"): a child of this process that /proc shows as the stub of ``instance``
    (bash under the stub's name, reading stdin with no timeout: no process of its own). All are killed and
    reaped at the end."""
    program = tmp_path / "bin" / STUB_EXECUTABLE
    program.parent.mkdir()
    program.symlink_to("/bin/bash")
    children: list[subprocess.Popen] = []

    def start(instance: str, model: str = "m") -> subprocess.Popen:
        script = tmp_path / model / "1" / "model.py"
        if not script.exists():  # never rewritten: a stub started before may be reading it
            script.parent.mkdir(parents=True)
            script.write_text("read line\n")
        args = [str(program), str(script), "shm", "1", "1", str(os.getpid()), "lib", "0", instance, "DEFAULT"]
        child = subprocess.Popen(args, stdin=subprocess.PIPE)
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()
        child.wait()


def test_the_watch_names_each_stub_and_says_once_how_it_died_or_hung(spawn):
    first, second, third = spawn("m_0_0"), spawn("m_0_1"), spawn("m_0_2")
    watch = StubWatch(os.getpid())
    assert watch.look() == []
    assert [(s.pid, s.model, s.instance) for s in watch.stubs()] == [
        (first.pid, "m", "m_0_0"),
        (second.pid, "m", "m_0_1"),
        (third.pid, "m", "m_0_2"),
    ]
    os.kill(first.pid, signal.SIGSTOP)
    _wait_for_state(first.pid, "T")  # a signal takes effect once its process is scheduled
    os.kill(second.pid, signal.SIGKILL)
    second.wait()  # reaped, as a 26.03+ server's readiness probe does: gone, no status left
    os.kill(third.pid, signal.SIGKILL)
    _wait_for_state(third.pid, "Z")  # not reaped, as on a 2.51 server: a zombie with its wait status
    found = {t.stub.instance: (t.dead, t.how) for t in watch.look()}
    assert found == {
        "m_0_0": (False, "stopped by SIGSTOP (state T)"),
        "m_0_1": (True, "the server collected its exit status"),
        "m_0_2": (True, "killed by SIGKILL"),
    }
    assert watch.look() == []  # each is said once
    assert watch.stubs() == []


def test_a_stub_replaced_by_a_reload_is_forgotten_and_one_killed_on_purpose_is_not_reported(spawn):
    old = spawn("m_0_0")
    other = spawn("n_0_0", model="n")
    watch = StubWatch(os.getpid())
    watch.look()
    old.kill()
    old.wait()  # unloaded: the server collected it
    new = spawn("m_0_0")  # the model loaded again: a new stub serves the same instance
    assert watch.look() == []
    assert {s.pid for s in watch.stubs()} == {new.pid, other.pid}
    killed = watch.kill_one("n")
    assert killed is not None and killed.pid == other.pid
    _wait_for_state(other.pid, "Z")
    assert watch.look() == []
    assert watch.kill_one("n") is None  # none left alive


def test_a_dead_stub_stays_reported_until_a_new_one_serves_its_instance(spawn):
    first = spawn("m_0_0")
    watch = StubWatch(os.getpid())
    watch.look()
    first.kill()
    _wait_for_state(first.pid, "Z")  # a 2.51 server keeps it a zombie, even while it unloads the model
    [died] = watch.look()
    assert died.stub.pid == first.pid and died.dead
    watch.forget(["m"])  # a load the server ignored (nothing changed): the dead stub still serves m_0_0
    assert list(watch.reported) == [first.pid]
    second = spawn("m_0_0")  # loaded again for real
    watch.forget(["m"])
    assert watch.reported == {} and [s.pid for s in watch.stubs()] == [second.pid]
    second.kill()
    _wait_for_state(second.pid, "Z")
    third = spawn("m_0_0")  # died unseen, then replaced: still said
    [died] = watch.look()
    assert died.stub.pid == second.pid and [s.pid for s in watch.stubs()] == [third.pid]


def _wait_for_state(pid: int, state: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = parse_stat(Path(f"/proc/{pid}/stat").read_text())
        if stat is not None and stat.state == state:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not reach state {state} within {timeout} s")
