"""Packed Python environments (EXECUTION_ENV_PATH) checked against the server about to run them, before it
starts: the stub's Python, the environment's base interpreter where the server runs, numpy.

A mismatch would otherwise surface as a model that fails to load with a stub error deep in the server log.
"""

from __future__ import annotations

import os
from pathlib import Path

from triton_backend_gen.engine import CONTAINER_HOME, ROLE_CHECK, connect, ensure_image, labels, run_container
from triton_backend_gen.errors import ServerError, TbgenError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.model_config.execution_env import PackedEnv, env_file, env_problems, read_packed_env
from triton_backend_gen.runtime.container import ContainerServer
from triton_backend_gen.runtime.local import LocalServer
from triton_backend_gen.runtime.server import TritonServer

_PROBE = ("import os, sys; print('%d.%d' % sys.version_info[:2]); "
          "[print(path) for path in sys.argv[1:] if os.path.exists(path)]")


def packed_envs(repository: Path) -> list[tuple[str, Path, PackedEnv | None]]:
    """(model, tarball, what it holds or None when the file is missing) of every model with EXECUTION_ENV_PATH."""
    found = []
    for config_file in sorted(repository.glob("*/config.pbtxt")):
        try:
            tarball = env_file(load_model_config(config_file), config_file.parent)
        except TbgenError:
            continue  # a config that does not parse is the server's and validate's to report
        if tarball is not None:
            found.append((config_file.parent.name, tarball, read_packed_env(tarball) if tarball.is_file() else None))
    return found


def check_execution_envs(triton: TritonServer, repository: Path, log_dir: Path) -> None:
    """ServerError naming every packed environment ``triton`` could not run, with the command that packs it
    for that server; nothing when no model has one."""
    if isinstance(triton, ContainerServer):
        check_envs_in_image(repository, triton.image, log_dir)
    elif isinstance(triton, LocalServer) and triton.layout.python_version is not None:
        envs = packed_envs(repository)
        existing = {e.interpreter for _, _, e in envs if e is not None and os.path.exists(e.interpreter)}
        _refuse_misfits(envs, triton.layout.python_version, existing, "this machine", "")


def check_envs_in_image(repository: Path, image: str, log_dir: Path) -> None:
    """The same for a server in ``image`` (also what `tbgen package` checks before it builds on it)."""
    envs = packed_envs(repository)
    if envs:
        python, existing = _probe_image(image, [e.interpreter for _, _, e in envs if e is not None], log_dir)
        _refuse_misfits(envs, python, existing, f"image {image}", f" --docker --image {image}")


def _refuse_misfits(envs: list[tuple[str, Path, PackedEnv | None]], python: str, existing: set[str], where: str,
                    pack_options: str) -> None:
    """ServerError listing the environments that do not fit ``python`` at ``where``; the fix packs the first
    model's with ``pack_options`` (" --docker --image I" for an image)."""
    problems = []
    for model, tarball, env in envs:
        if env is None:
            problems.append(f"{model}: EXECUTION_ENV_PATH names {tarball}, which does not exist")
            continue
        problems += [f"{model}: {tarball.name}: {problem}"
                     for problem in env_problems(env, python, env.interpreter in existing, where)]
    if problems:
        first = sorted({problem.split(":")[0] for problem in problems})[0]
        raise ServerError("A model's Python environment does not fit this server:\n  " + "\n  ".join(problems),
                          f"Pack it for this server: `tbgen env pack{pack_options} --model {first}` (it builds the "
                          "environment where the server's stub will run it).")


def _probe_image(image: str, interpreters: list[str], log_dir: Path) -> tuple[str, set[str]]:
    """The python3 version of ``image`` and which of ``interpreters`` exist in it."""
    client = connect()
    ensure_image(client, image)
    log_file = log_dir / "env-probe.log"
    spec = {"image": image, "command": ["python3", "-c", _PROBE, *interpreters], "detach": True,
            "environment": {"HOME": CONTAINER_HOME}, "labels": labels(ROLE_CHECK, log_dir)}
    status = run_container(client, spec, log_file)
    lines = log_file.read_text(errors="replace").split()
    if status != 0 or not lines:
        raise ServerError(f"Could not run python3 in {image} (exit {status}); see {log_file}.",
                          "The image needs python3 for the python backend's environments.")
    return lines[0], set(lines[1:])
