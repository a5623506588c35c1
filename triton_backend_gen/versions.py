"""The Triton release matrix: every fact tbgen needs about a Triton release, in one place.

Other modules ask this one (``resolve``, ``newest``, ``cuda_architectures_for``) and hold no version
literals of their own. Where each column comes from:

- ``container`` / ``server_version``: the server repository's ``TRITON_VERSION`` file and the
  ``TRITON_VERSION_MAP`` / ``DEFAULT_TRITON_VERSION_MAP`` of its ``build.py`` on branch rYY.MM.
  The server version moves one minor per month, except 25.07, which was built out of 25.06 and is
  2.59.1 (the r25.07 release notes say so).
- ``python``: the Ubuntu base of the container (``base_image`` and the cuda-keyring repository in
  ``build.py``): Ubuntu 22.04 with Python 3.10 up to 24.10, Ubuntu 24.04 with Python 3.12 from 24.11
  (the 24.12 release notes: "Ubuntu 24.04 including Python 3.12"; the release compatibility table in
  the server docs lists 3.10.12 for 24.10 and 3.12.3 for 24.11).
- ``cuda``: "Release YY.MM is based on CUDA x.y.z" in each release's notes (24.01, 24.02, 24.06,
  24.07, 24.10, 24.12, 25.01, 25.03, 25.04, 25.06, 25.08, 25.10, 26.02; 25.07 is built out of 25.06).
  Where the notes give no patch level (24.04, 24.05) or were not at hand (24.08, 24.09, 24.11, 25.02,
  25.05, 25.09, 25.11, 25.12, 26.01): the CUDA column of the release compatibility table in the server
  docs (docs/introduction/compatibility.md, vllm-python-py3 images; it agrees with the notes for
  24.04-25.04, 25.10 and 26.02 and trails them by a patch for 25.06 and 25.08). 24.03's notes name no
  CUDA version; 12.4.0 is that month's NGC CUDA and was not confirmed from a source at hand.
- ``backend_api`` / ``server_api``: ``TRITONBACKEND_API_VERSION_MAJOR/MINOR`` in
  core's include/triton/core/tritonbackend.h and ``TRITONSERVER_API_VERSION_MAJOR/MINOR`` in
  tritonserver.h, on branch rYY.MM (tests compare them with the headers when a checkout is at hand).
- ``min_cmake``: the highest ``cmake_minimum_required`` of the CMakeLists.txt of backend, core and
  common on branch rYY.MM (core asks 3.18 where the others ask 3.17; all three ask 3.31.8 from r25.08).
- ``cuda_architectures``: derived from ``cuda`` by ``cuda_architectures_for`` (what that nvcc can
  build, Turing and newer; checked against ``nvcc --list-gpu-arch`` of CUDA 13.0).

- ``FEATURES``: the first release of each change in Triton's code that a generated backend follows
  (readiness, the rules a newer server enforces), each read from that release's branch; a release
  ``has`` a feature from that release on.

26.03 to 26.08 (server branches r26.03 to r26.08): server version and Ubuntu from each branch's
``TRITON_VERSION`` and ``build.py``; CUDA from the compatibility table of the server's r26.08 docs (no
release notes at hand); API versions and CMake minimum from core and common r26.03 to r26.06. Core has no
r26.07 or r26.08 branch at hand: for those two, the API versions and CMake minimum are those of core's
main of June 2026 and common r26.07 (1.19, 1.34 and 3.31.8, unchanged since 25.08), and a build fetches
the r26.07/r26.08 tags like any other. A release published after this matrix is not known: tbgen says so
and how to build against it with explicit repository tags.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from triton_backend_gen.errors import UnknownReleaseError, UsageError

NGC_IMAGE = "nvcr.io/nvidia/tritonserver"


@dataclass(frozen=True)
class Release:
    """One monthly Triton release (NGC container YY.MM, repository branch rYY.MM)."""

    container: str
    server_version: str
    python: str
    cuda: str
    backend_api: tuple[int, int]
    server_api: tuple[int, int]
    cuda_architectures: tuple[str, ...]
    min_cmake: str

    @property
    def branch(self) -> str:
        """The tag of core/common/backend (and server) for this release, e.g. "r24.10"."""
        return f"r{self.container}"

    @property
    def image(self) -> str:
        """The NGC image of this release's server, e.g. "nvcr.io/nvidia/tritonserver:24.10-py3"."""
        return f"{NGC_IMAGE}:{self.container}-py3"

    def has(self, feature: str) -> bool:
        """Whether this release has ``feature`` (a key of FEATURES): it is that feature's first release or
        newer."""
        return version_tuple(self.container) >= version_tuple(FEATURES[feature].since)


# --- What changed in Triton's code, by release -----------------------------------------------------
@dataclass(frozen=True)
class Feature:
    """A change in Triton's code that generated backends follow: its first release (read from that
    release's branch; the branch before lacks it), what it is, and what a project moving to it does."""

    since: str
    what: str
    action: str


FEATURES: dict[str, Feature] = {
    "checked_counts": Feature(
        "25.05",
        "GetElementCount/GetByteSize returning errors",
        "backend utilities (backend_common.h) add overloads that report overflow and deprecate the old ones "
        "in comments; nothing to do for generated C++, which calls neither",
    ),
    "instance_ready": Feature(
        "25.12",
        "TRITONBACKEND_ModelInstanceReady",
        "core asks it on every model-ready probe (optional); generated C++ backends export it from this "
        "release and report not ready after an unrecoverable error (`tbgen update`)",
    ),
    "python_instance_ready": Feature(
        "25.12",
        "python instances report their stub's health",
        "python_backend implements TRITONBACKEND_ModelInstanceReady: a model whose stub died answers not "
        "ready (before, the server kept answering ready: server issue #8604); `tbgen test` checks it there",
    ),
    "python_is_ready": Feature(
        "26.03",
        "python is_ready()",
        "the stub asks a model's is_ready() on every model-ready probe (5 s timeout); generated python "
        "models define it from this release (`tbgen update`)",
    ),
    "server_ready_checks_instances": Feature(
        "26.04",
        "server ready checks instances",
        "the server's ready endpoint fails while an instance of a READY model reports not ready: a "
        "readiness probe (Kubernetes) now takes the pod out on one unhealthy instance",
    ),
    "confined_batch_strategy_path": Feature(
        "26.06",
        "batching library inside the model",
        "TRITON_BATCH_STRATEGY_PATH must resolve inside the model's directory (core: \"Batching library path "
        'escapes model repository"); `tbgen validate` checks it',
    ),
    "secure_env_extraction": Feature(
        "26.06",
        "secure EXECUTION_ENV_PATH unpacking",
        "python_backend unpacks environment archives with libarchive's SECURE_NODOTDOT, "
        "SECURE_NOABSOLUTEPATHS and SECURE_SYMLINKS: repack with `tbgen env pack`; `tbgen validate` checks "
        "an archive",
    ),
}


# --- CUDA architectures --------------------------------------------------------------------------
# Turing (75) is the oldest architecture CUDA 13 builds for and the oldest the 25.xx containers
# support ("compute capability 7.5 and later"); tbgen builds for Turing and newer with every CUDA.
# Per CUDA release, the architectures nvcc accepts that a Triton server realistically runs on:
# 89/90 exist since CUDA 11.8; 100 (B200), 101 (Thor) and 120 (RTX 50xx) arrive with 12.8;
# CUDA 13.0 renames Thor to 110 and drops everything older than 75.
# Left out on purpose: Jetson-only 87/88, and 103/121 (built as 100/120 code runs there via PTX).
_ARCHS_CUDA_12 = ("75", "80", "86", "89", "90")
_ARCHS_CUDA_12_8 = (*_ARCHS_CUDA_12, "100", "101", "120")
_ARCHS_CUDA_13 = (*_ARCHS_CUDA_12, "100", "110", "120")
_OLDEST_CUDA = (12, 0)


def _parse_cuda_version(cuda_version: str) -> tuple[int, int]:
    match = re.fullmatch(r"[vV]?(\d+)\.(\d+)(?:\.\d+)*", cuda_version.strip())
    if not match:
        raise UsageError(
            f"'{cuda_version}' is not a CUDA version",
            hint="Give it as MAJOR.MINOR[.PATCH], as `nvcc --version` prints it, e.g. 12.6 or 13.0.88.",
        )
    return int(match.group(1)), int(match.group(2))


def cuda_architectures_for(cuda_version: str) -> tuple[str, ...]:
    """The CMAKE_CUDA_ARCHITECTURES list to build with for an nvcc of ``cuda_version`` ("12.6.2", "13.0").

    Raises UsageError for a CUDA this matrix does not cover (older than 12.0, or a newer major)."""
    major, minor = _parse_cuda_version(cuda_version)
    if major == 12:
        return _ARCHS_CUDA_12_8 if minor >= 8 else _ARCHS_CUDA_12
    if major == 13:
        return _ARCHS_CUDA_13
    oldest = ".".join(map(str, _OLDEST_CUDA))
    raise UsageError(
        f"CUDA {cuda_version.strip()} is not supported for GPU builds",
        hint=f"tbgen builds CUDA kernels with CUDA {oldest} through 13.x, as the supported Triton "
        "releases ship; install one of those toolkits or build without --gpu.",
    )


# --- The matrix ------------------------------------------------------------------------------------
def _release(
    container: str,
    server_version: str,
    python: str,
    cuda: str,
    backend_api: tuple[int, int],
    server_api: tuple[int, int],
    min_cmake: str,
) -> Release:
    return Release(
        container=container,
        server_version=server_version,
        python=python,
        cuda=cuda,
        backend_api=backend_api,
        server_api=server_api,
        cuda_architectures=cuda_architectures_for(cuda),
        min_cmake=min_cmake,
    )


RELEASES: tuple[Release, ...] = (
    # container server     python  cuda      backend  server   min cmake
    _release("24.01", "2.42.0", "3.10", "12.3.2", (1, 17), (1, 28), "3.18"),
    _release("24.02", "2.43.0", "3.10", "12.3.2", (1, 18), (1, 28), "3.18"),
    _release("24.03", "2.44.0", "3.10", "12.4.0", (1, 19), (1, 29), "3.18"),
    _release("24.04", "2.45.0", "3.10", "12.4.1", (1, 19), (1, 30), "3.18"),
    _release("24.05", "2.46.0", "3.10", "12.4.1", (1, 19), (1, 31), "3.18"),
    _release("24.06", "2.47.0", "3.10", "12.5.0", (1, 19), (1, 32), "3.18"),
    _release("24.07", "2.48.0", "3.10", "12.5.1", (1, 19), (1, 33), "3.18"),
    _release("24.08", "2.49.0", "3.10", "12.6.0", (1, 19), (1, 34), "3.18"),
    _release("24.09", "2.50.0", "3.10", "12.6.1", (1, 19), (1, 34), "3.18"),
    _release("24.10", "2.51.0", "3.10", "12.6.2", (1, 19), (1, 34), "3.18"),
    _release("24.11", "2.52.0", "3.12", "12.6.3", (1, 19), (1, 34), "3.18"),
    _release("24.12", "2.53.0", "3.12", "12.6.3", (1, 19), (1, 34), "3.18"),
    _release("25.01", "2.54.0", "3.12", "12.8.0", (1, 19), (1, 34), "3.18"),
    _release("25.02", "2.55.0", "3.12", "12.8.0", (1, 19), (1, 34), "3.18"),
    _release("25.03", "2.56.0", "3.12", "12.8.1", (1, 19), (1, 34), "3.18"),
    _release("25.04", "2.57.0", "3.12", "12.9.0", (1, 19), (1, 34), "3.18"),
    _release("25.05", "2.58.0", "3.12", "12.9.0", (1, 19), (1, 34), "3.18"),
    _release("25.06", "2.59.0", "3.12", "12.9.1", (1, 19), (1, 34), "3.18"),
    _release("25.07", "2.59.1", "3.12", "12.9.1", (1, 19), (1, 34), "3.18"),
    _release("25.08", "2.60.0", "3.12", "13.0.0", (1, 19), (1, 34), "3.31.8"),
    _release("25.09", "2.61.0", "3.12", "13.0.1", (1, 19), (1, 34), "3.31.8"),
    _release("25.10", "2.62.0", "3.12", "13.0.2", (1, 19), (1, 34), "3.31.8"),
    _release("25.11", "2.63.0", "3.12", "13.0.2", (1, 19), (1, 34), "3.31.8"),
    _release("25.12", "2.64.0", "3.12", "13.1.0", (1, 19), (1, 34), "3.31.8"),
    _release("26.01", "2.65.0", "3.12", "13.1.1", (1, 19), (1, 34), "3.31.8"),
    _release("26.02", "2.66.0", "3.12", "13.1.1", (1, 19), (1, 34), "3.31.8"),
    _release("26.03", "2.67.0", "3.12", "13.2.0", (1, 19), (1, 34), "3.31.8"),
    _release("26.04", "2.68.0", "3.12", "13.2.1", (1, 19), (1, 34), "3.31.8"),
    _release("26.05", "2.69.0", "3.12", "13.2.1", (1, 19), (1, 34), "3.31.8"),
    _release("26.06", "2.70.0", "3.12", "13.3.0", (1, 19), (1, 34), "3.31.8"),
    _release("26.07", "2.71.0", "3.12", "13.3.0", (1, 19), (1, 34), "3.31.8"),
    _release("26.08", "2.72.0", "3.12", "13.4.1", (1, 19), (1, 34), "3.31.8"),
)

_BY_CONTAINER = {release.container: release for release in RELEASES}
_BY_SERVER_VERSION = {release.server_version: release for release in RELEASES}


def version_tuple(text: str) -> tuple[int, ...]:
    """ "3.31.8" -> (3, 31, 8), for comparing versions."""
    return tuple(int(part) for part in text.split("."))


def newest() -> Release:
    """The newest release in the matrix: tbgen's default."""
    return RELEASES[-1]


DEFAULT_VARIABLE = "TBGEN_TRITON_VERSION"


def default_release() -> Release:
    """The release tbgen targets when none is given (new projects, `tbgen update`, a bare `tbgen doctor`):
    $TBGEN_TRITON_VERSION (a site that builds offline against the releases its source cache holds), else the
    newest."""
    spec = os.environ.get(DEFAULT_VARIABLE, "").strip()
    if not spec:
        return newest()
    try:
        return resolve(spec)
    except UnknownReleaseError as err:
        raise UnknownReleaseError(f"${DEFAULT_VARIABLE}: {err.message}", hint=err.hint) from None


def update_target(current: Release) -> Release:
    """The release `tbgen update` moves a project at ``current`` to when none is given: the default release,
    never an older one than the project's (a site's $TBGEN_TRITON_VERSION does not downgrade a project)."""
    target = default_release()
    return target if version_tuple(target.container) > version_tuple(current.container) else current


def known_releases_hint() -> str:
    """One line naming every known release with its server version, for error hints."""
    listed = ", ".join(f"{r.container} ({r.server_version})" for r in RELEASES)
    return f"Known releases: {listed}; newest: {newest().container}."


def target_release(spec: str | None, default: Release | None = None) -> tuple[Release, bool]:
    """The release ``spec`` names, else ``default`` (a project's), else the default release; and whether it
    was chosen (given or the project's) rather than defaulted."""
    if spec:
        return resolve(spec), True
    if default is not None:
        return default, True
    return default_release(), False


def resolve(spec: str) -> Release:
    """The release ``spec`` names: container "24.10", branch "r24.10" or server version "2.51.0" / "v2.51.0".

    Raises UnknownReleaseError, whose hint lists the known releases, for anything else."""
    text = spec.strip()
    lowered = text.lower()
    if re.fullmatch(r"r?\d{2}\.\d{2}", lowered):
        release = _BY_CONTAINER.get(lowered.removeprefix("r"))
    elif re.fullmatch(r"v?\d+\.\d+\.\d+", lowered):
        release = _BY_SERVER_VERSION.get(lowered.removeprefix("v"))
    else:
        release = None
    newer = _newer_than_known(lowered)
    if release is None and newer:
        raise UnknownReleaseError(
            f"Triton '{text}' is newer than the releases this tbgen knows (24.01 to {newest().container}, "
            f"server {RELEASES[0].server_version} to {newest().server_version})",
            hint=_newer_release_hint(newer),
        )
    if release is None:
        raise UnknownReleaseError(
            f"Unknown Triton version '{text}': give a container (24.10), a branch (r24.10) "
            "or a server version (2.51.0)",
            hint=known_releases_hint(),
        )
    return release


def _newer_than_known(lowered: str) -> str | None:
    """The branch ("r26.09") of a container, branch or server version spelled ``lowered`` that comes after
    the newest release (a server version counted one minor per month), else None."""
    last = newest()
    year, month = version_tuple(last.container)
    if re.fullmatch(r"r?\d{2}\.\d{2}", lowered):
        container = lowered.removeprefix("r")
        return f"r{container}" if version_tuple(container) > (year, month) else None
    if re.fullmatch(r"v?\d+\.\d+\.\d+", lowered):
        major, minor, _ = version_tuple(lowered.removeprefix("v"))
        last_major, last_minor, _ = version_tuple(last.server_version)
        if (major, minor) <= (last_major, last_minor) or major != last_major:
            return None
        months = year * 12 + month - 1 + (minor - last_minor)
        return f"r{months // 12:02d}.{months % 12 + 1:02d}"
    return None


def _newer_release_hint(branch: str) -> str:
    """How to build against ``branch``, published after this matrix: the newest known release's facts, with
    Triton's repositories at the newer tag, in a build tree of its own (tbgen's build/ keeps the cached
    sources of the project's release in its CMake cache)."""
    tree = f"build-{branch}"
    return (
        f"A newer tbgen knows its facts. Meanwhile target the newest known release (--triton-version "
        f"{newest().container}, or triton_version in tbgen.toml); a C++ project then builds against {branch} "
        f"with explicit tags, from its folder: cmake -S . -B {tree} -DCMAKE_BUILD_TYPE=Release "
        f"-DTRITON_COMMON_REPO_TAG={branch} -DTRITON_CORE_REPO_TAG={branch} "
        f"-DTRITON_BACKEND_REPO_TAG={branch} && cmake --build {tree} && cmake --install {tree} --prefix "
        f"{tree}/install"
    )


@dataclass(frozen=True)
class ReleaseChange:
    """One fact that differs between two releases and matters to a backend, with what to do about it."""

    what: str
    old: str
    new: str
    action: str


def release_changes(old: Release, new: Release) -> list[ReleaseChange]:
    """What changed from ``old`` to ``new`` that a backend project must follow (empty for the same facts)."""
    rows = (
        (
            "backend API",
            "{:d}.{:d}".format(*old.backend_api),
            "{:d}.{:d}".format(*new.backend_api),
            "rebuild the backend (`tbgen build`); a library built against a newer API does not load in an "
            "older server",
        ),
        (
            "server API",
            "{:d}.{:d}".format(*old.server_api),
            "{:d}.{:d}".format(*new.server_api),
            "rebuild the backend; BLS code calling TRITONSERVER_* may use what the new API adds",
        ),
        (
            "CMake minimum",
            old.min_cmake,
            new.min_cmake,
            f"pip install 'cmake>={new.min_cmake}' (`tbgen doctor` checks it)",
        ),
        (
            "Python of the stub",
            old.python,
            new.python,
            f"rebuild Python execution environments and native extensions for Python {new.python}",
        ),
        (
            "CUDA",
            old.cuda,
            new.cuda,
            "build GPU code with this CUDA (the image's nvcc); check your kernels with it",
        ),
        (
            "CUDA architectures",
            ";".join(old.cuda_architectures),
            ";".join(new.cuda_architectures),
            "GPU builds target this list (cuda_architectures in tbgen.toml's answers)",
        ),
    )
    changes = [
        ReleaseChange(what, before, after, action) for what, before, after, action in rows if before != after
    ]
    for key, feature in FEATURES.items():
        if old.has(key) != new.has(key):
            changes.append(
                ReleaseChange(
                    f"{feature.what} (since {feature.since})",
                    "yes" if old.has(key) else "no",
                    "yes" if new.has(key) else "no",
                    feature.action,
                )
            )
    return changes
