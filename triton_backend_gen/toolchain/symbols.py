"""``tbgen check``: is a built backend library one that the target tritonserver can load?

Three checks, on the library's dynamic symbol table and its dependencies:

- it exports only ``TRITONBACKEND_*`` symbols (``nm -D --defined-only``; the version script's job);
- every ``TRITONBACKEND_*``/``TRITONSERVER_*`` symbol it imports is defined by the server's libtritonserver
  (catches headers newer than the server: a symbol the server lacks fails the load);
- ``ldd`` finds every library it needs, with the server's library directories on LD_LIBRARY_PATH as the
  runtime sets them and a ``libtritonserver.so`` name there (the wheel's file has a hashed name); each one
  missing is named with what needs it (``readelf -d`` of the backend and of its dependencies) and the fix;
- (a warning) a CUDA runtime it links (``readelf -d``) is of the major version the target release ships;
- (a note) whether it exports ``TRITONBACKEND_ModelInstanceReady``, the optional readiness entry point that
  core asks from release 25.12 (``versions.FEATURES["instance_ready"]``), and whether that fits the release.

The parsers and the comparisons are pure; ``check_library`` runs nm, readelf and ldd. Which server to check
against is the caller's choice (toolchain.ensure_built finds one). The same check in a container image is
toolchain.linkage's.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.discovery import ServerInstall
from triton_backend_gen.errors import BuildError
from triton_backend_gen.findings import NOTE, Finding

EXPORT_PREFIX = "TRITONBACKEND_"
API_PREFIXES = ("TRITONBACKEND_", "TRITONSERVER_")
SERVER_LIBRARY = "libtritonserver.so"
READY_ENTRY_POINT = "TRITONBACKEND_ModelInstanceReady"
# What a batching strategy library (batchstrategy.so) exports: Triton's core looks up all five, and refuses
# the model's load when it finds some but not all.
BATCH_STRATEGY_EXPORTS = (
    "TRITONBACKEND_ModelBatcherInitialize",
    "TRITONBACKEND_ModelBatcherFinalize",
    "TRITONBACKEND_ModelBatchInitialize",
    "TRITONBACKEND_ModelBatchIncludeRequest",
    "TRITONBACKEND_ModelBatchFinalize",
)

_NM_LINE = re.compile(r"^(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$")
_LDD_ARROW = re.compile(r"^\s*(\S+)\s+=>\s+(?:(not found)|(\S+))")
_LDD_VERSION = re.compile(r"version `[^']+' not found")
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)")


@dataclass(frozen=True)
class Resolution:
    """What ldd reported for one library: each dependency found (soname -> path), those not found, and its
    lines about symbol versions a found library lacks (the library would not load either)."""

    found: Mapping[str, str]
    missing: tuple[str, ...]
    version_errors: tuple[str, ...] = ()


# --- decisions -------------------------------------------------------------------------------------------
def parse_nm(output: str) -> list[tuple[str, str]]:
    """(type letter, name) per symbol of ``nm -D`` output; version suffixes ("@@V1", "@GLIBC_2.2.5")
    dropped."""
    symbols = []
    for line in output.splitlines():
        match = _NM_LINE.match(line.rstrip())
        if match:
            symbols.append((match.group(1), match.group(2).split("@", 1)[0]))
    return symbols


def unexpected_exports(defined: list[tuple[str, str]]) -> list[str]:
    """Defined symbols that are not TRITONBACKEND_* entry points ("A" entries name version nodes, not
    code)."""
    return sorted({name for kind, name in defined if kind != "A" and not name.startswith(EXPORT_PREFIX)})


def missing_api_symbols(imported: list[tuple[str, str]], server_defined: set[str]) -> list[str]:
    """Triton API symbols the library imports that the server's library does not define."""
    wanted = {name for kind, name in imported if kind in "Uw" and name.startswith(API_PREFIXES)}
    return sorted(wanted - server_defined)


def readiness_findings(
    library: str, exported: Iterable[str], release: versions.Release | None
) -> list[Finding]:
    """A note: whether ``library`` (a file name) exports TRITONBACKEND_ModelInstanceReady (among the names
    ``exported``), and what that means for a server of ``release`` (None: not known)."""
    has = READY_ENTRY_POINT in set(exported)
    said = f"{library} {'exports' if has else 'does not export'} {READY_ENTRY_POINT}"
    return [Finding("note", said + _readiness_meaning(has, release))]


def _readiness_meaning(exported: bool, release: versions.Release | None) -> str:
    """What exporting the readiness entry point (or not) means for a server of ``release``: the rest of the
    sentence after the library's name and the verb."""
    since = versions.FEATURES["instance_ready"].since
    if release is None:
        if exported:
            return f": Triton {since} and later ask it whether an instance is ready"
        return ": a server takes its instances as ready whenever their model is"
    name = f"Triton {release.container}"
    if not release.has("instance_ready"):
        if exported:
            return f", which {name} never calls (core asks it from {since}): the server ignores it"
        return f", as fits {name}: its core asks no backend whether an instance is ready ({since} does)"
    if not exported:
        return (
            f": {name}'s readiness probes cannot see an instance that cannot recover (`tbgen update` "
            "regenerates the plumbing with it)"
        )
    server = versions.FEATURES["server_ready_checks_instances"].since
    checks = release.has("server_ready_checks_instances")
    scope = "and the server's" if checks else f"the server's from {server}"
    return (
        f": {name}'s core asks it on every readiness probe, so an instance that cannot recover fails its "
        f"model's ready endpoint ({scope})"
    )


def parse_ldd_missing(output: str) -> list[str]:
    """The libraries ``ldd`` reports as "not found"."""
    return list(parse_ldd(output).missing)


def parse_ldd(output: str) -> Resolution:
    """ldd's output read: ``name => path (0x...)``, ``name => not found`` and ``version `V' not found`` lines
    (the dynamic loader and the vDSO, which have no ``=>``, are left out)."""
    found: dict[str, str] = {}
    missing: list[str] = []
    versions: list[str] = []
    for line in output.splitlines():
        if _LDD_VERSION.search(line):
            versions.append(line.strip())
            continue
        match = _LDD_ARROW.match(line)
        if match is None:
            continue
        name = match.group(1)
        if match.group(2):
            if name not in missing:
                missing.append(name)
        else:
            found[name] = match.group(3)
    return Resolution(found, tuple(missing), tuple(dict.fromkeys(versions)))


def needed_by(name: str, graph: Mapping[str, Iterable[str]], library: str) -> str:
    """ "libA.so needs" or "libA.so and libB.so need": what needs ``name``, as a phrase."""
    needers = needers_of(name, graph, library)
    return f"{' and '.join(needers)} {'needs' if len(needers) == 1 else 'need'}"


def needers_of(name: str, graph: Mapping[str, Iterable[str]], library: str) -> list[str]:
    """The objects whose NEEDED entries name ``name`` (``graph``: object name -> its NEEDED); ``library`` when
    none is known (a library of a library this machine does not have)."""
    found = sorted(obj for obj, needed in graph.items() if name in needed)
    if library in found:  # the backend first
        found.remove(library)
        found.insert(0, library)
    return found or [library]


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
    """A warning for each CUDA runtime ``library`` links whose major version ``release``'s image does not
    ship."""
    return [
        Finding(
            "warning",
            f"{library.name} links CUDA {major}'s runtime (libcudart.so.{major}), but Triton "
            f"{release.container}'s image ships CUDA {release.cuda}: it will not load there. Build in "
            "the release's container (`tbgen build --docker`), or avoid the dependency (e.g. link "
            "cudart statically).",
        )
        for major in sorted(cuda_runtime_majors(needed_libraries(library)) - {release.cuda.split(".")[0]})
    ]


def export_findings(library: Path, release: versions.Release | None = None) -> list[Finding]:
    """An error when ``library`` exports more than the TRITONBACKEND_* entry points; a note on its readiness
    entry point for a server of ``release`` (see readiness_findings)."""
    defined = dynamic_symbols(library, defined=True)
    readiness = readiness_findings(library.name, [name for kind, name in defined if kind != "A"], release)
    extra = unexpected_exports(defined)
    if not extra:
        return readiness
    shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
    return [
        Finding(
            "error",
            f"{library.name} exports symbols other than {EXPORT_PREFIX}*: {shown} "
            "(the version script should keep them local)",
        ),
        *readiness,
    ]


def check_library(
    library: Path, server: ServerInstall | None, release: versions.Release | None = None
) -> list[Finding]:
    """Every problem that would stop ``server`` (None: no server at hand) loading ``library``; with
    ``release``, also a CUDA runtime of another major version than the release's image ships."""
    findings = [
        *(cuda_findings(library, release) if release is not None else []),
        *export_findings(library, release),
    ]
    if server is not None:
        findings += _server_import_findings(library, server)
    return findings + _resolution_findings(library, server, _resolve_libraries(library, server))


def check_batch_strategy(library: Path, server: ServerInstall | None, model: str) -> list[Finding]:
    """Every problem that would stop ``server`` loading ``library`` as ``model``'s batching strategy: one of
    the five functions missing (the load fails), anything else exported, an import the server lacks, a
    dependency that does not resolve; a note saying it exports the five when it does."""
    defined = {name for kind, name in dynamic_symbols(library, defined=True) if kind != "A"}
    missing = [name for name in BATCH_STRATEGY_EXPORTS if name not in defined]
    extra = sorted(defined - set(BATCH_STRATEGY_EXPORTS))
    where = f"{model}'s batching strategy ({library})"
    findings = [
        Finding(
            "error",
            f"{where} lacks {', '.join(missing)}: Triton loads a strategy only with all five "
            "TRITONBACKEND_ModelBatch* functions, and fails the model's load with some of them",
        )
        if missing
        else Finding(NOTE, f"{where} exports the five TRITONBACKEND_ModelBatch* functions"),
    ]
    if extra:
        findings.append(
            Finding(
                "error", f"{where} exports {', '.join(extra[:5])} too (the version script keeps them local)"
            )
        )
    if server is not None:
        findings += _server_import_findings(library, server)
    return findings + _resolution_findings(library, server, _resolve_libraries(library, server))


def _server_import_findings(library: Path, server: ServerInstall) -> list[Finding]:
    """An error per TRITONSERVER_*/TRITONBACKEND_* symbol ``library`` imports that ``server``'s
    libtritonserver does not define; a note when the server has no libtritonserver to check against."""
    if server.libtritonserver is None:
        return [Finding("note", f"no libtritonserver beside {server.executable}: imports not checked")]
    server_defined = {name for _, name in dynamic_symbols(server.libtritonserver, defined=True)}
    return [
        Finding(
            "error",
            f"{library.name} needs {name}, which tritonserver {server.version} "
            f"({server.libtritonserver.name}) does not have: the headers are "
            "newer than the server; build for the server's release",
        )
        for name in missing_api_symbols(dynamic_symbols(library, defined=False), server_defined)
    ]


def _resolve_libraries(library: Path, server: ServerInstall | None) -> Resolution:
    """How ``ldd`` resolves ``library``'s dependencies here, with ``server``'s library directories first (as
    tritonserver's own loader would find them)."""
    with tempfile.TemporaryDirectory(prefix="tbgen-check-") as scratch:
        library_dirs = [scratch, *map(str, server.library_dirs)] if server is not None else []
        # A backend needs libtritonserver.so by that name, which the server satisfies with the copy it has
        # loaded; the wheel's file has a hashed name, so a link by the needed name stands in for it.
        if server is not None and server.libtritonserver is not None:
            os.symlink(server.libtritonserver, Path(scratch) / SERVER_LIBRARY)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*library_dirs, *filter(None, [env.get("LD_LIBRARY_PATH")])])
        return parse_ldd(_run(["ldd", str(library)], env=env).stdout)


def _resolution_findings(
    library: Path, server: ServerInstall | None, resolution: Resolution
) -> list[Finding]:
    """The problems ``ldd`` found: libraries missing (libtritonserver only noted when no server is at hand)
    and libraries older than those ``library`` was built against."""
    findings = []
    if server is None and SERVER_LIBRARY in resolution.missing:
        findings.append(Finding("note", f"{SERVER_LIBRARY} is found only with a server (none to check with)"))
    missing = [name for name in resolution.missing if not (name == SERVER_LIBRARY and server is None)]
    graph = needed_graph(library, resolution.found) if missing else {}
    findings += missing_library_findings(missing, library.name, graph)
    findings += [
        Finding(
            "error", f"{line}: a library {library.name} links is older here than the one it was built against"
        )
        for line in resolution.version_errors
    ]
    return findings


def missing_library_findings(
    missing: Iterable[str], library: str, graph: Mapping[str, Iterable[str]]
) -> list[Finding]:
    """An error per library ``ldd`` cannot find on this machine, naming what needs it and the fix."""
    return [
        Finding(
            "error",
            f"ldd cannot find {name}, which {needed_by(name, graph, library)}: "
            "install it on this machine (the runtime package of the library), or, for a library "
            "installed under a prefix, link it with `tbgen add library` and --path naming the prefix (its "
            "lib/ then goes into the backend's RPATH)",
        )
        for name in missing
    ]


def needed_graph(library: Path, found: Mapping[str, str]) -> dict[str, list[str]]:
    """The NEEDED entries of ``library`` and of each dependency found on this machine, by object name."""
    graph = {library.name: needed_libraries(library)}
    for name, path in found.items():
        if Path(path).is_file():
            graph[name] = needed_libraries(Path(path))
    return graph


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, errors="replace", env=env, timeout=120, check=False
        )
    except OSError as err:
        raise BuildError(
            f"cannot run {command[0]}: {err.strerror}", "Install binutils (nm) and libc-bin (ldd)."
        ) from err
    if result.returncode != 0 and command[0] == "nm":
        raise BuildError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result
