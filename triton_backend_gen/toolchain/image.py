"""The project's deployable image (`tbgen package`): its Dockerfile built through the docker SDK.

The build context is the project without what its ``.dockerignore`` excludes. For a C++ project whose release
is in tbgen's source cache, Triton's core/common/backend (and googletest) are added to the context as
``third_party/triton/``, where the Dockerfile's build stage finds them, so the image builds without the
network (the tools it needs must then be in the base image). ``BASE_IMAGE`` picks another base image of the
NGC layout. The build's output goes to ``<project>/build/tbgen/package.log``.

A C++ project with third-party libraries (``cmake/libraries/*.cmake``) is built on this machine first
(`tbgen build`): their headers are here, not in the image. The installed backend directory plus the shared
objects the base image lacks (toolchain.linkage decides by running ldd in the image) go into the context as
``third_party/backend/``, which the Dockerfile's build stage takes as it is instead of compiling, so they
end up beside the backend in the image. The backend then holds this machine's build: this machine must be of
the image's distribution (``--test`` proves the image serves it).
"""

from __future__ import annotations

import fnmatch
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from triton_backend_gen.docker_engine import LABEL, PROJECT_LABEL, connect, default_image, ensure_image
from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import Project
from triton_backend_gen.toolchain.build import build_batching
from triton_backend_gen.toolchain.ensure_built import ensure_built
from triton_backend_gen.toolchain.libraries import library_files
from triton_backend_gen.toolchain.linkage import stage_backend
from triton_backend_gen.toolchain.sources import cached_sources

DOCKERFILE = "Dockerfile"
DOCKERIGNORE = ".dockerignore"
VENDORED = Path("third_party") / "triton"
PREBUILT = Path("third_party") / "backend"  # a backend built on this machine, with what the image lacks
LOG_NAME = "package.log"
STAGING_NAME = "package-backend"  # under the project's runtime directory
STAGING_LOG = "package-ldd.log"
CONTEXT_IN_MEMORY = 256 * 1024 * 1024


@dataclass(frozen=True)
class PackageResult:
    tag: str
    image_id: str
    log_file: Path
    offline: bool  # Triton's sources came from tbgen's cache
    prebuilt: bool = False  # the backend was built on this machine and put into the context
    carried: tuple[str, ...] = ()  # the shared objects put beside it (those the base image lacks)


def default_tag(project: Project) -> str:
    return f"{project.name.lower()}:latest"


def ignore_patterns(project_root: Path) -> list[str]:
    """The project's .dockerignore patterns ("/build/" -> "build"); comments and blank lines dropped."""
    path = project_root / DOCKERIGNORE
    if not path.is_file():
        return []
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            patterns.append(line.strip("/"))
    return patterns


def ignored(relative: Path, patterns: list[str]) -> bool:
    """Whether ``relative`` (or a directory above it) matches a pattern: the whole path, or any one name
    for a pattern without a slash (as .gitignore reads it)."""
    text = relative.as_posix()
    for pattern in patterns:
        if fnmatch.fnmatchcase(text, pattern):
            return True
        if "/" not in pattern and any(fnmatch.fnmatchcase(part, pattern) for part in relative.parts):
            return True
        if any(
            fnmatch.fnmatchcase(Path(*relative.parts[:n]).as_posix(), pattern)
            for n in range(1, len(relative.parts))
        ):
            return True
    return False


def context_files(project_root: Path) -> Iterator[tuple[Path, Path]]:
    """(file on disk, its path in the context) for every file of the build context."""
    patterns = ignore_patterns(project_root)
    for path in sorted(project_root.rglob("*")):
        relative = path.relative_to(project_root)
        if path.is_file() and not ignored(relative, patterns):
            yield path, relative


def vendored_sources(project: Project) -> Iterator[tuple[Path, Path]]:
    """Triton's cached sources for the project's release, as third_party/triton/<repo>/... (no .git)."""
    if not project.is_cpp or (project.root / VENDORED / "core").is_dir():
        return
    sources = cached_sources(project.release.branch)
    if sources is None:
        return
    for repo in ("core", "common", "backend", "googletest"):
        root = sources / repo
        for path in sorted(root.rglob("*")) if root.is_dir() else ():
            relative = path.relative_to(root)
            if path.is_file() and ".git" not in relative.parts:
                yield path, VENDORED / repo / relative


def prebuilt_files(staging: Path) -> Iterator[tuple[Path, Path]]:
    """The staged backend directory, as third_party/backend/..."""
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            yield path, PREBUILT / path.relative_to(staging)


def needs_host_build(project: Project) -> bool:
    """Whether `tbgen package` builds the backend on this machine: a C++ project that links third-party
    libraries (their headers and libraries are here, not in the image's build stage)."""
    return project.is_cpp and bool(library_files(project.root))


def build_context(project: Project, staging: Path | None = None) -> tuple[IO[bytes], bool]:
    """The build context as an uncompressed tar (in memory up to CONTEXT_IN_MEMORY bytes, then in a temporary
    file: carried framework libraries are large), and whether Triton's sources are in it. With ``staging`` (a
    backend built here), that directory goes in as third_party/backend/ and the sources stay out."""
    buffer = tempfile.SpooledTemporaryFile(max_size=CONTEXT_IN_MEMORY)  # noqa: SIM115 - returned, closed by the caller
    vendored = list(vendored_sources(project)) if staging is None else []
    extra = vendored if staging is None else list(prebuilt_files(staging))
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, name in [*context_files(project.root), *extra]:
            tar.add(path, arcname=name.as_posix(), recursive=False)
    buffer.seek(0)
    return buffer, bool(vendored)


def stage_host_build(
    project: Project, client: Any, image: str, progress: Callable[[str], None]
) -> tuple[Path, dict[str, str]]:
    """Build the backend on this machine (`tbgen build`, checked against a local server) and stage it with the
    shared objects ``image`` lacks; the staging directory and what was carried (soname -> host path)."""
    progress(
        f"building {project.library.name} on this machine (its libraries' headers are here): `tbgen build`"
    )
    ensure_built(project, None)
    progress(f"resolving its libraries in {image} (ldd in a container)")
    staging = project.runtime_dir / STAGING_NAME
    carried = stage_backend(
        client,
        image,
        project.installed_backend_dir,
        project.backend,
        project.library.name,
        staging,
        project.root,
        project.runtime_dir / STAGING_LOG,
    )
    for name, source in carried.items():
        progress(f"carrying {name} ({source}) beside the backend")
    return staging, carried


def _follow_build(stream, log, progress: Callable[[str], None]) -> tuple[str, list[str]]:
    """(the image ID, the errors) of the Docker engine's build stream, written to ``log`` as it comes, each
    Dockerfile step said to ``progress``."""
    image_id, errors = "", []
    for chunk in stream:
        text = chunk.get("stream") or ""
        if "error" in chunk:
            errors.append(chunk["error"].strip())
            text = chunk["error"]
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
        log.write(text)
        for line in text.splitlines():
            if line.startswith("Step "):
                progress(line)
    return image_id, errors


def build_image(
    project: Project,
    *,
    tag: str | None = None,
    base_image: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> PackageResult:
    """Build the project's Dockerfile into the image ``tag`` (default: ``<project>:latest``); a C++ project
    with third-party libraries is built on this machine first (see the module)."""
    if not (project.root / DOCKERFILE).is_file():
        raise ServerError(
            f"{project.root / DOCKERFILE} does not exist.",
            "Restore it from version control (git checkout -- Dockerfile); a project generated before the "
            "Dockerfile was generated gets one from `tbgen update`.",
        )
    tag = tag or default_tag(project)
    client = connect()
    if base_image:
        ensure_image(client, base_image)
    staging: Path | None = None
    carried: dict[str, str] = {}
    if needs_host_build(project):
        image = base_image or default_image(project.release)
        ensure_image(client, image)
        staging, carried = stage_host_build(project, client, image, progress)  # its build: batching/ too
    else:
        build_batching(project)  # the image copies model_repository/, the models' batchstrategy.so included
    context, offline = build_context(project, staging)
    log_file = project.runtime_dir / LOG_NAME
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with context, log_file.open("w") as log:
        stream = client.api.build(
            fileobj=context,
            custom_context=True,
            tag=tag,
            rm=True,
            forcerm=True,
            decode=True,
            buildargs={"BASE_IMAGE": base_image} if base_image else None,
            labels={LABEL: "1", PROJECT_LABEL: str(project.root)},
        )
        image_id, errors = _follow_build(stream, log, progress)
    if errors:
        hint = f"Full log: {log_file}"
        if not base_image:
            hint += (
                f". The base image must be on the engine (docker pull {default_image(project.release)}) or "
                "given with --base-image."
            )
        raise ServerError(f"docker build of {project.root} failed: {errors[-1]}", hint)
    if not image_id:
        image_id = client.images.get(tag).id
    return PackageResult(
        tag, image_id, log_file, offline, prebuilt=staging is not None, carried=tuple(carried)
    )
