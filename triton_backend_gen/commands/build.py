"""`tbgen build` and `tbgen check`: build the project (toolchain), then check the library against a server (or, for
`tbgen check --docker`, resolve its libraries in a container image: toolchain.linkage).

The toolchain builds and checks what it is given; finding the server to check against is done here, so
that toolchain never looks for servers (discovery does, for the commands).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from triton_backend_gen.discovery import ServerInstall, find_tritonserver
from triton_backend_gen.engine import connect, default_image, ensure_image
from triton_backend_gen.errors import BuildError, ServerError, UsageError
from triton_backend_gen.project import Project, load_project
from triton_backend_gen.toolchain.build import BuildResult, Progress, build_kind, build_project
from triton_backend_gen.toolchain.linkage import check_in_image
from triton_backend_gen.toolchain.symbols import CheckReport, Finding, check_library, export_findings

IMAGE_CHECK_LOG = "ldd-in-image.log"


def build(project: Project, *, server: Path | None = None, gpu: bool | None = None, build_type: str = "Release",
          jobs: int | None = None, clean: bool = False, progress: Progress | None = None,
          sanitize: tuple[str, ...] = (), docker: bool = False, image: str | None = None) -> BuildResult:
    """`tbgen build`: build ``project``; a local C++ build's library is then checked against ``server`` (or the
    server tbgen finds)."""
    result = build_project(project, gpu=gpu, build_type=build_type, jobs=jobs, clean=clean, progress=progress,
                           sanitize=sanitize, docker=docker, image=image)
    if build_kind(project) != "cpp" or docker or result.artifact is None:
        return result
    install, notes = server_for_check(server)
    findings = (*check_library(result.artifact, install, project.release), *notes)
    return dataclasses.replace(result, findings=findings)


def build_if_needed(project: Project, server: Path | None, sanitize: tuple[str, ...] = (), *, docker: bool = False,
                    image: str | None = None) -> None:
    """Bring the project's build up to date before a run (a no-op check, about a second, when it is).

    C++ projects are always built (they cannot run otherwise). A python project's native extension is rebuilt
    once it has been built (so edits to it are tested); never built, the model runs its numpy fallback."""
    kind = build_kind(project)
    if kind is None or (kind == "native" and not (project.native_build_dir / "CMakeCache.txt").is_file()):
        return
    if kind == "native" and docker:
        return  # built for this machine's Python; the container's python backend uses it as it is
    result = build(project, server=server, sanitize=sanitize, docker=docker, image=image)
    errors = [f.message for f in result.errors]
    if errors:
        raise BuildError("The built library would not load: " + "; ".join(errors),
                         f"Run `tbgen check {project.root}` for the details.")


def check(target: Path, server: Path | None = None, *, docker: bool = False, image: str | None = None) -> CheckReport:
    """`tbgen check`: the built library of the project at ``target`` (or the library file ``target`` itself),
    against a local server, or with ``docker`` in a container of ``image`` (default: the release's NGC image)."""
    target = Path(target)
    project = None
    if target.is_file() and target.suffix == ".so":
        library = target
    else:
        project = load_project(target)
        if not project.is_cpp:
            raise UsageError(f"{project.name} is a python project: it has no C++ backend library to check.",
                             "`tbgen check` applies to C++ backends (cpp-backend, decoupled-backend language=cpp).")
        library = project.library
        if not library.is_file():
            raise BuildError(f"{library} does not exist: the backend is not built.", f"Run `tbgen build {target}`.")
    release = project.release if project is not None else None
    if docker:
        return check_in_image_of(library, project, image)
    install, notes = server_for_check(server)
    findings = (*check_library(library, install, release), *notes)
    return CheckReport(library, install.describe() if install else None, findings)


def check_in_image_of(library: Path, project: Project | None, image: str | None) -> CheckReport:
    """`tbgen check --docker`: the library's exports, and every library it needs resolved in ``image`` as the
    server there loads it."""
    if image is None and project is None:
        raise UsageError(f"{library.name} is a library file: tbgen cannot tell which release's image to check it in.",
                         "Name the image with --image, or check the project's library with `tbgen check --docker` in the project.")
    image = image or default_image(project.release)
    backend = project.backend if project is not None else library.stem.removeprefix("libtriton_")
    client = connect()
    ensure_image(client, image)
    with tempfile.TemporaryDirectory(prefix="tbgen-check-") as scratch:
        log_file = project.runtime_dir / IMAGE_CHECK_LOG if project is not None else Path(scratch) / IMAGE_CHECK_LOG
        labelled = project.root if project is not None else library.parent
        findings = (*export_findings(library),
                    *check_in_image(client, image, library, backend, labelled, log_file))
    return CheckReport(library, f"the image {image}", findings)


def server_for_check(explicit: Path | None) -> tuple[ServerInstall | None, list[Finding]]:
    """The server to check against: ``explicit`` (an error when unusable), else the first found, else None
    with a note saying the server part is skipped."""
    if explicit is not None:
        return find_tritonserver(explicit), []
    try:
        return find_tritonserver(), []
    except ServerError:
        return None, [Finding("note", "no tritonserver found: the library's imports were not checked "
                                      "against a server (pass --server PATH)")]
