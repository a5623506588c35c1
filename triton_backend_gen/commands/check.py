"""`tbgen check`: is a built backend library one that the target tritonserver loads? Its exports, its imports
against a local server, or (``docker``) every library it needs resolved in a container of the release's
image."""

from __future__ import annotations

import tempfile
from pathlib import Path

from triton_backend_gen.docker_engine import connect, default_image, ensure_image
from triton_backend_gen.errors import BuildError, UsageError
from triton_backend_gen.findings import CheckReport
from triton_backend_gen.model_config import release_rule_findings
from triton_backend_gen.project import Project
from triton_backend_gen.toolchain.ensure_built import batch_strategy_findings, server_for_check
from triton_backend_gen.toolchain.linkage import check_in_image
from triton_backend_gen.toolchain.symbols import check_library, export_findings

IMAGE_CHECK_LOG = "ldd-in-image.log"


def check(
    target: Project | Path, server: Path | None = None, *, docker: bool = False, image: str | None = None
) -> CheckReport:
    """The built library of the project ``target`` (or the library file ``target`` itself), against a local
    server, or with ``docker`` in a container of ``image`` (default: the release's NGC image); for a project,
    also its models' config parameters that its release refuses (`tbgen validate` reports them too)."""
    project = target if isinstance(target, Project) else None
    if project is not None and not project.is_cpp:
        return _check_batching_only(project, server, docker)
    if project is None:
        library = Path(target)
    else:
        library = project.library
        if not library.is_file():
            raise BuildError(
                f"{library} does not exist: the backend is not built.", f"Run `tbgen build {project.root}`."
            )
    install = None
    if docker:
        report = check_in_image_of(library, project, image)
    else:
        install, notes = server_for_check(server)
        findings = (
            *check_library(library, install, project.release if project is not None else None),
            *notes,
        )
        report = CheckReport(str(library), list(findings), against=install.describe() if install else "")
    if project is not None:
        report.findings += batch_strategy_findings(project, install)
        report.findings += release_rule_findings(project)
    return report


def _check_batching_only(project: Project, server: Path | None, docker: bool) -> CheckReport:
    """A python project's one kind of C++ library: its models' batching strategies."""
    if not project.batched_models or docker:
        raise UsageError(
            f"{project.name} is a python project: it has no C++ backend library to check"
            + (" in an image." if project.batched_models else ", nor a model with a batching strategy."),
            "`tbgen check` applies to C++ backends (cpp-backend, decoupled-backend language=cpp) and to "
            "batching strategies (batching/), which it checks against a local server.",
        )
    install, notes = server_for_check(server)
    findings = [*batch_strategy_findings(project, install), *notes, *release_rule_findings(project)]
    return CheckReport(str(project.batching_dir), findings, against=install.describe() if install else "")


def check_in_image_of(library: Path, project: Project | None, image: str | None) -> CheckReport:
    """The library's exports, and every library it needs resolved in ``image`` as the server there loads
    it."""
    if image is None and project is None:
        raise UsageError(
            f"{library.name} is a library file: tbgen cannot tell which release's image to check it in.",
            "Name the image with --image, or check the project's library with `tbgen check --docker` "
            "in the project.",
        )
    image = image or default_image(project.release)
    backend = project.backend if project is not None else library.stem.removeprefix("libtriton_")
    client = connect()
    ensure_image(client, image)
    with tempfile.TemporaryDirectory(prefix="tbgen-check-") as scratch:
        log_file = (
            project.runtime_dir / IMAGE_CHECK_LOG if project is not None else Path(scratch) / IMAGE_CHECK_LOG
        )
        labelled = project.root if project is not None else library.parent
        findings = (
            *export_findings(library, project.release if project is not None else None),
            *check_in_image(client, image, library, backend, labelled, log_file),
        )
    return CheckReport(str(library), list(findings), against=f"the image {image}")
