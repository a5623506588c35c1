"""The generation record: what `tbgen update` needs for a 3-way merge, kept in the project.

``.tbgen/generated.tar.gz`` holds the project exactly as tbgen generated it (every file it wrote, with its
mode) and the recipe that produced it: the template and its version, the answers as the user gave them (a
default is not an answer, so that a newer release moves it), the models ``tbgen add model`` added, the files
that came from no template (``--from-config`` label files) and the releases the project has been at. The
archive is deterministic (sorted members, no times or owners), so an unchanged project keeps the same bytes.
Commit it with the project: it is the merge base of the next update.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from triton_backend_gen import __version__
from triton_backend_gen.errors import ProjectError

RECORD_DIR = ".tbgen"
RECORD_FILE = f"{RECORD_DIR}/generated.tar.gz"
_RECIPE = "recipe.json"
_FILES = "files/"
# What is never a project file of the record: the record itself, and what builds and Python leave behind.
_SKIPPED_PARTS = frozenset({RECORD_DIR, "__pycache__", ".git"})


@dataclass(frozen=True)
class GeneratedFile:
    data: bytes
    executable: bool = False


@dataclass(frozen=True)
class Addition:
    """One `tbgen add model` run (or, ``kind`` "batcher", one `tbgen add batcher` run: ``name`` the model,
    ``given`` its strategy, limit and elements input): replayed on every later rendering of the project."""

    name: str
    template: str | None
    given: dict[str, Any]
    kind: str = "model"


@dataclass(frozen=True)
class Recipe:
    template: str
    template_version: str
    given: dict[str, Any]  # the answers the user gave (flags, --set, answers file, prompts), before defaults
    additions: tuple[Addition, ...] = ()
    carried: tuple[
        str, ...
    ] = ()  # files of no template (label files of --from-config), taken from the record
    releases: tuple[str, ...] = ()  # every release the project was generated at or updated to, oldest first
    tbgen_version: str = __version__

    @property
    def project_name(self) -> str:
        return str(self.given["project_name"])

    @property
    def triton_version(self) -> str:
        return str(self.given["triton_version"])

    def with_additions(self, *more: Addition) -> Recipe:
        return replace(self, additions=(*self.additions, *more))

    def to_json(self) -> dict[str, Any]:
        return {
            "tbgen_version": self.tbgen_version,
            "template": self.template,
            "template_version": self.template_version,
            "given": self.given,
            "additions": [_addition_json(a) for a in self.additions],
            "carried": list(self.carried),
            "releases": list(self.releases),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recipe:
        return cls(
            template=data["template"],
            template_version=data["template_version"],
            given=dict(data["given"]),
            additions=tuple(
                Addition(a["name"], a.get("template"), dict(a["given"]), a.get("kind", "model"))
                for a in data.get("additions", [])
            ),
            carried=tuple(data.get("carried", [])),
            releases=tuple(data.get("releases", [])),
            tbgen_version=data.get("tbgen_version", "unknown"),
        )


def _addition_json(addition: Addition) -> dict[str, Any]:
    """An addition as the recipe's JSON holds it (``kind`` only when it is no model: older records read)."""
    data = {"name": addition.name, "template": addition.template, "given": addition.given}
    return data if addition.kind == "model" else {**data, "kind": addition.kind}


@dataclass(frozen=True)
class Record:
    recipe: Recipe
    files: dict[str, GeneratedFile] = field(default_factory=dict)  # relative POSIX path -> as generated

    @property
    def carried(self) -> dict[str, bytes]:
        """The contents of the files no template renders (``recipe.carried``), as recorded."""
        return {path: self.files[path].data for path in self.recipe.carried if path in self.files}


def read_tree(root: Path) -> dict[str, GeneratedFile]:
    """Every file under ``root`` (relative POSIX paths), the record and build/Python leftovers excepted."""
    files = {}
    for path in sorted(Path(root).rglob("*")):
        relative = path.relative_to(root)
        if _SKIPPED_PARTS & set(relative.parts) or path.is_symlink() or not path.is_file():
            continue
        files[relative.as_posix()] = GeneratedFile(
            path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR)
        )
    return files


def pack(record: Record) -> bytes:
    """The record as a deterministic gzip tarball."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        _add(
            tar,
            _RECIPE,
            json.dumps(record.recipe.to_json(), indent=1, sort_keys=True, default=str).encode(),
            False,
        )
        for relative, file in sorted(record.files.items()):
            _add(tar, _FILES + relative, file.data, file.executable)
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes, executable: bool) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o755 if executable else 0o644
    tar.addfile(info, io.BytesIO(data))


def unpack(data: bytes, source: Path) -> Record:
    """A record from its tarball (``source``: where it was read, for errors)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            recipe, files = None, {}
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                content = tar.extractfile(member).read()  # type: ignore[union-attr]
                if member.name == _RECIPE:
                    recipe = Recipe.from_json(json.loads(content))
                elif member.name.startswith(_FILES) and _safe(member.name[len(_FILES) :]):
                    files[member.name[len(_FILES) :]] = GeneratedFile(
                        content, bool(member.mode & stat.S_IXUSR)
                    )
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError) as err:
        raise ProjectError(
            f"{source} is not a readable generation record: {err}",
            "Restore it from version control; without it `tbgen update` cannot tell your edits from tbgen's.",
        ) from err
    if recipe is None:
        raise ProjectError(f"{source} holds no recipe.", "Restore it from version control.")
    return Record(recipe, files)


def _safe(relative: str) -> bool:
    path = PurePosixPath(relative)
    return bool(relative) and not path.is_absolute() and ".." not in path.parts


def read_record(root: Path) -> Record | None:
    """The project's generation record, or None for a project made before tbgen kept one."""
    path = Path(root) / RECORD_FILE
    if not path.is_file():
        return None
    return unpack(path.read_bytes(), path)


def write_record(root: Path, record: Record) -> None:
    """Write ``record`` into ``root`` (a rendered tree: no atomicity needed, the tree is moved into place)."""
    path = Path(root) / RECORD_FILE
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(pack(record))


def write_record_atomically(root: Path, record: Record) -> None:
    """Replace the record of the project at ``root`` in one step (a new file renamed over the old one)."""
    path = Path(root) / RECORD_FILE
    path.parent.mkdir(exist_ok=True)
    replace_file(path, GeneratedFile(pack(record)))


def record_tree(root: Path, recipe: Recipe) -> Record:
    """Record what is under ``root`` (a freshly rendered project) as generated by ``recipe``, and write it
    there."""
    record = Record(recipe, read_tree(root))
    write_record(root, record)
    return record


def write_file(path: Path, file: GeneratedFile) -> None:
    """Write ``file`` at ``path``: an existing file keeps its permissions; an executable one gains x where it
    can be read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(file.data)
    if file.executable:
        make_executable(path)


def replace_file(path: Path, file: GeneratedFile) -> None:
    """Write ``file`` at ``path`` through a sibling renamed over it (never half-written): an existing file
    keeps its permissions; an executable one gains x where it can be read."""
    temporary = partial_of(path)
    mode = path.stat().st_mode if path.exists() else None
    temporary.write_bytes(file.data)
    if mode is not None:
        os.chmod(temporary, mode)
    if file.executable:
        make_executable(temporary)
    os.replace(temporary, path)


def partial_of(path: Path) -> Path:
    """The sibling replace_file writes before renaming it over ``path``."""
    return path.with_name(f".{path.name}.tbgen-new")


def make_executable(path: Path) -> None:
    """Give ``path`` x where it can be read."""
    mode = path.stat().st_mode
    os.chmod(path, mode | ((mode & 0o444) >> 2))
