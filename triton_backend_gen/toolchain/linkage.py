"""Where the shared objects a built backend needs resolve: on this machine, and in a container image.

``tbgen check --docker`` runs ``ldd`` on the backend in a container of the image, with the backend's directory
mounted read-only where the server loads it from (``/opt/tritonserver/backends/<name>``) and LD_LIBRARY_PATH
as tritonserver has it there (``/opt/tritonserver/lib``, the backend's directory, then the image's own), and
names each library the image lacks with its fix. ``tbgen package`` stages the backend with what the image
lacks: it copies the installed backend directory, then, as long as ``ldd`` in the image reports a library "not
found", puts the file this machine resolves for it beside the backend (the backend's ``$ORIGIN`` RPATH, a
DT_RPATH, finds it there, and finds its own dependencies there too). That stops at what the image has, so
only the part of the transitive closure that the image lacks is carried.

The parsers and decisions are pure; ``resolve_on_host``, ``resolve_in_image``, ``needed_graph``,
``apt_package`` and ``stage_backend`` run ldd, readelf, dpkg and containers.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from triton_backend_gen.docker_engine import (
    CONTAINER_HOME,
    ROLE_CHECK,
    Mount,
    invoking_user,
    labels,
    orphans,
    remove_containers,
    run_container,
    tbgen_containers,
)
from triton_backend_gen.errors import BuildError
from triton_backend_gen.findings import Finding
from triton_backend_gen.toolchain.symbols import (
    Resolution,
    needed_by,
    needed_graph,
    parse_ldd,
)

# The NGC image's layout (as runtime.container serves it).
IMAGE_LIBRARY_DIR = PurePosixPath("/opt/tritonserver/lib")
IMAGE_BACKENDS = PurePosixPath("/opt/tritonserver/backends")
MAX_CARRY_ROUNDS = 20  # one round a level of the dependency tree the image lacks

_DPKG_LINE = re.compile(r"^([^:\s]+)(?::[^:\s]+)?(?:,\s*[^:]+)*:\s+(/\S+)$")


def parse_dpkg_search(output: str) -> str | None:
    """The package of ``dpkg -S PATH`` output ("libfmt9:amd64: /usr/lib/.../libfmt.so.9.1.0" -> "libfmt9")."""
    for line in output.splitlines():
        match = _DPKG_LINE.match(line.strip())
        if match:
            return match.group(1)
    return None


def dpkg_candidates(path: str) -> list[str]:
    """The names dpkg may have recorded a library under: as given, resolved, and with or without /usr (merged
    /usr systems resolve /lib/... to /usr/lib/..., and packages record either)."""
    names = [path, os.path.realpath(path)]
    for name in list(names):
        names.append(name.removeprefix("/usr") if name.startswith("/usr/") else "/usr" + name)
    return list(dict.fromkeys(names))


def image_findings(
    library: str,
    image: str,
    in_image: Resolution,
    on_host: Resolution,
    graph: Mapping[str, Iterable[str]],
    packages: Mapping[str, str],
) -> list[Finding]:
    """One error per library the image lacks, naming what needs it and the fix, and per symbol version it
    lacks.

    ``on_host``: the same library resolved on this machine (where the fix can come from); ``packages``: the
    Debian package of each host file dpkg knows."""
    findings = []
    for name in in_image.missing:
        needers = needed_by(name, graph, library)
        if name in on_host.found:
            package = packages.get(name)
            also = f"; or install it in the image (apt-get install {package})" if package else ""
            findings.append(
                Finding(
                    "error",
                    f"{name}, which {needers}, is not in {image}: `tbgen package` "
                    f"carries it beside the backend ({on_host.found[name]} from this "
                    f"machine){also}",
                )
            )
        else:
            findings.append(
                Finding(
                    "error",
                    f"{name}, which {needers}, is not in {image}, nor found on this "
                    "machine: install it in the image (or here, and `tbgen package` "
                    "carries it)",
                )
            )
    for line in in_image.version_errors:
        findings.append(
            Finding(
                "error",
                f"in {image}: {line}: the backend or a library it links was built against "
                "newer libraries than the image has; build in the image (`tbgen build "
                "--docker`), or on a machine of the image's distribution",
            )
        )
    return findings


def carry_round(
    missing: Iterable[str], on_host: Resolution, carried: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """One round of staging: the files to put beside the backend (soname -> host path) for the libraries the
    image still lacks, and those this machine cannot give (not found here, or carried already and still
    missing)."""
    new: dict[str, str] = {}
    unresolvable: list[str] = []
    for name in missing:
        if name in on_host.found and name not in carried:
            new[name] = on_host.found[name]
        else:
            unresolvable.append(name)
    return new, unresolvable


def ldd_script(backend_dir: PurePosixPath, library: str) -> str:
    """The shell command of an ldd container: LD_LIBRARY_PATH as tritonserver has it in the image."""
    path = f"{IMAGE_LIBRARY_DIR}:{backend_dir}"
    return (
        f'export LD_LIBRARY_PATH="{path}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"; '
        f"exec ldd {shlex.quote(str(backend_dir / library))}"
    )


def ldd_spec(
    image: str, backend_dir: Path, backend: str, library: str, labelled: Path, *, user: str | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for ldd on the backend in ``image``: its directory
    mounted read-only at /opt/tritonserver/backends/<backend>, no network."""
    target = IMAGE_BACKENDS / backend
    return {
        "image": image,
        "command": ["sh", "-c", ldd_script(target, library)],
        "volumes": dict([Mount(backend_dir.resolve(), Path(target)).volume()]),
        "network_mode": "none",
        "user": user or invoking_user(),
        "environment": {"HOME": CONTAINER_HOME},
        "labels": labels(ROLE_CHECK, labelled),
        "detach": True,
    }


# --- running ldd, readelf, dpkg and containers --------------------------------------------------------------
def resolve_on_host(library: Path, env: Mapping[str, str] | None = None) -> Resolution:
    return parse_ldd(_run(["ldd", str(library)], env=env).stdout)


def resolve_in_image(
    client: Any, image: str, backend_dir: Path, backend: str, library: str, labelled: Path, log_file: Path
) -> Resolution:
    """ldd of ``backend_dir/library`` in a container of ``image`` (removed afterwards); its output is in
    ``log_file``."""
    remove_containers(orphans(tbgen_containers(client)))
    status = run_container(client, ldd_spec(image, backend_dir, backend, library, labelled), log_file)
    output = log_file.read_text(errors="replace")
    resolution = parse_ldd(output)
    if status != 0 and not (resolution.found or resolution.missing or resolution.version_errors):
        raise BuildError(
            f"ldd on {library} in {image} failed (exit status {status}): {output.strip()[-500:]}",
            f"The image needs ldd (libc-bin) and the /opt/tritonserver layout. Log: {log_file}",
        )
    return resolution


def apt_package(path: str) -> str | None:
    """The Debian package that installed ``path`` on this machine (``dpkg -S``), or None."""
    if shutil.which("dpkg") is None:
        return None
    for candidate in dpkg_candidates(path):
        package = parse_dpkg_search(_run(["dpkg", "-S", candidate]).stdout)
        if package:
            return package
    return None


def check_in_image(
    client: Any, image: str, library: Path, backend: str, labelled: Path, log_file: Path
) -> list[Finding]:
    """`tbgen check --docker`: every library ``library`` needs that ``image`` does not give, with its fix."""
    in_image = resolve_in_image(client, image, library.parent, backend, library.name, labelled, log_file)
    if not (in_image.missing or in_image.version_errors):
        return []
    on_host = resolve_on_host(library)
    graph = needed_graph(library, on_host.found)
    packages = {
        name: package
        for name in in_image.missing
        if name in on_host.found
        if (package := apt_package(on_host.found[name]))
    }
    return image_findings(library.name, image, in_image, on_host, graph, packages)


def stage_backend(
    client: Any,
    image: str,
    installed: Path,
    backend: str,
    library: str,
    staging: Path,
    labelled: Path,
    log_file: Path,
) -> dict[str, str]:
    """Copy the installed backend directory to ``staging`` and add the shared objects ``image`` lacks,
    resolved on this machine; the carried libraries (soname -> host path). BuildError when the image would
    still not load it (a library neither side has, or symbol versions the image's libraries lack)."""
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(installed, staging)
    on_host = resolve_on_host(staging / library)
    carried: dict[str, str] = {}
    for _ in range(MAX_CARRY_ROUNDS):
        in_image = resolve_in_image(client, image, staging, backend, library, labelled, log_file)
        problems = image_findings(
            library, image, Resolution({}, (), in_image.version_errors), on_host, {}, {}
        )
        if problems:
            raise BuildError(
                problems[0].message,
                "`tbgen package` carries what the image lacks, but cannot make "
                "the image's own libraries newer.",
            )
        if not in_image.missing:
            return carried
        new, unresolvable = carry_round(in_image.missing, on_host, carried)
        if unresolvable:
            raise BuildError(
                f"{', '.join(unresolvable)}, which the backend needs, is neither in {image} nor found "
                f"on this machine, so it cannot be carried.",
                f"Install it on this machine (then run `tbgen package` again), or in the image. ldd in "
                f"the image: {log_file}",
            )
        for name, path in new.items():
            shutil.copy2(path, staging / name)  # the file itself under its soname (ldd's path may be a link)
        carried.update(new)
    raise BuildError(
        f"Staging {library} for {image} did not settle after {MAX_CARRY_ROUNDS} rounds.",
        f"ldd in the image: {log_file}",
    )


def _run(command: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=120,
            check=False,
            env=dict(env) if env is not None else None,
        )
    except OSError as err:
        raise BuildError(
            f"cannot run {command[0]}: {err.strerror}", "Install libc-bin (ldd) and dpkg."
        ) from err
