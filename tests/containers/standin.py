"""A local stand-in for the NGC image ``nvcr.io/nvidia/tritonserver:24.10-py3``, for the test suite.

No image registry is reachable from the test machines, so the real image cannot be pulled. The stand-in is a
Debian bookworm rootfs (debootstrap from the Debian mirror in this machine's apt configuration) with the
tritonserver 2.51.0 that the nvidia-pytriton 0.7.0 wheel embeds laid out the way NGC lays it out under
/opt/tritonserver, imported into the local Docker engine as ``tbgen-standin/tritonserver:24.10-py3``.

The image carries a label with a hash of its recipe and of the wheel; ``ensure_standin_image`` reuses the
image while the label matches and rebuilds it otherwise. Building needs root (debootstrap, chroot).

Run as a script (``python tests/containers/standin.py``) to build or reuse the image.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TAG = "tbgen-standin/tritonserver:24.10-py3"
HASH_LABEL = "tbgen.standin.hash"
RECIPE_VERSION = 1  # bump whenever the layout or image config below changes
SUITE = "bookworm"
PACKAGES = (
    "python3",
    "python3-numpy",
    "cmake",
    "g++",
    "make",
    "ninja-build",
    "rapidjson-dev",
    "googletest",
    "zlib1g",
    "libpython3.11",  # the python backend stub links libpython3.11.so.1.0; the wheel does not bundle it
)
PYTHON_VERSION = "3.11"  # bookworm's python3: picks the wheel's matching python backend stub
WHEEL_DIST = "nvidia-pytriton"
WHEEL_VERSION = "0.7.0"  # embeds tritonserver 2.51.0, the server of release 24.10
WHEEL_PACKAGE = "pytriton"
WHEEL_LIBS = "nvidia_pytriton.libs"
TRITON_VERSION = "2.51.0"
CONTAINER_RELEASE = "24.10"
ROOT = Path("opt/tritonserver")  # inside the rootfs
STUB_NAME = "triton_python_backend_stub"
IMAGE_ENV = {
    "PATH": "/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LD_LIBRARY_PATH": "/opt/tritonserver/lib",
    "TRITON_SERVER_VERSION": TRITON_VERSION,
    "NVIDIA_TRITON_SERVER_VERSION": CONTAINER_RELEASE,
}
# Binaries whose libraries must all resolve inside the image (paths relative to the rootfs).
LINKED_BINARIES = (
    ROOT / "bin" / "tritonserver",
    ROOT / "backends" / "python" / "libtriton_python.so",
    ROOT / "backends" / "python" / STUB_NAME,
    ROOT / "caches" / "local" / "libtritoncache_local.so",
)

Progress = Callable[[str], object]


# --- the Debian mirror ------------------------------------------------------------------------------------
def debian_mirror(apt_dir: Path = Path("/etc/apt"), suite: str = SUITE) -> str:
    """The mirror URL that this machine's apt configuration uses for ``suite``.

    Read at run time, never written down: the reachable mirror differs between machines. Looks at
    sources.list and sources.list.d/*.list (one-line format) and sources.list.d/*.sources (deb822)."""
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    deb822 = sorted((apt_dir / "sources.list.d").glob("*.sources"))
    for path in files:
        if path.is_file():
            found = mirror_from_one_line(path.read_text(errors="replace"), suite)
            if found:
                return found
    for path in deb822:
        found = mirror_from_deb822(path.read_text(errors="replace"), suite)
        if found:
            return found
    raise RuntimeError(
        f"No Debian mirror for suite {suite!r} in the apt configuration under {apt_dir} (sources.list, "
        f"sources.list.d/*.list, sources.list.d/*.sources). Add a `deb <mirror> {suite} main` source there."
    )


def mirror_from_one_line(text: str, suite: str = SUITE) -> str | None:
    """The URI of the first ``deb`` line for ``suite`` in sources.list text, or None."""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        line = re.sub(r"\[[^\]]*\]", " ", line)  # drop "[signed-by=... arch=...]" options
        words = line.split()
        if len(words) >= 3 and words[0] == "deb" and words[2] == suite and _usable_uri(words[1]):
            return words[1]
    return None


def mirror_from_deb822(text: str, suite: str = SUITE) -> str | None:
    """The first URI of the first enabled ``deb`` stanza listing ``suite`` in deb822 text, or None."""
    for stanza in re.split(r"\n\s*\n", text):
        fields = _deb822_fields(stanza)
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split() or suite not in fields.get("suites", "").split():
            continue
        uris = [uri for uri in fields.get("uris", "").split() if _usable_uri(uri)]
        if uris:
            return uris[0]
    return None


def _deb822_fields(stanza: str) -> dict[str, str]:
    """Field name (lower case) -> value, continuation lines joined; comment lines dropped."""
    fields: dict[str, str] = {}
    name = None
    for line in stanza.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace() and name:
            fields[name] += " " + line.strip()
        elif ":" in line:
            name, value = line.split(":", 1)
            name = name.strip().lower()
            fields[name] = value.strip()
    return fields


def _usable_uri(uri: str) -> bool:
    """debootstrap fetches http(s) and file mirrors; apt-only schemes (mirror+, cdrom:, tor+) it cannot."""
    return uri.startswith(("http://", "https://", "file:/"))


# --- the wheel and the hash -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Wheel:
    """The installed nvidia-pytriton: where its server lies and what identifies the installed files."""

    site_packages: Path
    version: str
    record: str  # its dist-info RECORD: every file with its sha256, so any change to the server shows

    @property
    def server(self) -> Path:
        return self.site_packages / WHEEL_PACKAGE / "tritonserver"

    @property
    def libs(self) -> Path:
        return self.site_packages / WHEEL_LIBS


def installed_wheel() -> Wheel:
    """The nvidia-pytriton wheel that this Python sees; it must be the release that embeds 2.51.0."""
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"{WHEEL_DIST} is not installed for {sys.executable}; run this with the project's venv "
            f"(.venv/bin/python) or `pip install '{WHEEL_DIST}=={WHEEL_VERSION}'`."
        )
    site_packages = Path(next(iter(spec.submodule_search_locations))).parent
    dist = importlib.metadata.distribution(WHEEL_DIST)
    if dist.version != WHEEL_VERSION:
        raise RuntimeError(
            f"{WHEEL_DIST} {dist.version} is installed, but the 24.10 stand-in needs {WHEEL_VERSION} "
            f"(tritonserver {TRITON_VERSION}): `pip install '{WHEEL_DIST}=={WHEEL_VERSION}'`."
        )
    wheel = Wheel(site_packages, dist.version, dist.read_text("RECORD") or "")
    if not (wheel.server / "bin" / "tritonserver").is_file() or not wheel.libs.is_dir():
        raise RuntimeError(f"{WHEEL_DIST} under {site_packages} lacks its embedded server; reinstall it.")
    return wheel


def recipe_hash(
    wheel_version: str,
    record: str,
    *,
    packages: tuple[str, ...] = PACKAGES,
    suite: str = SUITE,
    recipe_version: int = RECIPE_VERSION,
) -> str:
    """sha256 over everything the image is made from, so that a change to any of it forces a rebuild.

    The mirror is left out on purpose: the same suite from another mirror is the same image."""
    recipe = {
        "recipe_version": recipe_version,
        "suite": suite,
        "packages": sorted(packages),
        "wheel": [WHEEL_DIST, wheel_version, record],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


# --- the public entry point -------------------------------------------------------------------------------
def ensure_standin_image(client=None, *, progress: Progress = print) -> str:
    """The tag of the stand-in image, built first when it is missing or its recipe changed."""
    client = client or _docker_client()
    wheel = installed_wheel()
    wanted = recipe_hash(wheel.version, wheel.record)
    if _current(client, wanted, progress):
        return TAG
    with _build_lock(progress):
        if _current(client, wanted, progress):  # another process built it while we waited
            return TAG
        old = _existing_image(client)
        progress(f"{TAG} is {'missing' if old is None else 'out of date'}; building it")
        build_image(client, wheel, wanted, progress)
        if old is not None:
            _remove_replaced(client, old.id, progress)
    return TAG


def _current(client, wanted: str, progress: Progress) -> bool:
    image = _existing_image(client)
    if image is not None and image.labels.get(HASH_LABEL) == wanted:
        progress(f"{TAG} is current ({image.short_id}), reusing it")
        return True
    return False


@contextmanager
def _build_lock(progress: Progress) -> Iterator[None]:
    """One build at a time on this machine: parallel test workers would otherwise each run debootstrap."""
    path = Path(tempfile.gettempdir()) / "tbgen-standin.lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build of {TAG} ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _docker_client():
    """A client for the local engine, checked with a ping so that a dead engine fails here, clearly."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as err:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise RuntimeError(
            f"The Docker engine at {host} is not reachable ({err}); start dockerd "
            "or point DOCKER_HOST at a running engine."
        ) from err
    return client


def _existing_image(client):
    import docker

    try:
        return client.images.get(TAG)
    except docker.errors.ImageNotFound:
        return None


def _remove_replaced(client, image_id: str, progress: Progress) -> None:
    """Drop the replaced image to give its ~700 MB back; a container still using it keeps it alive."""
    import docker

    try:
        if client.images.get(TAG).id != image_id:
            client.images.remove(image_id)
            progress(f"removed the replaced image {image_id[:19]}")
    except docker.errors.APIError as err:
        progress(f"kept the replaced image {image_id[:19]}: {err}")


# --- building ---------------------------------------------------------------------------------------------
def build_image(client, wheel: Wheel, recipe: str, progress: Progress = print) -> None:
    """Make the rootfs, lay the server out in it, check its libraries resolve, and import it as TAG."""
    _check_can_build()
    mirror = debian_mirror()
    with _workspace() as work:
        rootfs = work / "rootfs"
        started = time.monotonic()
        progress(f"debootstrap {SUITE} from {mirror} into {rootfs}")
        debootstrap(rootfs, mirror, work / "debootstrap.out")
        progress(
            f"debootstrap done in {time.monotonic() - started:.0f}s; laying out tritonserver {TRITON_VERSION}"
        )
        lay_out_server(wheel, rootfs)
        _trim(rootfs)
        check_libraries(rootfs)
        progress("packing and importing the rootfs")
        tarball = _pack(rootfs, work / "rootfs.tar")
        _import(client, tarball, recipe)
    progress(f"built {TAG}")


def _check_can_build() -> None:
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: `apt-get install debootstrap`.")
    if os.geteuid() != 0:
        raise RuntimeError("Building the stand-in image needs root (debootstrap and chroot); run it as root.")


def debootstrap(rootfs: Path, mirror: str, log: Path) -> None:
    """A minimal bookworm with the toolchain the tests build backends with, and the server's libraries."""
    command = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(rootfs),
        mirror,
    ]
    with log.open("w") as out:
        result = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        detail = rootfs / "debootstrap" / "debootstrap.log"
        detail_tail = detail.read_text(errors="replace").splitlines()[-15:] if detail.is_file() else []
        if detail_tail:
            tail += "\n--- debootstrap.log ---\n" + "\n".join(detail_tail)
        raise RuntimeError(
            f"debootstrap failed (exit status {result.returncode}); check that the mirror {mirror} "
            f"serves {SUITE} and is reachable:\n{tail}"
        )


def lay_out_server(wheel: Wheel, rootfs: Path) -> None:
    """Copy the wheel's server into the NGC layout that tbgen's discovery reads as an install root:
    bin/tritonserver, lib/ (the bundled libraries plus a plain libtritonserver.so), backends/python/ (with
    the stub that matches the image's python3), caches/ and TRITON_VERSION."""
    root = rootfs / ROOT
    (root / "bin").mkdir(parents=True)
    shutil.copy2(wheel.server / "bin" / "tritonserver", root / "bin" / "tritonserver")
    shutil.copytree(wheel.libs, root / "lib", symlinks=True)
    _link_plain_libtritonserver(root / "lib")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(wheel.server / "backends", root / "backends", symlinks=True, ignore=ignore)
    shutil.copy2(
        wheel.server / "python_backend_stubs" / PYTHON_VERSION / STUB_NAME,
        root / "backends" / "python" / STUB_NAME,
    )
    if (wheel.server / "caches").is_dir():
        shutil.copytree(wheel.server / "caches", root / "caches", symlinks=True, ignore=ignore)
    (root / "TRITON_VERSION").write_text(TRITON_VERSION + "\n")


def _link_plain_libtritonserver(lib: Path) -> None:
    """NGC ships lib/libtritonserver.so; the wheel only has the auditwheel name libtritonserver-<hash>.so,
    which is what the binaries' NEEDED entries name. Backends built against the NGC layout link the plain
    one."""
    hashed = sorted(lib.glob("libtritonserver-*.so"))
    if len(hashed) != 1:
        raise RuntimeError(
            f"expected one libtritonserver-<hash>.so in the wheel's {WHEEL_LIBS}, found {hashed}"
        )
    (lib / "libtritonserver.so").symlink_to(hashed[0].name)


def _trim(rootfs: Path) -> None:
    """Drop downloaded packages and apt lists: they only make the image bigger."""
    for pattern in (
        "var/cache/apt/archives/*.deb",
        "var/lib/apt/lists/*_Packages",
        "var/lib/apt/lists/*Release*",
    ):
        for path in rootfs.glob(pattern):
            path.unlink()


def check_libraries(rootfs: Path) -> None:
    """Fail now, not in a test, when a library the server, backend or stub links is missing from the image."""
    env = {"PATH": IMAGE_ENV["PATH"], "LD_LIBRARY_PATH": IMAGE_ENV["LD_LIBRARY_PATH"]}
    for binary in LINKED_BINARIES:
        result = subprocess.run(
            ["chroot", str(rootfs), "ldd", f"/{binary}"],
            capture_output=True,
            text=True,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        missing = [line.strip() for line in result.stdout.splitlines() if "not found" in line]
        if result.returncode != 0 or missing:
            raise RuntimeError(
                f"/{binary} does not link inside the image (add the Debian packages that provide "
                f"these to PACKAGES):\n{result.stderr.strip()}\n" + "\n".join(missing)
            )


def _pack(rootfs: Path, tarball: Path) -> Path:
    """A tar of the rootfs with numeric owners, as `docker import` wants it."""
    _refuse_mounts_under(rootfs)
    subprocess.run(
        ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return tarball


def _import(client, tarball: Path, recipe: str) -> None:
    """`docker import` with the NGC-like config. The engine reports import errors inside a 200 response's
    JSON stream, so the stream is read for them."""
    import docker

    repository, tag = TAG.rsplit(":", 1)
    changes = [f"ENV {name}={value}" for name, value in IMAGE_ENV.items()]
    changes += ["WORKDIR /opt/tritonserver", f"LABEL {HASH_LABEL}={recipe}"]
    try:
        # A path (not a file object): docker-py then streams it without a read timeout.
        answer = client.api.import_image_from_file(
            str(tarball), repository=repository, tag=tag, changes=changes
        )
    except docker.errors.APIError as err:
        raise RuntimeError(f"docker import of {tarball} failed: {err}") from err
    for line in str(answer).splitlines():
        if line.strip() and "error" in json.loads(line):
            raise RuntimeError(f"docker import of {tarball} failed: {line.strip()}")
    if client.images.get(TAG).labels.get(HASH_LABEL) != recipe:
        raise RuntimeError(
            f"the imported {TAG} lacks its {HASH_LABEL} label; the engine ignored the LABEL change"
        )


# --- the temporary workspace, and debootstrap's mounts in it ----------------------------------------------
@contextmanager
def _workspace() -> Iterator[Path]:
    """A temp dir (under $TMPDIR or /tmp) that is removed afterwards, also on error.

    debootstrap mounts proc, sys and device nodes inside the rootfs and an interrupted run can leave them
    mounted; removing a tree with the host's /sys mounted in it would be a disaster, so they are unmounted
    first, and the tree is left in place (with an error) when that fails."""
    work = Path(tempfile.mkdtemp(prefix="tbgen-standin-"))
    try:
        yield work
    finally:
        for mount in sorted(_mounts_under(work), reverse=True):  # deepest first
            subprocess.run(["umount", "--lazy", str(mount)], check=False, capture_output=True)
        _refuse_mounts_under(work)
        shutil.rmtree(work)


def _mounts_under(directory: Path) -> list[Path]:
    """Mount points strictly inside ``directory``, from /proc/self/mounts (whose paths escape spaces as
    \\040)."""
    prefix = str(directory.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[1])
        if point.startswith(prefix):
            mounts.append(Path(point))
    return mounts


def _refuse_mounts_under(directory: Path) -> None:
    left = _mounts_under(directory)
    if left:
        raise RuntimeError(
            f"{directory} still has mounts in it ({', '.join(map(str, left))}); unmount them "
            f"(umount -l) and remove {directory} by hand"
        )


def main() -> int:
    """Build or reuse the image; print its tag and how long that took."""
    started = time.monotonic()
    try:
        tag = ensure_standin_image()
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{tag} ready in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
