"""`tbgen doctor`: what building and running a backend needs, checked on this machine.

``diagnose`` returns one :class:`Diagnosis` per piece: CMake (against the release's minimum), a C++17
compiler, Ninja, git, RapidJSON, googletest, nvcc (for --gpu builds), Triton's source cache, the tritonservers
tbgen can find, and Docker. Each piece that is missing or too old carries the command that fixes it. Required
pieces (CMake, the compiler, a server) fail; the others only warn, as tbgen works without them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.deploy.tools import find_helm, helm_version
from triton_backend_gen.deploy.values import EXTRA_COMMAND as DEPLOY_EXTRA
from triton_backend_gen.discovery import SERVER_EXTRA_HINT, SOURCE_EXPLICIT, discover_servers
from triton_backend_gen.docker_engine import default_image, tbgen_containers
from triton_backend_gen.errors import TbgenError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.execution_envs import import_findings
from triton_backend_gen.scaffold import get_template, read_record
from triton_backend_gen.toolchain.build import find_nvcc, parse_nvcc_version
from triton_backend_gen.toolchain.cmake import (
    CMAKE_VARIABLE,
    cmake_executable,
    googletest_sources,
    tool_on_path,
)
from triton_backend_gen.toolchain.sources import cached_sources, missing_repositories, sources_dir

docker = lazy_module("docker")
docker_errors = lazy_module("docker.errors")

OK, WARN, FAIL = "ok", "warn", "fail"
RAPIDJSON_HEADER = "rapidjson/document.h"
RAPIDJSON_PREFIXES = (Path("/usr/include"), Path("/usr/local/include"))
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_TIMEOUT = 60
# Uses what C++17 brought (structured bindings, if constexpr, std::optional, inline variables).
_CXX17_PROGRAM = """#include <map>
#include <optional>
#include <string>
inline constexpr int kAnswer = 42;
int main() {
  std::map<std::string, int> values{{"answer", kAnswer}};
  for (const auto& [name, value] : values) {
    if constexpr (sizeof(int) >= 4) {
      std::optional<int> found = value;
      return (name.empty() || *found != kAnswer) ? 1 : 0;
    }
  }
  return 1;
}
"""


@dataclass(frozen=True)
class Diagnosis:
    """One checked piece: its status ("ok", "warn" or "fail"), what was found, and the command that fixes
    it."""

    name: str
    status: str
    found: str
    fix: str = ""
    required: bool = False

    @property
    def failed(self) -> bool:
        return self.required and self.status == FAIL


def diagnose(
    server: Path | None = None, project: Project | None = None, triton_version: str | None = None
) -> list[Diagnosis]:
    """Check everything tbgen needs for the release ``triton_version`` names (default: ``project``'s, else the
    newest); ``server`` is an explicit tritonserver, as for `tbgen serve --server`."""
    target, chosen = versions.target_release(triton_version, project.release if project is not None else None)
    return [
        *([check_project(project)] if project is not None else []),
        *(check_release_change(project) if project is not None else []),
        *(check_model_imports(project) if project is not None else []),
        *(check_batching(project) if project is not None else []),
        check_cmake(target),
        check_compiler(),
        check_ninja(),
        check_git(),
        check_rapidjson(),
        check_googletest(target),
        check_nvcc(),
        check_source_cache(target),
        *check_servers(server, target if chosen else None),
        *check_docker(target),
        *check_deploy_tools(),
    ]


# --- the checks ---------------------------------------------------------------------------------------------
def check_project(project: Project) -> Diagnosis:
    """The project's template and release, against the template tbgen now ships."""
    found = (
        f"{project.name}: {project.template} {project.template_version}, Triton {project.release.container}"
    )
    try:
        shipped = get_template(project.template).version
    except TbgenError:
        return Diagnosis("project", WARN, f"{found}; tbgen ships no template {project.template!r}")
    if shipped != project.template_version:
        return Diagnosis(
            "project",
            WARN,
            f"{found}; tbgen's {project.template} is {shipped}",
            "`tbgen update` (`tbgen check --drift` lists what you edited; your edits are kept)",
        )
    return Diagnosis("project", OK, found)


def check_batching(project: Project) -> list[Diagnosis]:
    """The models' batching strategies (batching/): whether they are built; a python project needs the C++
    toolchain for them."""
    models = project.batched_models
    if not models:
        return []
    built = sum(model.batch_strategy_library.is_file() for model in models)
    found = f"{', '.join(f'{m.name} ({m.batch_strategy})' for m in models)}: {built} of {len(models)} built"
    if not project.is_cpp:
        found += "; C++: this python project's `tbgen build` needs cmake, a C++17 compiler and RapidJSON"
    fix = f"`tbgen build{project.path_argument()}`" if built < len(models) else ""
    return [Diagnosis("batching strategies", OK if not fix else WARN, found, fix)]


def check_release_change(project: Project) -> list[Diagnosis]:
    """What changed for a backend when the project last moved to another release (by its generation
    record)."""
    try:
        record = read_record(project.root)
    except TbgenError:
        return []
    releases = record.recipe.releases if record is not None else ()
    if len(releases) < 2 or releases[-2] == releases[-1]:
        return []
    old, new = versions.resolve(releases[-2]), versions.resolve(releases[-1])
    return [
        Diagnosis(
            f"{old.container} -> {new.container}: {change.what}",
            WARN,
            f"{change.old} -> {change.new}",
            change.action,
        )
        for change in versions.release_changes(old, new)
    ]


def check_model_imports(project: Project) -> list[Diagnosis]:
    """Python models whose model.py imports what their packed environment (or, without one, tbgen's Python,
    whose stub the local server runs) does not have."""
    try:
        findings = import_findings(project, _importable)
    except TbgenError:
        return []
    rows = []
    for finding in findings:
        where = (
            f"its environment {finding.env.name}"
            if finding.env
            else "tbgen's Python (the local server's stub)"
        )
        if finding.missing:
            rows.append(
                Diagnosis(
                    f"imports of {finding.model}",
                    WARN,
                    f"{', '.join(finding.missing)}: not in {where}",
                    f"list them in model_repository/{finding.model}/requirements.txt, then `tbgen env "
                    f"pack --model {finding.model}` (with --docker for the image)",
                )
            )
        else:
            rows.append(Diagnosis(f"imports of {finding.model}", OK, f"all found in {where}"))
    return rows


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def check_cmake(release: versions.Release) -> Diagnosis:
    """The cmake every build runs ($CMAKE, else the one beside this Python, else PATH's), against the
    release's minimum."""
    executable = cmake_executable()
    cmake, fix = executable, f"pip install 'cmake>={release.min_cmake}'"
    if os.environ.get(CMAKE_VARIABLE, "").strip():
        cmake = f"{executable} (from ${CMAKE_VARIABLE})"
        fix = f"point ${CMAKE_VARIABLE} at a cmake >= {release.min_cmake}, or unset it"
    output = _output([executable, "--version"])
    if output is None:
        found = f"{cmake}: not found" if cmake != executable else "not found"
        return Diagnosis("cmake", FAIL, found, fix, required=True)
    found = _version_in(output)
    if found is None:
        return Diagnosis("cmake", FAIL, f"{cmake}: unreadable version", fix, required=True)
    text = ".".join(map(str, found))
    if found < versions.version_tuple(release.min_cmake):
        return Diagnosis(
            "cmake",
            FAIL,
            f"{text} at {cmake}; {release.branch} needs >= {release.min_cmake}",
            fix,
            required=True,
        )
    return Diagnosis(
        "cmake", OK, f"{text} at {cmake} (>= {release.min_cmake} for {release.branch})", required=True
    )


def check_compiler() -> Diagnosis:
    fix = "sudo apt-get install g++"
    compiler = next(
        filter(None, (_which(name) for name in (os.environ.get("CXX"), "c++", "g++", "clang++"))), None
    )
    if compiler is None:
        return Diagnosis("C++17 compiler", FAIL, "no $CXX, c++, g++ or clang++", fix, required=True)
    with tempfile.TemporaryDirectory(prefix="tbgen-doctor-") as scratch:
        source = Path(scratch) / "cxx17.cc"
        source.write_text(_CXX17_PROGRAM)
        try:
            result = subprocess.run(
                [
                    compiler,
                    "-std=c++17",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    str(source),
                    "-o",
                    str(Path(scratch) / "cxx17"),
                ],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return Diagnosis("C++17 compiler", FAIL, f"{compiler} could not run: {err}", fix, required=True)
    if result.returncode != 0:
        first = next(
            (line for line in result.stderr.splitlines() if line.strip()), f"exit {result.returncode}"
        )
        return Diagnosis(
            "C++17 compiler", FAIL, f"{compiler} cannot compile C++17: {first}", fix, required=True
        )
    version = (_output([compiler, "--version"]) or "").splitlines()
    return Diagnosis(
        "C++17 compiler",
        OK,
        f"{compiler} ({version[0].strip() if version else 'unknown version'})",
        required=True,
    )


def check_ninja() -> Diagnosis:
    ninja = tool_on_path("ninja")
    if ninja is None:
        return Diagnosis(
            "ninja",
            WARN,
            "not found (CMake falls back to make, without a build progress bar)",
            "pip install ninja",
        )
    version = (_output([ninja, "--version"]) or "").strip()
    return Diagnosis("ninja", OK, f"{version or 'unknown version'} at {ninja}")


def check_git() -> Diagnosis:
    git = shutil.which("git")
    if git is None:
        return Diagnosis(
            "git",
            WARN,
            "not found (`tbgen update` merges your edits with git merge-file)",
            "apt-get install git",
        )
    return Diagnosis("git", OK, (_output([git, "--version"]) or "").strip() or git)


def check_rapidjson() -> Diagnosis:
    for prefix in RAPIDJSON_PREFIXES:
        if (prefix / RAPIDJSON_HEADER).is_file():
            return Diagnosis("rapidjson", OK, str(prefix / "rapidjson"))
    return Diagnosis(
        "rapidjson",
        WARN,
        f"no {RAPIDJSON_HEADER} (Triton's common needs it for C++ builds)",
        "sudo apt-get install rapidjson-dev",
    )


def check_googletest(release: versions.Release) -> Diagnosis:
    found = googletest_sources(cached_sources(release.branch))
    if found is not None:
        return Diagnosis("googletest", OK, str(found))
    return Diagnosis(
        "googletest",
        WARN,
        "not cached and no /usr/src/googletest (C++ builds would download it)",
        f"`tbgen deps fetch --triton-version {release.container}` (or: sudo apt-get install googletest)",
    )


def check_nvcc() -> Diagnosis:
    """The nvcc `tbgen build --gpu` would use (the build's own lookup and version parsing)."""
    fix = "install the CUDA toolkit (12.x or 13.x), e.g. sudo apt-get install nvidia-cuda-toolkit"
    nvcc = find_nvcc()
    if nvcc is None:
        return Diagnosis("nvcc (for --gpu)", WARN, "not found; only CPU builds are possible", fix)
    try:
        version = parse_nvcc_version(_output([str(nvcc), "--version"]) or "")
        archs = versions.cuda_architectures_for(version)
    except TbgenError as err:
        return Diagnosis("nvcc (for --gpu)", WARN, f"{nvcc}: {err.message}", fix)
    return Diagnosis("nvcc (for --gpu)", OK, f"{version} at {nvcc}; architectures {';'.join(archs)}")


def check_source_cache(release: versions.Release) -> Diagnosis:
    entry = sources_dir() / release.branch
    missing = missing_repositories(release.branch)
    if not missing:
        return Diagnosis(f"Triton sources {release.branch}", OK, f"{entry} (offline builds)")
    return Diagnosis(
        f"Triton sources {release.branch}",
        WARN,
        f"{entry} lacks {', '.join(missing)} (builds clone them with network)",
        f"`tbgen deps fetch --triton-version {release.container}`",
    )


def check_servers(server: Path | None, release: versions.Release | None) -> list[Diagnosis]:
    """One row per tritonserver found (the first is the one tbgen uses; it warns when ``release`` is another),
    or one failing row when none is."""
    rows: list[Diagnosis] = []
    looked: list[str] = []
    used = False
    for source, install, note in discover_servers(server):
        if install is None:
            looked.append(f"{source}: {note}")
            if source == SOURCE_EXPLICIT:
                rows.append(
                    Diagnosis(
                        f"tritonserver ({source})",
                        FAIL,
                        note,
                        "pass --server the path of a tritonserver executable",
                        required=True,
                    )
                )
            continue
        found = f"{'' if used else 'used: '}{install.describe()}"
        fix = ""
        if not used and release is not None and install.release is not None and install.release != release:
            found += f" (the target is {release.container})"
            fix = f"pass --server a {release.container} tritonserver, e.g. from {release.image}"
        rows.append(Diagnosis(f"tritonserver ({source})", OK if not fix else WARN, found, fix, required=True))
        used = True
    if not used:
        rows.append(
            Diagnosis(
                "tritonserver",
                FAIL,
                "none found; looked at " + "; ".join(looked),
                SERVER_EXTRA_HINT,
                required=True,
            )
        )
    return rows


def check_docker(target: versions.Release) -> list[Diagnosis]:
    """The Docker engine (through the docker SDK), the release's image, and containers tbgen left behind."""
    try:
        client = docker.from_env(timeout=10)
        version = client.version().get("Version", "unknown version")
    except (docker_errors.DockerException, OSError) as err:  # requests' errors are OSErrors
        fix = (
            "sudo systemctl start docker  (or: sudo dockerd &)"
            if _which("dockerd")
            else "sudo apt-get install docker.io"
        )
        return [Diagnosis("docker", WARN, f"engine not reachable (only --docker needs it): {err}", fix)]
    rows = [Diagnosis("docker", OK, f"engine {version}")]
    image = default_image(target)
    try:
        client.images.get(image)
        rows.append(Diagnosis("docker image", OK, image))
    except docker_errors.ImageNotFound:
        rows.append(
            Diagnosis(
                "docker image",
                WARN,
                f"{image} is not on the engine (--docker needs it)",
                f"docker pull {image}",
            )
        )
    leftovers = tbgen_containers(client)
    if leftovers:
        names = ", ".join(f"{c.name} ({c.status}, {c.labels.get('tbgen.role', '?')})" for c in leftovers)
        rows.append(
            Diagnosis("tbgen containers", WARN, f"left behind: {names}", "`tbgen clean --containers`")
        )
    else:
        rows.append(Diagnosis("tbgen containers", OK, "none left behind"))
    return rows


# --- helpers ------------------------------------------------------------------------------------------------
def check_deploy_tools() -> list[Diagnosis]:
    """What `tbgen deploy` needs (the deploy extra): helm, kubernetes-validate and yamllint; warnings only."""
    fix = DEPLOY_EXTRA
    try:
        helm = find_helm()
        rows = [Diagnosis("helm (for `tbgen deploy`)", OK, f"{helm_version(helm)} at {helm}")]
    except TbgenError as err:
        rows = [Diagnosis("helm (for `tbgen deploy`)", WARN, err.message, fix)]
    for dist, use in (("kubernetes-validate", "Kubernetes schemas"), ("yamllint", "YAML lint")):
        try:
            rows.append(
                Diagnosis(f"{dist} (for `tbgen deploy`)", OK, f"{importlib.metadata.version(dist)} ({use})")
            )
        except importlib.metadata.PackageNotFoundError:
            rows.append(
                Diagnosis(
                    f"{dist} (for `tbgen deploy`)", WARN, "not installed (`tbgen deploy check` needs it)", fix
                )
            )
    return rows


def _which(name: str | None) -> str | None:
    return shutil.which(name) if name else None


def _output(command: list[str]) -> str | None:
    """stdout+stderr of ``command``, or None when it cannot run or fails."""
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout + result.stderr if result.returncode == 0 else None


def _version_in(text: str) -> tuple[int, ...] | None:
    match = _VERSION.search(text)
    return tuple(int(part) for part in match.groups() if part is not None) if match else None
