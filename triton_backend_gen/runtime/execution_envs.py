"""Packed Python environments (EXECUTION_ENV_PATH) checked against the server about to run them, before it
starts: the stub's Python, the environment's base interpreter where the server runs, numpy; and the modules
each python model imports that its environment (or, without one, the server's Python) lacks (`tbgen doctor`).

A mismatch would otherwise surface as a model that fails to load with a stub error deep in the server log.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.docker_engine import (
    CONTAINER_HOME,
    ROLE_CHECK,
    connect,
    ensure_image,
    labels,
    run_container,
)
from triton_backend_gen.errors import ServerError, TbgenError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.model_config.execution_env import (
    PackedEnv,
    env_file,
    env_problems,
    model_imports,
    read_packed_env,
    unsatisfied_imports,
)
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.runtime.container import ContainerServer
from triton_backend_gen.runtime.local import LocalServer
from triton_backend_gen.runtime.server import TritonServer

_PROBE = (
    "import os, sys; print('%d.%d' % sys.version_info[:2]); "
    "[print(path) for path in sys.argv[1:] if os.path.exists(path)]"
)


def packed_envs(repository: Path) -> list[tuple[str, Path, PackedEnv | None]]:
    """(model, tarball, what it holds or None when the file is missing) of every model with
    EXECUTION_ENV_PATH."""
    found = []
    for config_file in sorted(repository.glob("*/config.pbtxt")):
        try:
            tarball = env_file(load_model_config(config_file), config_file.parent)
        except TbgenError:
            continue  # a config that does not parse is the server's and validate's to report
        if tarball is not None:
            found.append(
                (config_file.parent.name, tarball, read_packed_env(tarball) if tarball.is_file() else None)
            )
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


def _refuse_misfits(
    envs: list[tuple[str, Path, PackedEnv | None]],
    python: str,
    existing: set[str],
    where: str,
    pack_options: str,
) -> None:
    """ServerError listing the environments that do not fit ``python`` at ``where``; the fix packs the first
    model's with ``pack_options`` (" --docker --image I" for an image)."""
    problems = []
    for model, tarball, env in envs:
        if env is None:
            problems.append(f"{model}: EXECUTION_ENV_PATH names {tarball}, which does not exist")
            continue
        problems += [
            f"{model}: {tarball.name}: {problem}"
            for problem in env_problems(env, python, env.interpreter in existing, where)
        ]
    if problems:
        first = sorted({problem.split(":")[0] for problem in problems})[0]
        raise ServerError(
            "A model's Python environment does not fit this server:\n  " + "\n  ".join(problems),
            f"Pack it for this server: `tbgen env pack{pack_options} --model {first}` (it builds the "
            "environment where the server's stub will run it).",
        )


def _probe_image(image: str, interpreters: list[str], log_dir: Path) -> tuple[str, set[str]]:
    """The python3 version of ``image`` and which of ``interpreters`` exist in it."""
    client = connect()
    ensure_image(client, image)
    log_file = log_dir / "env-probe.log"
    spec = {
        "image": image,
        "command": ["python3", "-c", _PROBE, *interpreters],
        "detach": True,
        "environment": {"HOME": CONTAINER_HOME},
        "labels": labels(ROLE_CHECK, log_dir),
    }
    status = run_container(client, spec, log_file)
    lines = log_file.read_text(errors="replace").split()
    if status != 0 or not lines:
        raise ServerError(
            f"Could not run python3 in {image} (exit {status}); see {log_file}.",
            "The image needs python3 for the python backend's environments.",
        )
    return lines[0], set(lines[1:])


def python_models(project: Project) -> list[ModelEntry]:
    """The project's models that the python backend serves."""
    return [
        m
        for m in project.models
        if m.config_file.is_file() and load_model_config(m.config_file).backend == "python"
    ]


@dataclass(frozen=True)
class ImportFinding:
    model: str
    missing: list[str]  # modules model.py imports that its environment (or tbgen's Python) lacks
    env: Path | None  # the packed environment checked, or None: tbgen's own Python (the local stub's)


def import_findings(project: Project, available_here: Callable[[str], bool]) -> list[ImportFinding]:
    """For each python model: the modules that its model.py and the modules beside it (the user's compute.py)
    import and it will not find: in its packed environment when it has one, else where ``available_here``
    (tbgen's Python, whose stub the local server runs) looks."""
    findings = []
    for entry in python_models(project):
        sources = sorted(entry.directory.glob("[0-9]*/model.py"))
        if not sources:
            continue
        local = {p.stem for p in sources[0].parent.glob("*.py")} | {
            p.name for p in sources[0].parent.iterdir() if p.is_dir()
        }
        # model.py and the user's compute.py beside it (and any module of theirs there) import from the env.
        imports = set().union(*(model_imports(source) for source in sorted(sources[0].parent.glob("*.py"))))
        tarball = env_file(load_model_config(entry.config_file), entry.directory)
        if tarball is not None and tarball.is_file():
            missing = unsatisfied_imports(imports, read_packed_env(tarball).modules, local)
        else:
            tarball = None  # named but not packed yet: checked against the server's Python, as without one
            missing = [m for m in unsatisfied_imports(imports, set(), local) if not available_here(m)]
        findings.append(ImportFinding(entry.name, missing, tarball))
    return findings
