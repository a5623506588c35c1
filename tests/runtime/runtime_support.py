"""Helpers of the runtime tests (not a conftest.py: `from conftest import` must keep meaning
tests/conftest.py).

Test modules import `embedded_install` from here to use it as a fixture.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from triton_backend_gen import discovery
from triton_backend_gen.errors import ServerError


@pytest.fixture(scope="session")
def embedded_install() -> discovery.ServerInstall:
    """The tritonserver of the nvidia-pytriton wheel (tbgen's `server` extra), or skip saying why."""
    executable = discovery._wheel_executable()
    if executable is None:
        pytest.skip(f"the embedded server is not installed ({discovery.SERVER_EXTRA_HINT})")
    try:
        return discovery.install_from_executable(executable, discovery.SOURCE_WHEEL)
    except ServerError as err:
        pytest.skip(f"the embedded server at {executable} does not run here: {err}")


def render(template: str, target: Path, **answers) -> Path:
    from triton_backend_gen.scaffold import render_new_project

    return render_new_project(template, target, answers)


def write_fake_server(root: Path, version: str) -> Path:
    """``root/bin/tritonserver``: a script that prints the option-table row a real server prints, then fails
    the way a real one does with a missing model repository."""
    executable = root / "bin" / "tritonserver"
    executable.parent.mkdir(parents=True)
    executable.write_text(
        "#!/bin/sh\n"
        f"printf '| server_id        | triton |\\n| server_version   | {version} |\\n'\n"
        "printf 'error: creating server: Internal - failed to stat file\\n' >&2\n"
        "exit 1\n"
    )
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return executable


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
