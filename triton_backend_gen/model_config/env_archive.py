"""Whether the python backend of Triton 26.06 and later unpacks a packed environment (EXECUTION_ENV_PATH).

python_backend's ``ExtractTarFile`` (src/pb_env.cc) unpacks the tarball with libarchive: it reads gzip and
tar only, writes with ``archive_write_disk`` into the model's environment directory, and fails the model's
load on the first entry for which a libarchive call does not return ARCHIVE_OK. Up to r26.05 it wrote with
ARCHIVE_EXTRACT_TIME alone; from r26.06 (python_backend #437) with

    ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
    ARCHIVE_EXTRACT_SECURE_SYMLINKS

so an entry whose path holds "..", an absolute entry, and an entry written through a symlink that the archive
created earlier (a hard link's target included) are refused. ``refused_entries`` asks libarchive itself
(this machine's, through libarchive-c): it unpacks the tarball the same way, with the same options, into a
temporary directory and lists what libarchive refused, each with the rule in words.

Only the entries' headers are written: every one of those rules is decided by ``archive_write_header`` (the
file's data cannot break one), so the check needs no room for the environment's contents, only its file
names, and goes to /dev/shm where there is one (0.3-0.7 s for a 1,400-file numpy environment, 23 MB packed;
1-3 s on a disk-backed /tmp).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from triton_backend_gen.errors import ConfigError, TbgenError
from triton_backend_gen.lazy import lazy_module

libarchive = lazy_module("libarchive")
libarchive_extract = lazy_module("libarchive.extract")
libarchive_ffi = lazy_module("libarchive.ffi")

# The options of archive_write_disk_set_options in python_backend r26.06, by their names in archive.h.
SECURE_OPTIONS = ("TIME", "SECURE_NODOTDOT", "SECURE_NOABSOLUTEPATHS", "SECURE_SYMLINKS")
INSTALL_LIBARCHIVE = (
    "pip install libarchive-c (tbgen's dependency) and the system's libarchive (Debian: apt-get install "
    "libarchive13, Ubuntu 24.04: libarchive13t64; cmake brings it); $LIBARCHIVE may name the library"
)
# Only names are written (empty files, links, directories): in memory where the machine has a tmpfs for it,
# five times faster than a disk-backed /tmp.
_MEMORY_DIR = Path("/dev/shm")
# archive_write_disk resolves entry paths against the working directory, which is the process's: one
# unpacking at a time (python_backend changes its directory the same way).
_UNPACKING = threading.Lock()


class LibarchiveMissing(TbgenError):
    """libarchive-c or the system's libarchive is not there: the archive could not be checked."""


@dataclass(frozen=True)
class Refusal:
    """One entry libarchive refuses to unpack, with the rule it breaks in words."""

    entry: str  # its path in the archive
    rule: str  # 'has ".." in its path (SECURE_NODOTDOT)'

    def __str__(self) -> str:
        return f'"{self.entry}" {self.rule}'


def refused_entries(tarball: Path) -> list[Refusal]:
    """Every entry of ``tarball`` that python_backend r26.06+ refuses (empty: it unpacks); ConfigError when
    libarchive cannot read it as a gzip tar at all (or gives up on it), LibarchiveMissing when libarchive is
    not available."""
    flags = secure_flags()
    path = str(Path(tarball).resolve())
    with (
        _UNPACKING,
        tempfile.TemporaryDirectory(prefix="tbgen-unpack-", dir=_scratch_parent()) as scratch,
        contextlib.chdir(scratch),
    ):
        try:
            with (
                libarchive.file_reader(path, "tar", "gzip") as archive,
                libarchive_extract.new_archive_write_disk(flags) as disk,
            ):
                return _unpack_headers(archive, disk)
        except libarchive.ArchiveError as err:
            raise ConfigError(
                f"{tarball} cannot be unpacked as the python backend unpacks it (a gzip-compressed tar, "
                f"through libarchive): {err.msg or err}",
                "Pack it again with `tbgen env pack` (or venv-pack / conda-pack).",
            ) from None


def _scratch_parent() -> Path | None:
    """Where to unpack: the memory file system when there is a writable one, else the temporary directory."""
    return _MEMORY_DIR if _MEMORY_DIR.is_dir() and os.access(_MEMORY_DIR, os.W_OK | os.X_OK) else None


def secure_flags() -> int:
    """python_backend r26.06's archive_write_disk options, from libarchive-c's constants; LibarchiveMissing
    when libarchive cannot be loaded."""
    try:
        flags = 0
        for name in SECURE_OPTIONS:
            flags |= getattr(libarchive_extract, f"EXTRACT_{name}")
    except (ImportError, OSError, AttributeError) as err:
        # libarchive-c loads the library on import: a missing one is an OSError (or, found nowhere, an
        # AttributeError from the symbols it then looks up in the interpreter itself).
        raise LibarchiveMissing(f"libarchive is not available here ({err})", INSTALL_LIBARCHIVE) from None
    # libarchive-c logs every ARCHIVE_WARN (Python's last-resort handler would print it on stderr); here a
    # warning is a refusal, reported as one.
    logger = logging.getLogger("libarchive")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return flags


def _unpack_headers(archive: Any, disk: Any) -> list[Refusal]:
    """Write each entry's header of ``archive`` (a libarchive-c reader) to ``disk`` as python_backend does;
    the entries refused. A refused entry is skipped and the next one tried, so that all are listed."""
    refused = []
    ffi = libarchive_ffi
    while True:
        entry = libarchive.ArchiveEntry(archive._pointer)
        status = ffi.read_next_header2(archive._pointer, entry._entry_p)  # ArchiveError when unreadable
        if status == ffi.ARCHIVE_EOF:
            return refused
        if status != ffi.ARCHIVE_OK:  # a warning reading the header: python_backend stops there too
            refused.append(
                Refusal(entry.pathname or "", _libarchive_says(ffi.error_string(archive._pointer)))
            )
            continue
        refusal = _write_entry(disk, entry)
        if refusal is not None:
            refused.append(refusal)


def _write_entry(disk: Any, entry: Any) -> Refusal | None:
    """Write ``entry``'s header (and finish it) on ``disk``; what libarchive refused, or None."""
    ffi = libarchive_ffi
    try:
        status = ffi.write_header(disk, entry._entry_p)
        if status == ffi.ARCHIVE_OK:
            status = ffi.write_finish_entry(disk)
    except libarchive.ArchiveError as err:
        if err.retcode == ffi.ARCHIVE_FATAL:  # libarchive can go no further (python_backend neither)
            raise
        message = err.msg or ""
    else:
        if status == ffi.ARCHIVE_OK:
            return None
        message = (ffi.error_string(disk) or b"").decode(errors="replace")
    return _refusal(entry, message)


def _refusal(entry: Any, message: str) -> Refusal:
    """``entry`` refused with libarchive's ``message``, the rule in words (the disk as it was then)."""
    name = entry.pathname or ""
    hardlink = (entry.linkpath or "") if entry.islnk else None
    symlink = _symlink_on_the_way(name) or (_symlink_on_the_way(hardlink) if hardlink else None)
    return Refusal(name, describe_refusal(name, message, hardlink, symlink))


def _symlink_on_the_way(path: str) -> tuple[str, str] | None:
    """The first directory of ``path`` (relative to the unpacking directory, the current one) that is a
    symlink already unpacked, with its target; None when there is none."""
    parts = PurePosixPath(path).parts
    for depth in range(1, len(parts)):
        prefix = os.path.join(*parts[:depth])
        if os.path.islink(prefix):
            return prefix, os.readlink(prefix)
    return None


def describe_refusal(
    entry: str, message: str, hardlink: str | None = None, symlink: tuple[str, str] | None = None
) -> str:
    """The rule ``entry`` breaks, in words, from libarchive's ``message`` about it ("Path contains '..'",
    "Path is absolute", "Cannot extract through symlink ..."), the target of a hard-link entry (libarchive
    checks it as well) and the symlink (path, target) found on the way of either."""
    lowered = message.lower()
    if "'..'" in message:
        own = ".." in PurePosixPath(entry).parts or hardlink is None
        return _of_target(own, hardlink) + 'has ".." in its path (SECURE_NODOTDOT)'
    if "absolute" in lowered:
        own = entry.startswith("/") or hardlink is None
        return _of_target(own, hardlink) + "is an absolute path (SECURE_NOABSOLUTEPATHS)"
    if "symlink" in lowered:
        via = f'"{symlink[0]}" (-> {symlink[1]})' if symlink else "an earlier entry"
        own = hardlink is None or (symlink is not None and entry.startswith(symlink[0] + "/"))
        verb = "would be written" if own else f'is a hard link to "{hardlink}", which leads'
        return f"{verb} through the symlink {via} that the archive created (SECURE_SYMLINKS)"
    return _libarchive_says(message)


def _of_target(own: bool, hardlink: str | None) -> str:
    """How a rule about the entry's own path (``own``) or its hard-link target begins."""
    return "" if own else f'is a hard link to "{hardlink}", which '


def _libarchive_says(message: bytes | str | None) -> str:
    text = message.decode(errors="replace") if isinstance(message, bytes) else message
    return f"is refused by libarchive: {text or 'no reason given'}"


def summarize(refusals: list[Refusal], listed: int = 3) -> str:
    """The first ``listed`` refusals in one sentence, and how many more there are."""
    shown = "; ".join(f"the entry {r}" for r in refusals[:listed])
    more = len(refusals) - listed
    return shown + (f"; and {more} more entr{'y' if more == 1 else 'ies'}" if more > 0 else "")
