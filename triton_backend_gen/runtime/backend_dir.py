"""Assemble the backend directory one server run uses.

    <dest>/backends/<name> -> the server's own backends (symlinks)
    <dest>/backends/python/   copies of the python backend, with the stub for tbgen's Python
    <dest>/backends/<backend> -> the project's built backend (C++) or its Python-based backend
    <dest>/lib/libtritonserver.so -> the server's library (the wheel's file has a hashed name)

The python backend is copied rather than linked: the backend looks for its stub beside the library as
the server loaded it, and the stub must be the one built for the interpreter whose packages the models
import. The stub then needs the server's bundled libraries (LD_LIBRARY_PATH) and that interpreter's bin
directory first on PATH, or it starts a Python without the venv's numpy.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.discovery import STUB_NAME, ServerInstall, python_version_of
from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import BackendKind, Project
from triton_backend_gen.runtime.sanitizers import (
    leak_check_library,
    sanitizer_environment,
    sanitizer_runtimes,
)

PYTHON_BACKEND = "python"


@dataclass(frozen=True)
class BackendLayout:
    """What a server run needs from the assembled tree: its backend directory and environment."""

    backend_dir: Path
    library_path: tuple[Path, ...]  # for LD_LIBRARY_PATH, in order
    path_prefix: tuple[Path, ...]  # put first on PATH (the interpreter's bin directory)
    python_version: str | None = None  # the Python the python backend's stub runs, or None without one
    warnings: tuple[str, ...] = ()
    sanitizer_runtimes: tuple[Path, ...] = ()  # preloaded for a sanitizer build of the project's backend

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: os.environ) with this layout's library path and PATH prefix in front."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = _prepend(self.library_path, env.get("LD_LIBRARY_PATH"))
        env["PATH"] = _prepend(self.path_prefix, env.get("PATH"))
        # The python stub would write __pycache__ into a model's version directory, which Triton then takes
        # for a change of the model: the next load request (tbgen dev, test --url) reloads it for nothing.
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(sanitizer_environment(self.sanitizer_runtimes))
        return env


def project_backend_dir(project: Project) -> Path | None:
    """The directory the project's own backend is served from, or None when it has none (stock python models).

    Raises ServerError when a C++ project's library has not been built yet."""
    if project.kind is BackendKind.CPP:
        if not project.library.is_file():
            raise ServerError(
                f"The backend of {project.name} is not built: {project.library} does not exist.",
                f"Run `tbgen build {project.root}`, or in the project: cmake --preset release && "
                "cmake --build --preset release && cmake --install build",
            )
        return project.installed_backend_dir
    if project.kind is BackendKind.PYTHON_BASED:
        directory = project.python_based_dir
        if not (directory / "model.py").is_file():
            raise ServerError(
                f"The Python-based backend of {project.name} is missing: {directory / 'model.py'} does not "
                "exist.",
                f"Restore {directory.relative_to(project.root) / 'model.py'} from version control.",
            )
        return directory
    return None


def assemble_backend_dir(
    install: ServerInstall,
    dest: Path,
    project: Project | None,
    python: Path = Path(sys.executable),
) -> BackendLayout:
    """Build ``dest/backends`` and ``dest/lib`` for a run of ``install`` (replacing what a previous run
    left)."""
    dest = Path(dest)
    backends, lib = dest / "backends", dest / "lib"
    own_backend = project_backend_dir(project) if project is not None else None
    for directory in (backends, lib):
        _make_empty(directory)

    python_version, warnings = _link_server_backends(install, backends, python)
    runtimes: tuple[Path, ...] = ()
    if own_backend is not None:
        _link_own_backend(install, project, own_backend, backends)
        if project.is_cpp:
            runtimes = sanitizer_runtimes(project.library)
        if any(path.name.startswith("libasan") for path in runtimes):
            leak_check = leak_check_library(dest)
            runtimes += (leak_check,) if leak_check is not None else ()

    if install.libtritonserver is not None:
        (lib / "libtritonserver.so").symlink_to(install.libtritonserver)
    elif project is not None and project.is_cpp:
        warnings.append(
            f"no libtritonserver library found beside {install.executable}; a C++ backend may not load"
        )

    return BackendLayout(
        backend_dir=backends,
        library_path=(lib, *install.library_dirs),
        path_prefix=(Path(python).parent,),
        python_version=python_version,
        warnings=tuple(warnings),
        sanitizer_runtimes=runtimes,
    )


def _make_empty(directory: Path) -> None:
    """Create ``directory`` empty, removing whatever file, link or tree was there."""
    if directory.is_symlink() or directory.is_file():
        directory.unlink()
    elif directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)


def _link_server_backends(
    install: ServerInstall, backends: Path, python: Path
) -> tuple[str | None, list[str]]:
    """Link each of the server's backends into ``backends``, the python backend copied with the stub for
    ``python``; returns (the stub's Python, warnings)."""
    warnings: list[str] = []
    python_version: str | None = None
    if not install.backends_dir.is_dir():
        return python_version, warnings
    for entry in sorted(install.backends_dir.iterdir()):
        if entry.name == PYTHON_BACKEND and entry.is_dir():
            python_version, warning = _copy_python_backend(install, entry, backends / PYTHON_BACKEND, python)
            if warning:
                warnings.append(warning)
        elif entry.is_dir():
            (backends / entry.name).symlink_to(entry)
    return python_version, warnings


def _link_own_backend(install: ServerInstall, project: Project, own_backend: Path, backends: Path) -> None:
    """Link the project's backend into ``backends``; raises ServerError when the server has one of that
    name."""
    target = backends / project.backend
    if target.exists() or target.is_symlink():
        raise ServerError(
            f"The backend name '{project.backend}' of {project.name} is also a backend of the server "
            f"({install.backends_dir / project.backend}).",
            "Rename the project's backend (backend_name) so that it does not shadow the server's.",
        )
    target.symlink_to(own_backend.resolve())


def _copy_python_backend(
    install: ServerInstall, source: Path, target: Path, python: Path
) -> tuple[str | None, str | None]:
    """Copy the python backend's files and the stub for ``python``; returns (stub's Python, warning)."""
    target.mkdir()
    for item in source.iterdir():
        if item.is_file():
            shutil.copy2(item, target / item.name)
    wanted = python_version_of(python)
    stub = install.python_stubs.get(wanted)
    if stub is not None:
        shutil.copy2(stub, target / STUB_NAME)
        return wanted, None
    available = ", ".join(sorted(install.python_stubs)) or "none"
    warning = (
        f"the server has no python backend stub for Python {wanted} (it has: {available}); "
        "Python models will run under the server's own stub, if any, and may not find this Python's packages"
    )
    return None, warning


def _prepend(paths: tuple[Path, ...], current: str | None) -> str:
    return os.pathsep.join([*map(str, paths), *([current] if current else [])])
