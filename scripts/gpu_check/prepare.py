"""`gpu-check prepare`, here: gather into .gpu-check/ what the device run needs, within the size limit, and
write its manifest (each piece with its size and digest, and what was left out and why)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpu_check.device import (
    CARRY_NAME,
    DEVICE_CALL,
    DEVICE_GLIBC_MINOR,
    DEVICE_PROVIDES,
    LIMIT_BYTES,
    MANIFEST,
    NOT_NEEDED_THERE,
    REPO,
    USAGE,
    CheckError,
    sha256_of,
    tail_lines,
)
from triton_backend_gen import discovery, versions
from triton_backend_gen.toolchain import sources
from triton_backend_gen.toolchain.cmake import googletest_sources


@dataclass(frozen=True)
class Piece:
    """One carried file: its path inside .gpu-check, its size, its digest and what it is."""

    name: str
    bytes: int
    sha256: str
    what: str
    kind: str  # wheel, server, sources, build-deps


@dataclass(frozen=True)
class LeftOut:
    name: str
    bytes: int
    why: str


def prepare(dest: Path, python: str) -> int:
    """Gather what the device run needs into ``dest``; 0 when it fits the limit with the working tree."""
    install = embedded_server()
    release = versions.resolve(install.version)
    _reset_carry_dir(dest)
    pieces: list[Piece] = []
    left: list[LeftOut] = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as staging:
        for gather in (gather_wheels, gather_server, gather_sources, gather_build_deps):
            got, dropped = gather(dest, Path(staging), python=python, release=release, install=install)
            pieces += got
            left += dropped
    manifest = make_manifest(pieces, left, release, install, python, tree_bytes(dest))
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print_manifest(manifest)
    return 0 if manifest["fits"] else 1


def embedded_server() -> discovery.ServerInstall:
    """The tritonserver of the nvidia-pytriton wheel in this Python (tbgen's server extra)."""
    for source, install, _note in discovery.discover_servers():
        if source == discovery.SOURCE_WHEEL and install is not None:
            return install
    raise CheckError(
        "No embedded tritonserver in this Python: there is no server to carry.",
        f"Run prepare with tbgen's own Python (.venv/bin/python), or `{discovery.SERVER_EXTRA_HINT}`.",
    )


def _reset_carry_dir(dest: Path) -> None:
    """Empty ``dest`` for a new gathering; refuse a folder that is not one (no manifest, not empty)."""
    if dest.exists() and any(dest.iterdir()) and not (dest / MANIFEST).is_file():
        raise CheckError(
            f"{dest} exists and is not a gpu-check folder (no {MANIFEST}).",
            "Pass another --dest, or remove it.",
        )
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)


def piece(dest: Path, path: Path, what: str, kind: str) -> Piece:
    return Piece(str(path.relative_to(dest)), path.stat().st_size, sha256_of(path), what, kind)


# --- the wheels ------------------------------------------------------------------------------------------
def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares it ("Ml_Dtypes" -> "ml-dtypes")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_requirements() -> list[str]:
    """tbgen's runtime requirements (pyproject.toml), less those the device provides."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    named = ((re.match(r"[A-Za-z0-9_.-]+", spec).group(0), spec) for spec in project["dependencies"])
    return [spec for name, spec in named if normalized(name) not in DEVICE_PROVIDES | NOT_NEEDED_THERE]


def manylinux_platforms() -> list[str]:
    """Every manylinux tag a wheel for the device may carry (x86-64, glibc up to the device's)."""
    legacy = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]
    return legacy + [f"manylinux_2_{minor}_x86_64" for minor in range(5, DEVICE_GLIBC_MINOR + 1)]


def pip_download_command(requirements: list[str], into: Path, python: str) -> list[str]:
    """pip download of the binary wheels of ``requirements`` and their needs, for CPython ``python`` on
    the device's platform, from the index pip is configured with (none named here)."""
    abi = "cp" + python.replace(".", "")
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python]
    command += ["--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none"]
    for tag in manylinux_platforms():
        command += ["--platform", tag]
    return command + ["--dest", str(into), "--progress-bar", "off", *requirements]


def gather_wheels(
    dest: Path, staging: Path, *, python: str, **_: object
) -> tuple[list[Piece], list[LeftOut]]:
    """tbgen's runtime closure for the device's Python, less what the device's image provides."""
    downloaded = staging / "wheels"
    command = pip_download_command(runtime_requirements(), downloaded, python)
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        raise CheckError(
            "pip could not download tbgen's runtime wheels for CPython "
            f"{python}:\n{tail_lines(result.stdout + result.stderr, 8)}",
            "prepare downloads from the index pip is configured with (`pip config list`); make it reachable.",
        )
    (dest / "wheels").mkdir()
    pieces = []
    left = [LeftOut(name, 0, why) for name, why in NOT_NEEDED_THERE.items()]
    for wheel in sorted(downloaded.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        if normalized(name) in DEVICE_PROVIDES:
            left.append(LeftOut(wheel.name, wheel.stat().st_size, DEVICE_PROVIDES[normalized(name)]))
            continue
        carried = dest / "wheels" / wheel.name
        shutil.copy2(wheel, carried)
        pieces.append(piece(dest, carried, f"{normalized(name)} {version}", "wheel"))
    return pieces, left


# --- the server ------------------------------------------------------------------------------------------
def needed_libraries(path: Path) -> list[str]:
    """The DT_NEEDED names of an ELF file (readelf -d)."""
    try:
        output = subprocess.run(
            ["readelf", "-d", str(path)], capture_output=True, text=True, timeout=60, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise CheckError(f"readelf could not read {path}: {err}", "Install binutils.") from err
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", output)


def server_closure(root: Path, libraries: Path) -> set[Path]:
    """The server's executable, its cache library and every bundled library they load (transitively)."""
    wanted = {root / "bin" / "tritonserver", *(root / "caches").rglob("*.so")}
    todo = list(wanted)
    while todo:
        for name in needed_libraries(todo.pop()):
            bundled = libraries / name
            if bundled.is_file() and bundled not in wanted:
                wanted.add(bundled)
                todo.append(bundled)
    return wanted


def gather_server(
    dest: Path, staging: Path, *, install: discovery.ServerInstall, release: versions.Release, **_: object
) -> tuple[list[Piece], list[LeftOut]]:
    """The embedded server's executable and libraries as the wheel lays them out, xz-compressed; the python
    backend and its stubs stay here (the check serves C++ backends)."""
    site = install.root.parent.parent  # site-packages: pytriton/tritonserver/ and nvidia_pytriton.libs/
    libraries = site / discovery.WHEEL_LIBS
    kept = server_closure(install.root, libraries)
    archive = dest / f"tritonserver-{install.version}.tar.xz"
    with tarfile.open(archive, "w:xz", preset=1) as tar:  # preset 1: 30 MB in 10 s; 6 saves 3 MB in 80 s
        for path in sorted(kept):
            tar.add(path, arcname=str(path.relative_to(site)))
    what = (
        f"tritonserver {install.version} (release {release.container}, built with CUDA "
        f"{release.cuda}: its own libcudart 12 runs on a newer driver) from nvidia-pytriton, "
        f"{len(kept)} files, {sum(p.stat().st_size for p in kept) / 1e6:.1f} MB unpacked"
    )
    return [piece(dest, archive, what, "server")], server_left_out(install.root, libraries, kept)


def server_left_out(root: Path, libraries: Path, kept: set[Path]) -> list[LeftOut]:
    """What the wheel has besides the kept files: each top-level folder of the server, each library."""
    why = "the python backend (and what only it loads): the check serves C++ backends"
    entries = [*sorted(root.iterdir()), *sorted(libraries.iterdir())]
    left = []
    for entry in entries:
        files = [p for p in ([entry] if entry.is_file() else entry.rglob("*")) if p.is_file()]
        dropped = [p for p in files if p not in kept]
        if dropped and "__pycache__" not in entry.parts:
            name = str(entry.relative_to(root.parent.parent))
            left.append(LeftOut(name, sum(p.stat().st_size for p in dropped), why))
    return left


# --- the sources and what they build with ----------------------------------------------------------------
def _skip_git(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if ".git" in Path(info.name).parts else info


def gather_sources(
    dest: Path, staging: Path, *, release: versions.Release, **_: object
) -> tuple[list[Piece], list[LeftOut]]:
    """Triton's core, common and backend at the server's release, and the googletest common's tests build,
    laid out as tbgen's source cache (<branch>/...)."""
    branch = release.branch
    cached = sources.cached_sources(branch)
    if cached is None:
        raise CheckError(
            f"Triton's {branch} sources are not in tbgen's cache ({sources.sources_dir() / branch}).",
            f"Fill it: `tbgen deps fetch --triton-version {release.container}`.",
        )
    archive = dest / f"triton-src-{branch}.tar.gz"
    googletest = googletest_sources(cached)
    with tarfile.open(archive, "w:gz") as tar:
        for repo in sources.REPOSITORIES:
            tar.add(cached / repo, arcname=f"{branch}/{repo}", filter=_skip_git)
        if googletest is not None:
            tar.add(googletest, arcname=f"{branch}/{sources.GOOGLETEST}", filter=_skip_git)
    left = []
    if googletest is None:
        left.append(LeftOut("googletest", 0, "none here: Triton's common cannot configure offline there"))
    what = f"Triton {', '.join(sources.REPOSITORIES)} at {branch}" + (
        f", googletest from {googletest}" if googletest else ""
    )
    return [piece(dest, archive, what, "sources")], left


RAPIDJSON_CONFIG = """\
# Written by scripts/gpu-check: RapidJSON's headers in this prefix's include/, as Triton's common finds them.
get_filename_component(_rapidjson_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(RAPIDJSON_INCLUDE_DIRS "${_rapidjson_prefix}/include")
set(RapidJSON_INCLUDE_DIRS "${RAPIDJSON_INCLUDE_DIRS}")
"""
RAPIDJSON_HEADERS = (Path("/usr/include"), Path("/usr/local/include"))


def gather_build_deps(dest: Path, staging: Path, **_: object) -> tuple[list[Piece], list[LeftOut]]:
    """RapidJSON (headers and a CMake package file), which Triton's common needs and the device's image may
    lack, as a CMake prefix."""
    include = next((d for d in RAPIDJSON_HEADERS if (d / "rapidjson" / "document.h").is_file()), None)
    if include is None:
        return [], [LeftOut("rapidjson", 0, "no RapidJSON headers here (rapidjson-dev): not carried")]
    config = staging / "RapidJSONConfig.cmake"
    config.write_text(RAPIDJSON_CONFIG)
    archive = dest / "build-deps.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(include / "rapidjson", arcname="include/rapidjson")
        tar.add(config, arcname="lib/cmake/RapidJSON/RapidJSONConfig.cmake")
    return [
        piece(dest, archive, f"RapidJSON headers from {include} and a CMake package file", "build-deps")
    ], []


# --- the manifest ----------------------------------------------------------------------------------------
def tree_bytes(carried: Path) -> int:
    """The bytes of the working tree that travels to the device: tracked files and untracked ones git does
    not ignore (``carried`` aside, counted apart)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = REPO / os.fsdecode(name)
        if path.is_relative_to(carried):
            continue
        with_size = path.lstat() if path.is_symlink() or path.exists() else None
        total += with_size.st_size if with_size else 0
    return total


def pip_index_settings() -> dict[str, str]:
    """The index settings pip runs with here (what `pip config list` shows), for the record."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    settings = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        if re.search(r"index|find-links", key):
            settings[key] = value.strip("'")
    return settings


def make_manifest(
    pieces: list[Piece],
    left: list[LeftOut],
    release: versions.Release,
    install: discovery.ServerInstall,
    python: str,
    tree: int,
) -> dict:
    carried = sum(p.bytes for p in pieces)
    return {
        "made_by": "scripts/gpu-check prepare",
        "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "release": release.container,
        "server_version": install.version,
        "python": python,
        "platforms": manylinux_platforms(),
        "pip_index": pip_index_settings(),
        "pieces": [dataclasses.asdict(p) for p in pieces],
        "left_out": [dataclasses.asdict(item) for item in left],
        "carried_bytes": carried,
        "tree_bytes": tree,
        "total_bytes": carried + tree,
        "limit_bytes": LIMIT_BYTES,
        "fits": carried + tree <= LIMIT_BYTES,
        "device_call": DEVICE_CALL,
    }


def megabytes(count: int) -> str:
    return f"{count / 1e6:6.1f} MB"


def print_manifest(manifest: dict) -> None:
    print(f"Carried in {CARRY_NAME}/ ({MANIFEST} lists each piece with its sha256):")
    for item in manifest["pieces"]:
        print(f"  {megabytes(item['bytes'])}  {item['name']}  ({item['what']})")
    print("Left out:")
    for item in manifest["left_out"]:
        print(f"  {megabytes(item['bytes'])}  {item['name']}: {item['why']}")
    total, limit = manifest["total_bytes"], manifest["limit_bytes"]
    verdict = "fits" if manifest["fits"] else "DOES NOT FIT"
    print(
        f"Travels: {megabytes(total).strip()} of {limit / 2**20:.0f} MiB ({limit / 1e6:.1f} MB): the working "
        f"tree {megabytes(manifest['tree_bytes']).strip()} and {CARRY_NAME}/ "
        f"{megabytes(manifest['carried_bytes']).strip()}: {verdict}"
    )
    print(USAGE)
