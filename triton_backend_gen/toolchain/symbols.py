"""``tbgen check``: is a built backend library one that the target tritonserver can load?

Three checks, on the library's dynamic symbol table and its dependencies:

- it exports only ``TRITONBACKEND_*`` symbols (``nm -D --defined-only``; the version script's job);
- every ``TRITONBACKEND_*``/``TRITONSERVER_*`` symbol it imports is defined by the server's libtritonserver
  (catches headers newer than the server: a symbol the server lacks fails the load);
- ``ldd`` finds every library it needs, with the server's library directories on LD_LIBRARY_PATH as the
  runtime sets them and a ``libtritonserver.so`` name there (the wheel's file has a hashed name).

The parsers and the comparisons are pure; ``check_library`` runs nm and ldd.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import BuildError, ServerError, UsageError
from triton_backend_gen.runtime.discovery import ServerInstall, find_tritonserver

EXPORT_PREFIX = "TRITONBACKEND_"
API_PREFIXES = ("TRITONBACKEND_", "TRITONSERVER_")
SERVER_LIBRARY = "libtritonserver.so"

_NM_LINE = re.compile(r"^(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$")
_LDD_MISSING = re.compile(r"^\s*(\S+)\s+=>\s+not found")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" or "note"
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


@dataclass(frozen=True)
class CheckReport:
    library: Path
    server: str | None  # the server checked against, described; None when none was found
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


# --- decisions -------------------------------------------------------------------------------------------
def parse_nm(output: str) -> list[tuple[str, str]]:
    """(type letter, name) per symbol of ``nm -D`` output; version suffixes ("@@V1", "@GLIBC_2.2.5") dropped."""
    symbols = []
    for line in output.splitlines():
        match = _NM_LINE.match(line.rstrip())
        if match:
            symbols.append((match.group(1), match.group(2).split("@", 1)[0]))
    return symbols


def unexpected_exports(defined: list[tuple[str, str]]) -> list[str]:
    """Defined symbols that are not TRITONBACKEND_* entry points ("A" entries name version nodes, not code)."""
    return sorted({name for kind, name in defined if kind != "A" and not name.startswith(EXPORT_PREFIX)})


def missing_api_symbols(imported: list[tuple[str, str]], server_defined: set[str]) -> list[str]:
    """Triton API symbols the library imports that the server's library does not define."""
    wanted = {name for kind, name in imported if kind in "Uw" and name.startswith(API_PREFIXES)}
    return sorted(wanted - server_defined)


def parse_ldd_missing(output: str) -> list[str]:
    """The libraries ``ldd`` reports as "not found"."""
    return [match.group(1) for line in output.splitlines() if (match := _LDD_MISSING.match(line))]


# --- running nm and ldd ----------------------------------------------------------------------------------
def dynamic_symbols(library: Path, *, defined: bool) -> list[tuple[str, str]]:
    flag = "--defined-only" if defined else "--undefined-only"
    return parse_nm(_run(["nm", "-D", flag, str(library)]).stdout)


def check_library(library: Path, server: ServerInstall | None) -> list[Finding]:
    """Every problem that would stop ``server`` (None: no server at hand) loading ``library``."""
    findings = []
    extra = unexpected_exports(dynamic_symbols(library, defined=True))
    if extra:
        shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        findings.append(Finding("error", f"{library.name} exports symbols other than {EXPORT_PREFIX}*: {shown} "
                                         "(the version script should keep them local)"))
    if server is not None and server.libtritonserver is not None:
        server_defined = {name for _, name in dynamic_symbols(server.libtritonserver, defined=True)}
        for name in missing_api_symbols(dynamic_symbols(library, defined=False), server_defined):
            findings.append(Finding("error", f"{library.name} needs {name}, which tritonserver {server.version} "
                                             f"({server.libtritonserver.name}) does not have: the headers are "
                                             "newer than the server; build for the server's release"))
    elif server is not None:
        findings.append(Finding("note", f"no libtritonserver beside {server.executable}: imports not checked"))
    with tempfile.TemporaryDirectory(prefix="tbgen-check-") as scratch:
        library_dirs = [scratch, *map(str, server.library_dirs)] if server is not None else []
        if server is not None and server.libtritonserver is not None:
            os.symlink(server.libtritonserver, Path(scratch) / SERVER_LIBRARY)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*library_dirs, *filter(None, [env.get("LD_LIBRARY_PATH")])])
        missing = parse_ldd_missing(_run(["ldd", str(library)], env=env).stdout)
    for name in missing:
        if name == SERVER_LIBRARY and server is None:
            findings.append(Finding("note", f"{SERVER_LIBRARY} is found only with a server (none to check with)"))
        else:
            findings.append(Finding("error", f"ldd cannot find {name}, which {library.name} needs"))
    return findings


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


def check_project(path: Path, server: Path | None = None) -> CheckReport:
    """Check the built library of the project at ``path`` (or the library file ``path`` itself)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".so":
        library = path
    else:
        from triton_backend_gen.project import load_project
        from triton_backend_gen.toolchain.build import library_path

        project = load_project(path)
        if project.language != "cpp":
            raise UsageError(f"{project.name} is a python project: it has no C++ backend library to check.",
                             "tbgen check applies to C++ backends (cpp-backend, decoupled-backend language=cpp).")
        library = library_path(project)
        if not library.is_file():
            raise BuildError(f"{library} does not exist: the backend is not built.", f"Run `tbgen build {path}`.")
    install, notes = server_for_check(server)
    findings = tuple(check_library(library, install)) + tuple(notes)
    return CheckReport(library, install.describe() if install else None, findings)


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors="replace", env=env, timeout=120,
                                check=False)
    except OSError as err:
        raise BuildError(f"cannot run {command[0]}: {err.strerror}", "Install binutils (nm) and libc-bin (ldd).") from err
    if result.returncode != 0 and command[0] == "nm":
        raise BuildError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result
