"""`tbgen env pack`: each python-backend model's requirements.txt packed into the environment its stub runs
in.

The tarball goes beside the model's config.pbtxt (``python-env.tar.gz``), and config.pbtxt gets
``EXECUTION_ENV_PATH = $$TRITON_MODEL_DIRECTORY/python-env.tar.gz`` (written only when it is not set so
already, and said). Packed for the server `tbgen test` runs: this machine's embedded one by default (tbgen's
Python), or with ``docker`` inside the image (default: the release's), whose python3 is then the environment's
base.

Before a tarball replaces the model's, it is unpacked the way the python backend of r26.06 on unpacks it
(libarchive's secure extraction, ``model_config.env_archive``); one that would be refused is not kept. Without
libarchive on this machine the tarball is kept unchecked, and ``Packed.unchecked`` says why.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from triton_backend_gen.docker_engine import default_image
from triton_backend_gen.errors import BuildError, UsageError
from triton_backend_gen.model_config.env_archive import LibarchiveMissing, refused_entries, summarize
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
from triton_backend_gen.versions import FEATURES

# The first release whose python backend unpacks environments with libarchive's secure extraction.
_SECURE_SINCE = FEATURES["secure_env_extraction"].since


@dataclass(frozen=True)
class Packed:
    model: str
    env: PackedEnv
    target: str  # "this machine" or the image
    config_written: bool  # EXECUTION_ENV_PATH was added or changed in config.pbtxt
    log_file: Path  # pip's output
    unchecked: str = ""  # why it was not checked against the python backend's secure unpacking ("": it was)


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
        log_file = project.runtime_dir / f"env-{entry.name}.log"
        requirements = entry.directory / REQUIREMENTS
        pack = (
            partial(
                pack_in_image,
                requirements,
                image=target,
                log_file=log_file,
                project_root=project.root,
                on_line=on_line,
            )
            if docker
            else partial(pack_locally, requirements, log_file=log_file)
        )
        env, unchecked = pack_checked(
            entry.directory / ENV_FILE,
            entry.name,
            pack,
            scratch=project.runtime_dir,
            refuse=project.release.has("secure_env_extraction"),
        )
        written = _point_config_at(entry.config_file)
        packed.append(Packed(entry.name, env, target, written, log_file, unchecked))
    return packed


def pack_checked(
    output: Path,
    model: str,
    pack: Callable[[Path], PackedEnv],
    *,
    scratch: Path | None = None,
    refuse: bool = True,
) -> tuple[PackedEnv, str]:
    """``pack`` into a hidden directory under ``scratch`` (default: beside ``output``; the project's build
    directory, so that a killed run leaves nothing in the model's directory), then keep the tarball as
    ``output`` if the python backend of ``_SECURE_SINCE`` and later unpacks it. A tarball it would refuse is
    a BuildError (``output`` left as it was) when ``refuse`` (the project's release unpacks that way), else
    kept with a warning; the second value is that warning, or why libarchive could not tell ("" when
    checked and fine)."""
    scratch = scratch or output.parent
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tbgen-env-check-", dir=scratch) as staging:
        into = Path(staging) / output.name
        env = pack(into)
        said = _refuse_insecure(into, model, refuse)
        os.replace(into, output)
    return replace(env, path=output), said


def _refuse_insecure(tarball: Path, model: str, refuse: bool) -> str:
    """BuildError when the python backend's secure unpacking refuses ``tarball`` and ``refuse``; else what to
    say ("" when it unpacks)."""
    try:
        refused = refused_entries(tarball)
    except LibarchiveMissing as err:
        return (
            f"{model}'s environment was not checked against the python backend's secure unpacking "
            f"({_SECURE_SINCE} and later): {err.message}; {err.hint}"
        )
    if refused and not refuse:
        return (
            f"{model}'s environment unpacks in the project's release, but the python backend of "
            f"{_SECURE_SINCE} and later would refuse it: {summarize(refused)}"
        )
    if refused:
        raise BuildError(
            f"The packed environment of {model} would not unpack in the python backend of {_SECURE_SINCE} "
            f"and later (libarchive's secure extraction): {summarize(refused)}. It was not kept.",
            "A package installed a file outside the environment, or through a link: find it in pip's log and "
            "pin another version in requirements.txt, then run `tbgen env pack` again.",
        )
    return ""


def _point_config_at(config_file: Path) -> bool:
    """Set EXECUTION_ENV_PATH in ``config_file`` to the packed environment; whether the file changed."""
    text = config_file.read_text()
    updated = with_env_parameter(text, f"{MODEL_DIRECTORY}/{ENV_FILE}")
    if updated == text:
        return False
    replace_file(config_file, GeneratedFile(updated.encode()))
    return True
