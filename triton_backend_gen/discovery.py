"""Where a tritonserver comes from, and what it is.

Candidates, in order: ``--server PATH``, ``$TRITONSERVER``, ``tritonserver`` on PATH,
``/opt/tritonserver/bin/tritonserver`` (the NGC container's layout) and the server that the
nvidia-pytriton wheel embeds (tbgen's ``server`` extra). ``find_tritonserver`` returns the first usable
one; ``discover_servers`` reports every candidate for ``tbgen doctor``.

The two layouts tbgen knows:

    NGC / source build                    nvidia-pytriton wheel (site-packages/)
    <root>/bin/tritonserver               pytriton/tritonserver/bin/tritonserver
    <root>/lib/libtritonserver.so         nvidia_pytriton.libs/libtritonserver-<hash>.so (+ libcudart, ...)
    <root>/backends/<name>/               pytriton/tritonserver/backends/python/
    <root>/backends/python/*_stub         pytriton/tritonserver/python_backend_stubs/3.X/*_stub
    <root>/TRITON_VERSION
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.errors import ServerError, UnknownReleaseError

SERVER_EXTRA_HINT = "pip install 'triton-backend-gen[server]'"
ENV_VARIABLE = "TRITONSERVER"
DEFAULT_ROOT = Path("/opt/tritonserver")
WHEEL_PACKAGE = "pytriton"  # the import name of nvidia-pytriton
WHEEL_LIBS = "nvidia_pytriton.libs"  # its bundled libraries, beside the package in site-packages
STUB_NAME = "triton_python_backend_stub"

SOURCE_EXPLICIT = "--server"
SOURCE_ENV = f"${ENV_VARIABLE}"
SOURCE_PATH = "PATH"
SOURCE_WHEEL = "embedded wheel"

_VERSION_IN_LOG = re.compile(r"^\|\s*server_version\s*\|\s*(\S+)\s*\|", re.MULTILINE)
_VERSION_TEXT = re.compile(r"\d+\.\d+\.\d+")
_LIBPYTHON = re.compile(rb"libpython(3\.\d+)")


@dataclass(frozen=True)
class ServerInstall:
    """One tritonserver and everything beside it that a run needs."""

    executable: Path
    root: Path
    backends_dir: Path
    library_dirs: tuple[Path, ...]
    libtritonserver: Path | None
    version: str  # the server version, "2.51.0"
    # which candidate found it: "--server", "$TRITONSERVER", "PATH", "/opt/tritonserver", "embedded wheel"
    source: str
    python_stubs: Mapping[str, Path] = field(default_factory=dict)  # "3.11" -> triton_python_backend_stub

    @property
    def release(self) -> versions.Release | None:
        """The release of the matrix this server belongs to, or None for a version the matrix lacks."""
        try:
            return versions.resolve(self.version)
        except UnknownReleaseError:
            return None

    def describe(self) -> str:
        """One line for people: "tritonserver 2.51.0 (release 24.10) from embedded wheel: /path"."""
        release = self.release
        named = f" (release {release.container})" if release else " (a release tbgen does not know)"
        return f"tritonserver {self.version}{named} from {self.source}: {self.executable}"


def find_tritonserver(explicit: Path | None = None) -> ServerInstall:
    """The tritonserver to run: ``explicit``, else the first usable candidate (see the module docstring).

    An explicit path or $TRITONSERVER that is not a usable server is an error (never silently replaced by
    another server); when no candidate is usable the error lists what was looked at."""
    notes = []
    for source, install, note in discover_servers(explicit):
        if install is not None:
            return install
        if source in (SOURCE_EXPLICIT, SOURCE_ENV) and note.startswith("unusable"):
            raise ServerError(f"The tritonserver given by {source} is {note}", _fix_hint(source))
        notes.append(f"{source}: {note}")
    raise ServerError(
        "No tritonserver found. Looked at:\n  " + "\n  ".join(notes),
        f"Install tbgen's embedded server with `{SERVER_EXTRA_HINT}`, or pass --server PATH "
        f"(or set ${ENV_VARIABLE}) to a tritonserver executable.",
    )


def discover_servers(explicit: Path | None = None) -> list[tuple[str, ServerInstall | None, str]]:
    """Every candidate in order, found or not: (source, install or None, a note saying what was seen)."""
    results = []
    for source, executable, absent in _candidates(explicit):
        if executable is None:
            results.append((source, None, absent))
            continue
        try:
            install = install_from_executable(executable, source)
        except ServerError as err:
            results.append((source, None, f"unusable: {err.message}"))
            continue
        results.append((source, install, install.describe()))
    return results


def install_from_executable(executable: Path, source: str) -> ServerInstall:
    """Describe the server at ``executable`` (a tritonserver binary, or an install root holding
    bin/tritonserver)."""
    executable = _as_executable(Path(executable))
    root = executable.parent.parent
    library_dirs = tuple(d for d in (root / "lib", root.parent.parent / WHEEL_LIBS) if d.is_dir())
    return ServerInstall(
        executable=executable,
        root=root,
        backends_dir=root / "backends",
        library_dirs=library_dirs,
        libtritonserver=_find_libtritonserver(library_dirs),
        version=server_version(executable, library_dirs),
        source=source,
        python_stubs=_find_python_stubs(root),
    )


def server_version(executable: Path, library_dirs: tuple[Path, ...] = ()) -> str:
    """The version of the server at ``executable`` ("2.51.0").

    An install's TRITON_VERSION file (the NGC layout) answers first. Otherwise the server is run once with a
    model repository that does not exist and no endpoints: it prints its option table, server_version
    included, and exits within milliseconds without opening a port. Cached per binary (path, size, mtime).
    """
    version_file = executable.parent.parent / "TRITON_VERSION"
    if version_file.is_file():
        match = _VERSION_TEXT.search(version_file.read_text(errors="replace"))
        if match:
            return match.group(0)
    stat = executable.stat()
    return _probed_version(str(executable), stat.st_size, stat.st_mtime_ns, tuple(map(str, library_dirs)))


@functools.lru_cache(maxsize=16)
def _probed_version(executable: str, _size: int, _mtime_ns: int, library_dirs: tuple[str, ...]) -> str:
    command = [
        executable,
        "--model-repository=/nonexistent/tbgen-version-probe",
        "--allow-http=false",
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--exit-on-error=true",
    ]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*library_dirs, *filter(None, [env.get("LD_LIBRARY_PATH")])])
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ServerError(f"{executable} could not be run to read its version: {err}") from err
    output = result.stdout + result.stderr
    match = _VERSION_IN_LOG.search(output)
    if match is None:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise ServerError(
            f"{executable} did not report its version (exit status {result.returncode}):\n{tail}"
        )
    return match.group(1)


def python_version_of(python: Path) -> str:
    """ "3.11" for the interpreter at ``python``."""
    if Path(python) == Path(sys.executable):
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        result = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        raise ServerError(f"cannot run the Python interpreter {python}: {err}") from err
    return result.stdout.strip()


# --- candidates ------------------------------------------------------------------------------------------
def _candidates(explicit: Path | None) -> list[tuple[str, Path | None, str]]:
    """(source, executable or None, why there is none) for each place, in order."""
    candidates: list[tuple[str, Path | None, str]] = []
    if explicit is not None:
        candidates.append((SOURCE_EXPLICIT, Path(explicit), ""))
    from_env = os.environ.get(ENV_VARIABLE)
    candidates.append((SOURCE_ENV, Path(from_env), "") if from_env else (SOURCE_ENV, None, "not set"))
    on_path = shutil.which("tritonserver")
    candidates.append(
        (SOURCE_PATH, Path(on_path), "") if on_path else (SOURCE_PATH, None, "no tritonserver on PATH")
    )
    default = DEFAULT_ROOT / "bin" / "tritonserver"
    label = str(DEFAULT_ROOT)  # "/opt/tritonserver"
    candidates.append((label, default, "") if default.is_file() else (label, None, f"no {default}"))
    wheel = _wheel_executable()
    candidates.append(
        (SOURCE_WHEEL, wheel, "")
        if wheel
        else (SOURCE_WHEEL, None, f"nvidia-pytriton is not installed (`{SERVER_EXTRA_HINT}`)")
    )
    return candidates


def _wheel_executable() -> Path | None:
    """The tritonserver inside the nvidia-pytriton wheel, found without importing pytriton."""
    try:
        spec = importlib.util.find_spec(WHEEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        executable = Path(location) / "tritonserver" / "bin" / "tritonserver"
        if executable.is_file():
            return executable
    return None


def _as_executable(path: Path) -> Path:
    if path.is_dir():
        for inside in (path / "bin" / "tritonserver", path / "tritonserver"):
            if inside.is_file():
                path = inside
                break
        else:
            raise ServerError(f"{path} is a directory without bin/tritonserver")
    if not path.exists():
        raise ServerError(f"{path} does not exist")
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ServerError(f"{path} is not an executable file")
    return path.resolve()


def _find_libtritonserver(library_dirs: tuple[Path, ...]) -> Path | None:
    for directory in library_dirs:
        plain = directory / "libtritonserver.so"
        if plain.is_file():
            return plain
        hashed = sorted(directory.glob("libtritonserver*.so*"))
        if hashed:
            return hashed[0]
    return None


def _find_python_stubs(root: Path) -> dict[str, Path]:
    """Python version -> stub: the wheel's per-version stubs, then the python backend's own stub."""
    stubs: dict[str, Path] = {}
    per_version = root / "python_backend_stubs"
    if per_version.is_dir():
        for directory in sorted(per_version.iterdir()):
            stub = directory / STUB_NAME
            if re.fullmatch(r"3\.\d+", directory.name) and stub.is_file():
                stubs[directory.name] = stub
    own = root / "backends" / "python" / STUB_NAME
    if own.is_file():
        linked = _linked_python(own)
        if linked and linked not in stubs:
            stubs[linked] = own
    return stubs


def _linked_python(stub: Path) -> str | None:
    """The Python version a stub is linked against, from the libpython3.X name in the binary."""
    match = _LIBPYTHON.search(stub.read_bytes())
    return match.group(1).decode() if match else None


def _fix_hint(source: str) -> str:
    if source == SOURCE_EXPLICIT:
        return (
            "Pass --server the path of a tritonserver executable (or of the directory holding "
            "bin/tritonserver)."
        )
    return f"Point ${ENV_VARIABLE} at a tritonserver executable, or unset it to use the next candidate."


def gpus_visible() -> bool:
    """Whether a server started here would see an NVIDIA GPU: the driver lists one and CUDA_VISIBLE_DEVICES
    does not hide them all."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    # A sandbox (gVisor) may show no /proc/driver/nvidia while the driver's device nodes are there.
    return any(Path("/dev").glob("nvidia[0-9]*"))
