"""Third-party libraries of a C++ backend: ``cmake/libraries/<name>.cmake``, one file a library.

The generated CMakeLists.txt includes every ``cmake/libraries/*.cmake`` (sorted) after the backend target is
defined; each file finds one library and links it to ``${BACKEND_TARGET}``. `tbgen add library` writes such a
file from one of three sources, and the framework templates ship theirs:

    --find-package PKG [--components C ...] [--target T]   find_package(PKG REQUIRED), link its imported
    target --pkg-config PKG                                        pkg_check_modules(... IMPORTED_TARGET),
    link it --path DIR                                              a prefix with include/ and lib/
    (find_path/find_library)

Everything here decides (the spec from the flags, the file's text, its path); ``commands.add_library`` writes.
The include directories of imported targets are SYSTEM ones in CMake, and the --path file marks its own so, so
the backend's -Wall -Wextra -Werror applies to its own code only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import UsageError

LIBRARIES_DIR = Path("cmake") / "libraries"
FIND_PACKAGE, PKG_CONFIG, PATH = "find-package", "pkg-config", "path"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_+-]{0,63}$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_TARGET = re.compile(r"^[A-Za-z0-9_.+-]+(?:::[A-Za-z0-9_.+-]+)?$")
_SHARED_OR_STATIC = re.compile(r"^lib(.+?)\.(?:so(?:\.[0-9.]+)?|a)$")
_HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx")


@dataclass(frozen=True)
class LibrarySpec:
    """Where one library comes from, as `tbgen add library` was told."""

    name: str  # names the file cmake/libraries/<name>.cmake and its CMake variables
    source: str  # FIND_PACKAGE, PKG_CONFIG or PATH
    package: str = ""  # the CMake package or the pkg-config module
    components: tuple[str, ...] = ()
    target: str = ""  # the imported target linked (find-package)
    prefix: Path | None = None  # the --path directory
    library: str = ""  # the file name find_library looks for in <prefix>/lib (--path): lib<library>.so
    header: str = ""  # what find_path looks for in <prefix>/include (--path)

    @property
    def variable(self) -> str:
        """The prefix of the file's CMake variables: JSONCPP for jsoncpp, OPENCV_DNN for opencv-dnn."""
        return re.sub(r"[^A-Za-z0-9]", "_", self.name).upper()

    def describe(self) -> str:
        if self.source == FIND_PACKAGE:
            components = f" COMPONENTS {' '.join(self.components)}" if self.components else ""
            return f"find_package({self.package}{components}), linking {self.target}"
        if self.source == PKG_CONFIG:
            return f"pkg-config module {self.package}, linking PkgConfig::{self.variable}"
        return f"lib{self.library} and {self.header} under {self.prefix}"


def library_file(root: Path, name: str) -> Path:
    """The file of library ``name`` in the project at ``root``."""
    return root / LIBRARIES_DIR / f"{name}.cmake"


def library_files(root: Path) -> list[Path]:
    """The project's cmake/libraries/*.cmake files, in the order CMake includes them."""
    directory = root / LIBRARIES_DIR
    return sorted(directory.glob("*.cmake")) if directory.is_dir() else []


def validate_library_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(
            f"'{name}' cannot name a library file: use a letter, then letters, digits, '_', '-' or '+' "
            "(at most 64).",
            "For example: `tbgen add library jsoncpp --pkg-config jsoncpp`",
        )
    return name


def default_target(package: str) -> str:
    """The imported target a package most often defines: fmt::fmt, spdlog::spdlog (its Config file says)."""
    return f"{package}::{package}"


def split_components(values: Iterable[str]) -> tuple[str, ...]:
    """Components from repeated and comma- or space-separated --components values, in order, once each."""
    return tuple(dict.fromkeys(part for value in values for part in re.split(r"[,\s]+", value) if part))


def library_spec(
    name: str,
    *,
    find_package: str | None = None,
    components: Iterable[str] = (),
    target: str | None = None,
    pkg_config: str | None = None,
    path: Path | None = None,
    include_listing: Iterable[str] = (),
    lib_listing: Iterable[str] = (),
) -> LibrarySpec:
    """The spec of `tbgen add library NAME ...`; UsageError for a bad name, no source or two of them, or
    options that do not go with the source. ``include_listing``/``lib_listing``: the names in <path>/include
    and <path>/lib (for --path)."""
    validate_library_name(name)
    _check_one_source(name, find_package=find_package, pkg_config=pkg_config, path=path)
    components = split_components(components)
    if (components or target) and not find_package:
        raise UsageError(
            "--components and --target go with --find-package.",
            f"For example `tbgen add library {name} --find-package {name} --components core "
            f"--target {name}::core`",
        )
    if find_package:
        return _find_package_spec(name, find_package, components, target)
    if pkg_config:
        _check_package(pkg_config, "--pkg-config")
        return LibrarySpec(name, PKG_CONFIG, package=pkg_config)
    assert path is not None
    return LibrarySpec(
        name,
        PATH,
        prefix=path,
        library=prefix_library(name, path, lib_listing),
        header=prefix_header(name, path, include_listing),
    )


def _check_one_source(
    name: str, *, find_package: str | None, pkg_config: str | None, path: Path | None
) -> None:
    """UsageError unless exactly one of --find-package, --pkg-config and --path is given."""
    given = [
        flag
        for flag, value in (("--find-package", find_package), ("--pkg-config", pkg_config), ("--path", path))
        if value
    ]
    example = (
        f"For example `tbgen add library {name} --find-package {name}`, or --pkg-config with its "
        "pkg-config module, or --path with the prefix that holds its include/ and lib/"
    )
    if not given:
        raise UsageError(f"Say where {name} comes from: --find-package, --pkg-config or --path.", example)
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} are two sources for {name}; give one.", example)


def _find_package_spec(
    name: str, package: str, components: tuple[str, ...], target: str | None
) -> LibrarySpec:
    """The spec of a --find-package library; its target defaults to <package>::<package>."""
    _check_package(package, "--find-package")
    target = target or default_target(package)
    if not _TARGET.match(target):
        raise UsageError(f"'{target}' is not a CMake target name.", "For example: --target JsonCpp::JsonCpp")
    return LibrarySpec(name, FIND_PACKAGE, package=package, components=components, target=target)


def _check_package(package: str, flag: str) -> None:
    if not _PACKAGE.match(package):
        raise UsageError(f"'{package}' is not a package name ({flag}).", f"For example: {flag} jsoncpp")


def prefix_library(name: str, prefix: Path, listing: Iterable[str]) -> str:
    """The library find_library looks for in <prefix>/lib: ``name`` (lib<name>.so or .a) when it is there,
    else the only library there; UsageError naming what is there otherwise."""
    libraries = sorted({match.group(1) for entry in listing if (match := _SHARED_OR_STATIC.match(entry))})
    for candidate in (name, name.removeprefix("lib")):
        if candidate in libraries:
            return candidate
    if len(libraries) == 1:
        return libraries[0]
    found = ", ".join(f"lib{library}" for library in libraries) or "no lib*.so or lib*.a"
    raise UsageError(
        f"{prefix / 'lib'} has no lib{name}.so or lib{name}.a (it has: {found}).",
        f"Name the library after its file, e.g. `tbgen add library foo --path {prefix}` for "
        f"{prefix}/lib/libfoo.so.",
    )


def prefix_header(name: str, prefix: Path, listing: Iterable[str]) -> str:
    """What find_path looks for in <prefix>/include: <name>.h (.hpp ...) or a <name>/ directory when there,
    else the first header or directory there; UsageError when include/ is empty."""
    entries = sorted(listing)
    for candidate in (*(f"{name}{suffix}" for suffix in _HEADER_SUFFIXES), name):
        if candidate in entries:
            return candidate
    headers = [entry for entry in entries if entry.endswith(_HEADER_SUFFIXES)] or entries
    if not headers:
        raise UsageError(
            f"{prefix / 'include'} is empty: --path takes a prefix with the library's headers in "
            "include/ and the library in lib/.",
            "Install the library into DIR first (e.g. cmake "
            "--install build --prefix DIR), then run this again.",
        )
    return headers[0]


def check_prefix(path: Path) -> None:
    """UsageError unless ``path`` is a directory with include/ and lib/."""
    missing = [sub for sub in ("include", "lib") if not (path / sub).is_dir()]
    if missing:
        raise UsageError(
            f"--path {path} has no {' or '.join(f'{sub}/' for sub in missing)}: it takes a prefix with "
            "the library's headers in include/ and the library in lib/.",
            "Give the directory the library was installed into (e.g. /opt/mylib).",
        )


# --- the file's text -------------------------------------------------------------------------------------
def library_cmake(spec: LibrarySpec) -> str:
    """The text of cmake/libraries/<name>.cmake for ``spec``."""
    header = [
        f"# {spec.name}: {spec.describe()}.",
        "#",
        "# Written by `tbgen add library`; tbgen never rewrites it, so edit it freely. CMakeLists.txt",
        "# includes every cmake/libraries/*.cmake after the backend target ${BACKEND_TARGET} is defined.",
        "# Imported targets' include directories are SYSTEM ones: the backend's -Werror spares their "
        "headers.",
        "# At run time the library is found where it was linked from (an RPATH entry when that is outside "
        "the",
        "# system's directories); `tbgen package` puts the shared objects the server's image lacks beside "
        "the",
        "# backend ($ORIGIN).",
        "",
    ]
    body = {FIND_PACKAGE: _find_package_body, PKG_CONFIG: _pkg_config_body, PATH: _path_body}[spec.source](
        spec
    )
    return "\n".join(header + body) + "\n"


def _find_package_body(spec: LibrarySpec) -> list[str]:
    var = spec.variable
    components = f" COMPONENTS {' '.join(spec.components)}" if spec.components else ""
    return [
        f"# The imported target {spec.package}'s CMake package defines for the library. Packages name theirs",
        f"# differently ({spec.package}Config.cmake or its documentation says which): change it here when "
        "the",
        "# configure step says the target is not defined. A package that defines variables instead of "
        "targets",
        f"# is linked with ${{{spec.package}_LIBRARIES}} and ${{{spec.package}_INCLUDE_DIRS}} (add the "
        "latter with",
        "# target_include_directories(${BACKEND_TARGET} SYSTEM PRIVATE ...)).",
        f'set({var}_TARGET "{spec.target}")',
        "",
        f"find_package({spec.package} REQUIRED{components})",
        f"if(NOT TARGET ${{{var}_TARGET}})",
        "  get_directory_property(_imported IMPORTED_TARGETS)",
        "  message(FATAL_ERROR",
        f'    "find_package({spec.package}) defines no target ${{{var}_TARGET}}; set {var}_TARGET in "',
        '    "${CMAKE_CURRENT_LIST_FILE} to one it defines (imported here: ${_imported})")',
        "endif()",
        f"target_link_libraries(${{BACKEND_TARGET}} PRIVATE ${{{var}_TARGET}})",
    ]


def _pkg_config_body(spec: LibrarySpec) -> list[str]:
    var = spec.variable
    return [
        f"# pkg-config's module {spec.package} ({spec.package}.pc, searched in PKG_CONFIG_PATH and the "
        "system's",
        f"# directories) becomes the imported target PkgConfig::{var}: its include directories, flags and "
        "libraries.",
        "find_package(PkgConfig REQUIRED)",
        f"pkg_check_modules({var} REQUIRED IMPORTED_TARGET {spec.package})",
        f"target_link_libraries(${{BACKEND_TARGET}} PRIVATE PkgConfig::{var})",
    ]


def _path_body(spec: LibrarySpec) -> list[str]:
    var = spec.variable
    prefix = spec.prefix.as_posix() if spec.prefix is not None else ""
    return [
        f"# A library installed under a prefix: its headers in include/, lib{spec.library}.so (or .a) in "
        "lib/.",
        f"# Point {var}_ROOT elsewhere with -D{var}_ROOT=DIR; change the names below if the files move.",
        f'set({var}_ROOT "{prefix}" CACHE PATH "Prefix of {spec.name} (include/ and lib/)")',
        "",
        f"find_path({var}_INCLUDE_DIR NAMES {spec.header}",
        f"          PATHS ${{{var}_ROOT}}/include NO_DEFAULT_PATH REQUIRED)",
        f"find_library({var}_LIBRARY NAMES {spec.library}",
        f"             PATHS ${{{var}_ROOT}}/lib NO_DEFAULT_PATH REQUIRED)",
        f"target_include_directories(${{BACKEND_TARGET}} SYSTEM PRIVATE ${{{var}_INCLUDE_DIR}})",
        f"target_link_libraries(${{BACKEND_TARGET}} PRIVATE ${{{var}_LIBRARY}})",
    ]
