"""Packing a python-backend model's requirements.txt into the environment tarball the python backend unpacks
(EXECUTION_ENV_PATH), on this machine or inside the server's image.

One script does it in both places: a venv made without pip (images often lack ensurepip), the packages
installed by tbgen's own pip (put on PYTHONPATH alone, so nothing else of tbgen's leaks in), and venv-pack
writing the gzip tarball. On this machine the venv's base interpreter is the one tbgen runs on (whose stub the
local server uses); in an image it is the image's python3, so the environment's interpreter path exists there.
The container reaches the package index as pip is configured here (its settings passed as PIP_* variables,
local index directories mounted read-only). ``pack_script`` and ``pip_settings`` only decide.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from triton_backend_gen.docker_engine import (
    CONTAINER_HOME,
    ROLE_BUILD,
    Mount,
    connect,
    ensure_image,
    run_container,
    script_spec,
)
from triton_backend_gen.errors import BuildError, UsageError
from triton_backend_gen.model_config.execution_env import PackedEnv, read_packed_env

TOOLS = ("pip", "venv_pack")
CONTAINER_TOOLS = Path("/tmp/tbgen-tools")
# The python backend's stub of releases up to 24.x is built against numpy 1; a requirements.txt that names
# numpy decides for itself.
NUMPY = "numpy<2"
DEPLOY_EXTRA = "pip install 'triton-backend-gen[deploy]'"
_CONFIG_LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[^=]+)='(?P<value>.*)'$")


def tool_dirs() -> dict[str, Path]:
    """The package directories of pip and venv-pack in tbgen's Python; UsageError naming the extra
    otherwise."""
    found = {}
    for name in TOOLS:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise UsageError(
                f"`tbgen env pack` needs {name.replace('_', '-')} in tbgen's Python, and it is missing.",
                f"{DEPLOY_EXTRA} (or pip install {name.replace('_', '-')}).",
            )
        found[name] = Path(next(iter(spec.submodule_search_locations)))
    return found


def base_interpreter() -> Path:
    """The interpreter tbgen's Python was made from (a venv's base): the local environment's base."""
    return Path(getattr(sys, "_base_executable", sys.executable)).resolve()


def pack_script(python: str, requirements: Path, output: Path, work: Path, tools: Path) -> str:
    """The shell script that packs ``requirements`` into ``output`` with ``python``, building in ``work``."""
    env = work / "env"
    mentions_numpy = re.search(r"^\s*numpy\b", requirements.read_text(errors="replace"), re.MULTILINE)
    numpy = [] if mentions_numpy else [NUMPY]
    with_tools = f"PYTHONPATH={shlex.quote(str(tools))} {shlex.quote(str(env / 'bin' / 'python'))}"
    return "\n".join(
        [
            "set -e",
            f"{shlex.quote(python)} -m venv --without-pip {shlex.quote(str(env))}",
            f"{with_tools} -m pip install --no-cache-dir --disable-pip-version-check "
            "--no-warn-script-location " + shlex.join([*numpy, "-r", str(requirements)]),
            f"{with_tools} -m venv_pack --prefix {shlex.quote(str(env))} --output "
            f"{shlex.quote(str(output))} --force",
        ]
    )


def pip_settings(lines: list[str]) -> tuple[dict[str, str], list[Path]]:
    """From `pip config list` output: the PIP_* variables that carry the settings into a container, and the
    local paths they name (index directories, find-links, certificates) to mount there."""
    variables = _pip_variables(lines)
    paths = []
    for value in variables.values():
        for path in filter(None, map(_local_path, value.split())):
            if path not in paths:
                paths.append(path)
    return variables, paths


def _pip_variables(lines: list[str]) -> dict[str, str]:
    """`pip config list`'s settings as PIP_* variables, then this environment's own PIP_* (which win, as in
    pip)."""
    variables: dict[str, str] = {}
    for line in lines:
        match = _CONFIG_LINE.match(line.strip())
        if match:
            variables["PIP_" + match["key"].upper().replace("-", "_")] = match["value"]
    variables.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    return variables


def _local_path(token: str) -> Path | None:
    """The existing local path one word of a pip setting names (a path or a file:// URL), or None."""
    path = Path(token.removeprefix("file://"))
    if token.startswith("file://") and path.name == "simple":
        path = path.parent  # a local index's pages link to files beside it (../files/...)
    return path if path.is_absolute() and path.exists() else None


def pack_locally(requirements: Path, output: Path, log_file: Path) -> PackedEnv:
    """Pack ``requirements`` for the python backend on this machine (the stub of tbgen's Python)."""
    tools = tool_dirs()
    with tempfile.TemporaryDirectory(prefix="tbgen-env-") as scratch, _beside(output) as partial:
        work = Path(scratch)
        (work / "tools").mkdir()
        for name, directory in tools.items():
            (work / "tools" / name).symlink_to(directory)
        script = pack_script(str(base_interpreter()), requirements, partial, work, work / "tools")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        with log_file.open("wb") as log:
            status = subprocess.run(
                ["bash", "-c", script], stdout=log, stderr=subprocess.STDOUT, check=False, env=clean
            ).returncode
        _raise_on_failure(status, log_file, "on this machine")
    return read_packed_env(output)


@contextmanager
def _beside(output: Path) -> Iterator[Path]:
    """A path in a hidden directory beside ``output`` (same file system), renamed to ``output`` when the block
    ends without an error (never half-written); the directory is removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix=".tbgen-env-", dir=output.parent))
    try:
        yield directory / output.name
        os.chmod(directory / output.name, 0o644)  # read by a server that may run as another user
        os.replace(directory / output.name, output)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def pack_in_image(
    requirements: Path,
    output: Path,
    image: str,
    log_file: Path,
    project_root: Path,
    on_line: Callable[[str], None] | None = None,
) -> PackedEnv:
    """Pack ``requirements`` inside ``image`` with its python3, so that the environment's base interpreter is
    the image's own; the container runs as the invoking user and is removed afterwards."""
    tools = tool_dirs()
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    variables, paths = pip_settings(listed)
    with _beside(output) as partial:
        script = pack_script(
            "python3", requirements, partial, Path(CONTAINER_HOME) / "tbgen-env", CONTAINER_TOOLS
        )
        mounts = [
            Mount(requirements.parent, requirements.parent),
            Mount(partial.parent, partial.parent, read_only=False),
            *(Mount(directory, CONTAINER_TOOLS / name) for name, directory in tools.items()),
            *(Mount(path, path) for path in paths),
        ]
        spec = script_spec(image, script, mounts, ROLE_BUILD, project_root, environment=variables)
        client = connect()
        ensure_image(client, image)
        status = run_container(client, spec, log_file, on_line)
        _raise_on_failure(status, log_file, f"in {image}")
    return read_packed_env(output)


def _raise_on_failure(status: int, log_file: Path, where: str) -> None:
    if status == 0:
        return
    lines = log_file.read_text(errors="replace").strip().splitlines()
    errors = [line for line in lines if line.startswith("ERROR") or "Error" in line] or lines[-3:]
    raise BuildError(
        f"Packing the environment {where} failed: {' '.join(errors[:3])}\nFull log: {log_file}",
        "Fix requirements.txt (a package or version that does not exist for this Python?), then run "
        "`tbgen env pack` again.",
    )
