"""``tbgen check``: is a built backend library one that the target tritonserver can load?

Three checks, on the library's dynamic symbol table and its dependencies:

- it exports only ``TRITONBACKEND_*`` symbols (``nm -D --defined-only``; the version script's job);
- every ``TRITONBACKEND_*``/``TRITONSERVER_*`` symbol it imports is defined by the server's libtritonserver
  (catches headers newer than the server: a symbol the server lacks fails the load);
- ``ldd`` finds every library it needs, with the server's library directories on LD_LIBRARY_PATH as the
  runtime sets them and a ``libtritonserver.so`` name there (the wheel's file has a hashed name);
- (a warning) a CUDA runtime it links (``readelf -d``) is of the major version the target release ships.

The parsers and the comparisons are pure; ``check_library`` runs nm, readelf and ldd. Which server to check
against is the caller's choice (commands.build finds one).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.discovery import ServerInstall
from triton_backend_gen.errors import BuildError

EXPORT_PREFIX = "TRITONBACKEND_"
API_PREFIXES = ("TRITONBACKEND_", "TRITONSERVER_")
SERVER_LIBRARY = "libtritonserver.so"

_NM_LINE = re.compile(r"^(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$")
_LDD_MISSING = re.compile(r"^\s*(\S+)\s+=>\s+not found")
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error", "warning" (loads here, not in the release's image) or "note"
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


def cuda_runtime_majors(needed: list[str]) -> set[str]:
    """The CUDA major versions of the libcudart.so.N among a library's NEEDED entries."""
    return {match.group(1) for name in needed if (match := _CUDART.match(name))}


def needed_libraries(library: Path) -> list[str]:
    """The NEEDED entries of ``library``'s dynamic section."""
    return _NEEDED.findall(_run(["readelf", "-d", str(library)]).stdout)


def cuda_findings(library: Path, release: versions.Release) -> list[Finding]:
    """A warning for each CUDA runtime ``library`` links whose major version ``release``'s image does not ship."""
    return [
        Finding("warning", f"{library.name} links CUDA {major}'s runtime (libcudart.so.{major}), but Triton "
                           f"{release.container}'s image ships CUDA {release.cuda}: it will not load there. Build in "
                           "the release's container (tbgen build --docker), or avoid the dependency (e.g. link "
                           "cudart statically).")
        for major in sorted(cuda_runtime_majors(needed_libraries(library)) - {release.cuda.split(".")[0]})
    ]


def check_library(library: Path, server: ServerInstall | None,
                  release: versions.Release | None = None) -> list[Finding]:
    """Every problem that would stop ``server`` (None: no server at hand) loading ``library``; with ``release``,
    also a CUDA runtime of another major version than the release's image ships."""
    findings = cuda_findings(library, release) if release is not None else []
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


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors="replace", env=env, timeout=120,
                                check=False)
    except OSError as err:
        raise BuildError(f"cannot run {command[0]}: {err.strerror}", "Install binutils (nm) and libc-bin (ldd).") from err
    if result.returncode != 0 and command[0] == "nm":
        raise BuildError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result
