"""`tbgen env pack`: each python-backend model's requirements.txt packed into the environment its stub runs
in.

The tarball goes beside the model's config.pbtxt (``python-env.tar.gz``), and config.pbtxt gets
``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/python-env.tar.gz`` (written only when it is not set so
already, and said). Packed for the server `tbgen test` runs: this machine's embedded one by default (tbgen's
Python), or with ``docker`` inside the image (default: the release's), whose python3 is then the environment's
base.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.docker_engine import default_image
from triton_backend_gen.errors import UsageError
from triton_backend_gen.model_config.execution_env import (
    ENV_FILE,
    MODEL_DIRECTORY,
    REQUIREMENTS,
    PackedEnv,
    with_env_parameter,
)
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.execution_envs import python_models
from triton_backend_gen.scaffold.record import GeneratedFile, replace_file
from triton_backend_gen.toolchain.pyenv import pack_in_image, pack_locally


@dataclass(frozen=True)
class Packed:
    model: str
    env: PackedEnv
    target: str  # "this machine" or the image
    config_written: bool  # EXECUTION_ENV_PATH was added or changed in config.pbtxt
    log_file: Path  # pip's output


def pack_envs(
    project: Project,
    *,
    model: str | None = None,
    docker: bool = False,
    image: str | None = None,
    on_line: Callable[[str], None] | None = None,
) -> list[Packed]:
    """Pack the environment of ``model`` (default: every python model with a requirements.txt)."""
    candidates = python_models(project)
    if model is not None:
        chosen = project.model(model)
        if chosen not in candidates:
            raise UsageError(
                f"{model} is not served by the python backend, so it runs in no Python environment.",
                "Name a python model (tbgen.toml lists them), or leave --model out.",
            )
        candidates = [chosen]
    with_requirements = [m for m in candidates if (m.directory / REQUIREMENTS).is_file()]
    if not with_requirements:
        where = candidates[0].directory if candidates else project.model_repository / "MODEL"
        raise UsageError(
            "No python model of the project has a requirements.txt, so there is nothing to pack.",
            f"List the packages a model imports in {where / REQUIREMENTS} (one per line, as for pip), "
            "then run `tbgen env pack` again.",
        )
    target = (image or default_image(project.release)) if docker else "this machine"
    packed = []
    for entry in with_requirements:
        output = entry.directory / ENV_FILE
        log_file = project.runtime_dir / f"env-{entry.name}.log"
        requirements = entry.directory / REQUIREMENTS
        env = (
            pack_in_image(requirements, output, target, log_file, project.root, on_line)
            if docker
            else pack_locally(requirements, output, log_file)
        )
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
