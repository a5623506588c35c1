"""`tbgen env pack`: each python-backend model's requirements.txt packed into the environment its stub runs in,
and what `tbgen doctor` says about the models' imports.

The tarball goes beside the model's config.pbtxt (``python-env.tar.gz``), and config.pbtxt gets
``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/python-env.tar.gz`` (written only when it is not set so already,
and said). Packed for the server `tbgen test` runs: this machine's embedded one by default (tbgen's Python), or
with ``docker`` inside the image (default: the release's), whose python3 is then the environment's base.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.engine import default_image
from triton_backend_gen.errors import UsageError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.model_config.execution_env import (
    ENV_FILE,
    MODEL_DIRECTORY,
    REQUIREMENTS,
    PackedEnv,
    env_file,
    model_imports,
    read_packed_env,
    unsatisfied_imports,
    with_env_parameter,
)
from triton_backend_gen.project import ModelEntry, Project
from triton_backend_gen.scaffold.record import GeneratedFile, replace_file
from triton_backend_gen.toolchain.pyenv import pack_in_image, pack_locally


@dataclass(frozen=True)
class Packed:
    model: str
    env: PackedEnv
    target: str  # "this machine" or the image
    config_written: bool  # EXECUTION_ENV_PATH was added or changed in config.pbtxt
    log_file: Path  # pip's output


def python_models(project: Project) -> list[ModelEntry]:
    """The project's models that the python backend serves."""
    return [m for m in project.models
            if m.config_file.is_file() and load_model_config(m.config_file).backend == "python"]


def pack_envs(project: Project, *, model: str | None = None, docker: bool = False, image: str | None = None,
              on_line: Callable[[str], None] | None = None) -> list[Packed]:
    """Pack the environment of ``model`` (default: every python model with a requirements.txt)."""
    candidates = python_models(project)
    if model is not None:
        chosen = project.model(model)
        if chosen not in candidates:
            raise UsageError(f"{model} is not served by the python backend, so it runs in no Python environment.",
                             "Name a python model (tbgen.toml lists them), or leave --model out.")
        candidates = [chosen]
    with_requirements = [m for m in candidates if (m.directory / REQUIREMENTS).is_file()]
    if not with_requirements:
        where = candidates[0].directory if candidates else project.model_repository / "MODEL"
        raise UsageError("No python model of the project has a requirements.txt, so there is nothing to pack.",
                         f"List the packages a model imports in {where / REQUIREMENTS} (one per line, as for pip), "
                         "then run `tbgen env pack` again.")
    target = (image or default_image(project.release)) if docker else "this machine"
    packed = []
    for entry in with_requirements:
        output = entry.directory / ENV_FILE
        log_file = project.runtime_dir / f"env-{entry.name}.log"
        requirements = entry.directory / REQUIREMENTS
        env = (pack_in_image(requirements, output, target, log_file, project.root, on_line) if docker
               else pack_locally(requirements, output, log_file))
        packed.append(Packed(entry.name, env, target, _point_config_at(entry.config_file), log_file))
    return packed


def _point_config_at(config_file: Path) -> bool:
    """Set EXECUTION_ENV_PATH in ``config_file`` to the packed environment; whether the file changed."""
    text = config_file.read_text()
    updated = with_env_parameter(text, f"{MODEL_DIRECTORY}/{ENV_FILE}")
    if updated == text:
        return False
    replace_file(config_file, GeneratedFile(updated.encode()))
    return True


_MISSING_MODULE = re.compile(r"No module named '([^'.]+)")
_GLIBCXX = re.compile(r"(GLIBCXX_[0-9.]+)' not found")


def load_failure_hints(log: str, *, docker: bool) -> list[str]:
    """Known traps behind a python model that failed to load, from the server log: a module the stub's Python
    lacks (its requirements.txt and `tbgen env pack`), a native wheel built for a newer libstdc++."""
    where = " --docker" if docker else ""
    hints = [f"A model imports {module}, which the server's Python lacks: list it in the model's {REQUIREMENTS} "
             f"(model_repository/MODEL/{REQUIREMENTS}) and run `tbgen env pack{where}`."
             for module in sorted(set(_MISSING_MODULE.findall(log)))]
    hints += [f"A native library in the model's environment needs {symbol}, which the server's libstdc++ lacks: "
              "pack the environment inside the server's image (`tbgen env pack --docker`), where pip picks wheels "
              "built for it." for symbol in sorted(set(_GLIBCXX.findall(log)))[:1]]
    return hints


@dataclass(frozen=True)
class ImportFinding:
    model: str
    missing: list[str]  # modules model.py imports that its environment (or tbgen's Python) lacks
    env: Path | None  # the packed environment checked, or None: tbgen's own Python (the local stub's)


def import_findings(project: Project, available_here: Callable[[str], bool]) -> list[ImportFinding]:
    """For each python model: the modules its model.py imports that it will not find: in its packed environment
    when it has one, else where ``available_here`` (tbgen's Python, whose stub the local server runs) looks."""
    findings = []
    for entry in python_models(project):
        sources = sorted(entry.directory.glob("[0-9]*/model.py"))
        if not sources:
            continue
        local = {p.stem for p in sources[0].parent.glob("*.py")} | {p.name for p in sources[0].parent.iterdir()
                                                                      if p.is_dir()}
        imports = model_imports(sources[0])
        tarball = env_file(load_model_config(entry.config_file), entry.directory)
        if tarball is not None and tarball.is_file():
            missing = unsatisfied_imports(imports, read_packed_env(tarball).modules, local)
        else:
            tarball = None  # named but not packed yet: checked against the server's Python, as without one
            missing = [m for m in unsatisfied_imports(imports, set(), local) if not available_here(m)]
        findings.append(ImportFinding(entry.name, missing, tarball))
    return findings
