"""A server of another release than the project's: what to say about it, and saying a note only once.

The embedded server is release 24.10 while `tbgen new` targets the newest release, so most local runs meet a
server of another release. When both speak the project's backend API that is a note, said once per project
and pair of releases (remembered in ``<project>/build/tbgen/said.json``; ``--verbose`` says it again); when
they do not, a warning, said every time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from triton_backend_gen.discovery import ServerInstall
from triton_backend_gen.project import Project

SAID_FILE = "said.json"  # in the project's runtime directory


@dataclass(frozen=True)
class ReleaseNote:
    key: str  # the pair of releases, "26.02 on 24.10": said once per project and key
    text: str
    warning: bool  # the backend may not load: said every time


def release_note(project: Project, install: ServerInstall) -> ReleaseNote | None:
    """What to say when ``install`` is not of the project's release (None when it is)."""
    target, release = project.release, install.release
    if release == target:
        return None
    if release is None:
        return ReleaseNote(
            f"{target.container} on {install.version}",
            f"tritonserver {install.version} "
            f"({install.source}) is not a release tbgen knows; {project.name} targets Triton "
            f"{target.container}.",
            warning=True,
        )
    what = (
        f"{project.name} targets Triton {target.container} (tritonserver {target.server_version}); this "
        f"server is release {release.container} (tritonserver {install.version}, {install.source})."
    )
    fix = (
        f"To run on {target.container} itself: --server PATH (a {target.container} tritonserver) or --docker "
        f"(its image); or move the project to this server's release with "
        f"`tbgen update --triton-version {release.container}{project.project_option()}`."
    )
    key = f"{target.container} on {release.container}"
    (major, minor), (server_major, server_minor) = target.backend_api, release.backend_api
    if major == server_major and server_minor >= minor:
        return ReleaseNote(
            key,
            f"{what} Both speak backend API {server_major}.{server_minor}, so the backend loads "
            f"and the results hold; what {target.container} added is not exercised. {fix}",
            warning=False,
        )
    return ReleaseNote(
        key,
        f"{what} The project is built for backend API {major}.{minor}, the server speaks "
        f"{server_major}.{server_minor}: the backend may refuse to load. {fix}",
        warning=True,
    )


def first_time(project: Project, note: ReleaseNote) -> bool:
    """Whether ``note`` was never said for ``project`` (a warning always counts as new); remembers it."""
    if note.warning:
        return True
    file = project.runtime_dir / SAID_FILE
    try:
        said = json.loads(file.read_text())
    except (OSError, ValueError):
        said = {}
    notes = said.setdefault("release notes", [])
    if note.key in notes:
        return False
    notes.append(note.key)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(said, indent=1) + "\n")
    except OSError:
        pass  # a read-only project: the note is said again next time
    return True
