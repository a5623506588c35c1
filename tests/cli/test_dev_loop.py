"""`tbgen dev` driven as a person drives it: in a pseudo-terminal, editing the project's files.

For each kind of project (a python model, a C++ backend, a decoupled C++ backend): the session starts and
passes; a changed computation (the user's file, then reference.py) is verified without a restart (the same
server process throughout); a broken edit shows its error (the unit tests' first difference or the
compiler's first error, with the file and line) while the model stays served; the fixed edit passes again; a
python model whose config.pbtxt the server refuses shows the server's reason; Ctrl-C leaves no process behind.
"""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import new_project, project_of, replace_once

pexpect = pytest.importorskip("pexpect", reason="pexpect drives tbgen dev in a pseudo-terminal")

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 300  # a C++ project's first build
TURN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Edits:
    user_file: str
    changed: tuple[str, str]  # the computation changed: (old, new) in the user's file
    reference: tuple[str, str]  # the same change in reference.py
    broken: tuple[str, str]  # an edit that breaks the user's file
    broken_says: str  # what the session must show of the broken edit


EDITS = {
    "python-backend": Edits(
        "model_repository/add_sub/1/compute.py",
        ("OUTPUT0: in0 + in1,", "OUTPUT0: in0 + 2 * in1,"),
        ("OUTPUT0: (a + b).astype", "OUTPUT0: (a + 2 * b).astype"),
        ("OUTPUT0: in0 + 2 * in1,", "OUTPUT0: in0 + 2 * in1,,"),
        r"SyntaxError.*\s+at \S+compute\.py:\d+",
    ),
    "cpp-backend": Edits(
        "src/compute.cc",
        ("sum[i] = a[i] + b[i];", "sum[i] = a[i] + 2 * b[i];"),
        ("OUTPUT0: (a + b).astype", "OUTPUT0: (a + 2 * b).astype"),
        ("sum[i] = a[i] + 2 * b[i];", "sum[i] = a[i] + 2 * b[i]"),
        r"src/compute\.cc:\d+:\d+: error:",
    ),
    "decoupled-backend": Edits(
        "src/compute.cc",
        ("out.OUT[0] = in.IN[i];", "out.OUT[0] = 3 * in.IN[i];"),
        ('{"OUT": np.array([value], dtype', '{"OUT": np.array([3 * value], dtype'),
        ("out.OUT[0] = 3 * in.IN[i];", "out.OUT[0] = 3 * in.IN[i]"),
        r"src/compute\.cc:\d+:\d+: error:",
    ),
}


def _spawn(project: Path, *args: str):
    env = {**os.environ, "COLUMNS": "250", "LINES": "50"}
    child = pexpect.spawn(
        sys.executable,
        ["-m", "triton_backend_gen", "dev", *args],
        cwd=str(project),
        env=env,
        encoding="utf-8",
        codec_errors="replace",
        dimensions=(50, 250),
        timeout=TURN_TIMEOUT_S,
    )
    child.logfile_read = io.StringIO()  # the whole session, for a failure's message (see _said)
    return child


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _said(child, lines: int = 40) -> str:
    """The session's last ``lines`` printed lines, without the live table's escape codes and blank lines."""
    text = _ANSI.sub("", child.logfile_read.getvalue()).replace("\r", "\n")
    return "\n".join([line.rstrip() for line in text.splitlines() if line.strip()][-lines:])


def _server_processes(tbgen_pid: int) -> list[int]:
    """The tritonserver processes the tbgen process ``tbgen_pid`` started (their --id names its pid)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if f"--id=tbgen-{tbgen_pid}-".encode() in cmdline:
                found.append(int(entry.name))
    return found


def _model_ready(http: str, model: str) -> bool:
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}/ready", timeout=5) as response:
        return response.status == 200


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("python-backend", marks=pytest.mark.xdist_group("dev-loop-python")),
        pytest.param("cpp-backend", marks=[pytest.mark.cpp, pytest.mark.xdist_group("dev-loop-cpp")]),
        pytest.param(
            "decoupled-backend", marks=[pytest.mark.cpp, pytest.mark.xdist_group("dev-loop-decoupled")]
        ),
    ],
)
def test_dev_verifies_each_save_and_leaves_nothing_running(tmp_path, template):
    project = new_project(tmp_path, template)
    model = project_of(project).models[0].name
    edits = EDITS[template]
    user_file, reference = project / edits.user_file, project / "reference.py"
    soaks = template == "python-backend"  # --soak: a soak of the session's server after the start
    child = _spawn(project, *(["--soak", "15s"] if soaks else []))
    try:
        child.expect(r"at (127\.0\.0\.1:\d+) \(gRPC", timeout=START_TIMEOUT_S)
        http = child.match.group(1)
        child.expect("verdict: pass in [0-9.]+ s after start", timeout=START_TIMEOUT_S)
        servers = _server_processes(child.pid)
        assert len(servers) == 1, servers
        if soaks:
            child.expect(r"verdict: pass in [0-9.]+ s after the soak")
            slope = r"pass  soak memory: tritonserver: [+-][\d.]+ KiB per 1,000 requests"
            assert re.search(slope, child.before), _said(child)
            assert (project / "build" / "tbgen" / "soak" / "report.html").is_file()

        # A changed computation, the user's file and then the reference: the new code is verified once the
        # reference agrees (a save of the user's file alone fails its unit tests), with no restart.
        replace_once(user_file, *edits.changed)
        replace_once(reference, *edits.reference)
        child.expect(r"verdict: pass in [0-9.]+ s after saving [^\n]*reference\.py")
        assert re.search(rf"reloaded {model} \((from \S+, )?no restart\)", child.before), child.before
        assert _server_processes(child.pid) == servers, "the server was restarted"

        # A broken edit: its error, and the model still served (the last good version).
        replace_once(user_file, *edits.broken)
        child.expect(r"verdict: FAIL in [0-9.]+ s after saving")
        assert re.search(edits.broken_says, child.before), child.before
        assert _model_ready(http, model)

        # Fixed: passes again.
        replace_once(user_file, edits.broken[1], edits.broken[0])
        child.expect(r"verdict: pass in [0-9.]+ s after saving")
        if template == "python-backend":  # a config the server refuses: its reason, then fixed again
            config = project / "model_repository" / model / "config.pbtxt"
            replace_once(config, "max_batch_size:", "max_batch_size: -3\nmax_queue_size:")
            child.expect(r"verdict: FAIL in [0-9.]+ s after saving")
            assert re.search(rf"{model}: FAIL  load: The server at \S+ could not load model", child.before)
            replace_once(config, "max_batch_size: -3\nmax_queue_size:", "max_batch_size:")
            child.expect(r"verdict: pass in [0-9.]+ s after saving")
        assert _server_processes(child.pid) == servers, "the server was restarted"
        if template == "python-backend":  # a server that died (as a backend crash kills it): started again
            os.kill(servers[0], signal.SIGKILL)
            reference.write_text(reference.read_text())
            child.expect(r"the server had stopped \(exit status -?\d+.*restarting it")
            child.expect(r"verdict: pass in [0-9.]+ s after saving")
            assert _server_processes(child.pid) not in ([], servers)
    except pexpect.TIMEOUT:
        pytest.fail(f"tbgen dev did not print what was expected in time; it printed last:\n{_said(child)}")
    finally:
        child.sendintr()
        child.expect(pexpect.EOF, timeout=30)
        child.close()
    assert child.exitstatus == 130, (child.exitstatus, child.signalstatus)
    assert _server_processes(child.pid) == [], "Ctrl-C left the session's server running"
    if template != "python-backend":
        assert not list((project / "build").rglob("libtriton_*.dev*.so")), "library copies left behind"
