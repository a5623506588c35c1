"""``tbgen add library``: write ``cmake/libraries/<name>.cmake`` for a C++ project (toolchain.libraries
decides what it says). A python project is refused, and an existing file is never overwritten."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import UsageError
from triton_backend_gen.project import Project
from triton_backend_gen.toolchain.libraries import (
    LibrarySpec,
    check_prefix,
    library_cmake,
    library_file,
    library_spec,
    validate_library_name,
)


@dataclass(frozen=True)
class AddedLibrary:
    spec: LibrarySpec
    file: Path


def add_library(
    project: Project,
    name: str,
    *,
    find_package: str | None = None,
    components: Iterable[str] = (),
    target: str | None = None,
    pkg_config: str | None = None,
    path: Path | None = None,
) -> AddedLibrary:
    """Write the CMake that finds library ``name`` and links it to ``project``'s backend."""
    if not project.is_cpp:
        raise UsageError(
            f"{project.name} is a python project: it has no C++ backend to link {name} into.",
            "Install the Python package the model imports instead (python models import what they "
            "need); `tbgen add library` applies to cpp-backend and decoupled-backend language=cpp.",
        )
    validate_library_name(name)
    file = library_file(project.root, name)
    if file.exists():
        raise UsageError(
            f"{file} exists already; tbgen never overwrites it.",
            f"Edit it, or delete it and run this again (or choose another NAME than {name}).",
        )
    include_listing: list[str] = []
    lib_listing: list[str] = []
    if path is not None and not (find_package or pkg_config):
        path = path.expanduser().resolve()
        check_prefix(path)
        include_listing = [entry.name for entry in (path / "include").iterdir()]
        lib_listing = [entry.name for entry in (path / "lib").iterdir()]
    spec = library_spec(
        name,
        find_package=find_package,
        components=components,
        target=target,
        pkg_config=pkg_config,
        path=path,
        include_listing=include_listing,
        lib_listing=lib_listing,
    )
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with file.open("x") as out:  # "x": never over a file that appeared meanwhile
            out.write(library_cmake(spec))
    except FileExistsError as err:
        raise UsageError(f"{file} exists already; tbgen never overwrites it.", "Edit it instead.") from err
    return AddedLibrary(spec, file)
