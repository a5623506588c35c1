"""``tbgen package``: the project's deployable image (toolchain.image), after its packed Python environments
were checked against the base image (a mismatch would only show as a model that fails to load in the
image)."""

from __future__ import annotations

from collections.abc import Callable

from triton_backend_gen.docker_engine import default_image
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.execution_envs import check_envs_in_image
from triton_backend_gen.toolchain.image import PackageResult, build_image


def package_project(
    project: Project,
    *,
    tag: str | None = None,
    base_image: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> PackageResult:
    """Check the project's packed environments against the base image, then build the image ``tag``."""
    check_envs_in_image(
        project.model_repository, base_image or default_image(project.release), project.runtime_dir
    )
    return build_image(project, tag=tag, base_image=base_image, progress=progress)
