"""``tbgen remove model``: take back what ``tbgen add model`` added.

What goes: the model's directory under the model repository, its batching strategy's under batching/ (``tbgen
add batcher``), its reference under references/ and its [[models]] entry in tbgen.toml. A composed model
(``tbgen add model r --pattern bls --set callees=a,b``) goes with the models that addition created (a and b
where the project lacked them), except one that a model staying in the project still calls. The generation
record forgets them as well (their files, their entries in the recorded tbgen.toml and the addition in its
recipe), so that ``tbgen check --drift`` does not count them as deleted by the user and ``tbgen update`` does
not bring them back.

Refused, with nothing changed: a model others call; the project's last model; the template's models, which
``tbgen new`` made, the project's code is generated for, and ``tbgen update`` renders again; a callee that
came with a composed model (its top model is what is removed). Without ``force``, also: files the user edited
or put under the model (python-env.tar.gz, another version), named; a model the record has no addition of
(added by hand); a project without a generation record, where neither edits nor additions can be told (with
``force``, only the named model goes there). Everything is checked before anything changes; then the files are
moved aside, tbgen.toml and the record replaced, and what was moved aside deleted, all or nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triton_backend_gen.errors import ScaffoldError, TbgenError, UsageError
from triton_backend_gen.project import BATCH_STRATEGY_LIBRARY, PROJECT_FILE, Project, model_tables
from triton_backend_gen.scaffold import compose, model_entries
from triton_backend_gen.scaffold.record import (
    RECORD_FILE,
    GeneratedFile,
    Recipe,
    Record,
    pack,
    partial_of,
    read_record,
    replace_file,
)
from triton_backend_gen.signals import raise_received, signals_recorded

_LEFTOVERS = "__pycache__"  # what Python leaves beside a model.py: neither tbgen's nor the user's


@dataclass(frozen=True)
class Removal:
    """What ``remove_model_from_project`` removed."""

    models: tuple[str, ...]  # the named model first, then the models its addition created with it
    files: tuple[Path, ...]  # every file deleted
    kept: dict[str, tuple[str, ...]]  # models its addition created that stay -> the models that call them
    record_updated: bool  # the generation record forgot them too (False: the project has none)


def remove_model_from_project(project: Project, name: str, *, force: bool = False) -> Removal:
    """Remove model ``name`` (and the models its addition created that nothing else calls) from ``project``.
    ``force``: remove the user's edits and files under them too, and work without a generation record."""
    project.model(name)  # UsageError naming the models when there is none of that name
    if len(project.models) == 1:
        raise UsageError(
            f"Model {name!r} is {project.name}'s only model; a project serves one at least.",
            "Add another model first (`tbgen add model`), or delete the project's directory.",
        )
    _check_uncalled(project, name, {name})
    record = read_record(project.root)
    made = (
        _made_with(record, project, name, force)
        if record is not None
        else _without_record(project, name, force)
    )
    models, kept = _removable(project, name, made)
    files = _files(project, models)
    current = project.project_file.read_text()
    if record is not None:
        _check_unedited(project, record, name, models, files, current, force)
    writes = [(project.project_file, GeneratedFile(_without(current, models, "tbgen.toml").encode()))]
    if record is not None:
        writes.append(
            (project.root / RECORD_FILE, GeneratedFile(pack(_forget(record, project, name, models))))
        )
    _commit(project, models, files, writes)
    return Removal(tuple(models), tuple(files), kept, record is not None)


# ---- what goes ---------------------------------------------------------------------------------------------


def _callers(project: Project, model: str, leaving: set[str]) -> tuple[str, ...]:
    """The models that stay (not in ``leaving``) and call ``model``."""
    return tuple(m.name for m in project.models if model in m.calls and m.name not in leaving)


def _check_uncalled(project: Project, name: str, leaving: set[str]) -> None:
    callers = _callers(project, name, leaving)
    if callers:
        listed = ", ".join(callers)
        them = "them" if len(callers) > 1 else "it"
        raise UsageError(
            f"Model {name!r} is called by {listed} (calls = [...] in tbgen.toml); removing it would "
            f"break {them}.",
            f"Remove {listed} first, or change {them} to call other models (the code and the calls in "
            f"tbgen.toml), then run `tbgen remove model {name}{project.project_option()}` again.",
        )


def _made_with(record: Record, project: Project, name: str, force: bool) -> list[str]:
    """The models the `tbgen add model` run that added ``name`` created, ``name`` first; UsageError for a
    model no such run added (with ``force``, one the record does not know goes alone)."""
    recorded = _recorded_models(record)
    owners = _owners(record.recipe, recorded)
    owner = owners.get(name, "")
    if owner == name:
        return [model for model, made_by in owners.items() if made_by == name]
    if owner is None:
        raise UsageError(
            f"Model {name!r} came with {project.name} from `tbgen new` (its template's); `tbgen remove "
            "model` removes the models `tbgen add model` added.",
            f"The template's models are what {project.name}'s code is generated for, and `tbgen update` "
            "renders them again. To go on without it anyway, delete "
            f"{_relative(project, project.model_repository / name)}/ and its [[models]] entry yourself.",
        )
    if owner:
        raise UsageError(
            f"Model {name!r} was added with model {owner!r} by one `tbgen add model`, and goes with it.",
            f"`tbgen remove model {owner}{project.project_option()}` removes {owner} and the models added "
            "with it.",
        )
    if force:
        return [name]
    raise UsageError(
        f"The generation record ({RECORD_FILE}) has no `tbgen add model {name}`: model {name!r} was "
        "added by hand (or tbgen could not record it), so its files count as yours.",
        f"`tbgen remove model {name} --force{project.project_option()}` removes {name}'s directory, "
        "reference and [[models]] entry as they are, and no other model.",
    )


def _without_record(project: Project, name: str, force: bool) -> list[str]:
    """Without a record only the model itself goes, and only when forced."""
    if not force:
        raise UsageError(
            f"{project.name} has no generation record ({RECORD_FILE}: made before tbgen kept one), so "
            f"tbgen cannot tell your edits of {name}'s files from what it generated, nor which models "
            "came with it.",
            f"`tbgen remove model {name} --force{project.project_option()}` removes {name}'s "
            "directory, reference and [[models]] entry as they are, edited or not, and no other model.",
        )
    if project.model(name).reference == project.reference_file:
        raise UsageError(
            f"Model {name!r} is {project.name}'s own model (its reference is reference.py, as `tbgen "
            "new` writes it); `tbgen remove model` removes the models `tbgen add model` added.",
            f"Delete {_relative(project, project.model_repository / name)}/ and its [[models]] entry "
            "yourself.",
        )
    return [name]


def _recorded_models(record: Record) -> list[str]:
    recorded = record.files.get(PROJECT_FILE)
    if recorded is None:
        return []
    return [str(m.get("name")) for m in model_tables(recorded.data.decode())]


def _owners(recipe: Recipe, recorded: list[str]) -> dict[str, str | None]:
    """Which step of ``recipe`` created each model: None for `tbgen new`, else the name of the `tbgen add
    model` run. A run creates its top model and those of its callees the project lacked then, as compose
    does."""
    try:
        composition, _ = compose.plan(
            recipe.template, {k: v for k, v in recipe.given.items() if k != "project_name"}
        )
        made: list[str] = [composition.top, *composition.callees] if composition else recorded[:1]
        owners: dict[str, str | None] = dict.fromkeys(made)
        for addition in (a for a in recipe.additions if a.kind == "model"):  # a batcher makes no model
            composition, _ = compose.plan(
                addition.template or recipe.template, {**addition.given, "model_name": addition.name}
            )
            for model in (addition.name, *(composition.callees if composition else ())):
                owners.setdefault(model, addition.name)
    except TbgenError as err:
        raise UsageError(
            f"The recipe of the generation record ({RECORD_FILE}) no longer reads: {err.message}",
            "Restore the record from version control.",
        ) from err
    return owners


def _removable(project: Project, name: str, made: list[str]) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """(the models of ``made`` that go, those that stay because a staying model calls them, with their
    callers)."""
    present = {m.name for m in project.models}
    leaving = [model for model in made if model in present]
    kept: dict[str, tuple[str, ...]] = {}
    while staying := _still_called(project, name, leaving):
        # A model that stays may call others of ``leaving`` in turn: look again until none is called.
        kept.update(staying)
        leaving = [model for model in leaving if model not in staying]
    return leaving, kept


def _still_called(project: Project, name: str, leaving: list[str]) -> dict[str, tuple[str, ...]]:
    """The models of ``leaving`` (other than ``name``) that a model staying in the project calls -> its
    callers."""
    called = {model: _callers(project, model, set(leaving)) for model in leaving if model != name}
    return {model: callers for model, callers in called.items() if callers}


def _files(project: Project, models: list[str]) -> list[Path]:
    """The files of ``models``: everything under their directories (in the model repository, and their
    batching strategies' in batching/), and their references (one no staying model shares, and never the
    project's reference.py)."""
    files: list[Path] = []
    for model in models:
        for directory in (project.model_repository / model, project.batching_dir / model):
            files += _directory_entries(directory) if directory.is_dir() else []
    staying = {m.reference for m in project.models if m.name not in models}
    for entry in project.models:
        if entry.name in models and _own_reference(project, entry.reference, staying):
            files.append(entry.reference)
    return files


def _directory_entries(directory: Path) -> list[Path]:
    """The files, links and empty directories under ``directory``, sorted."""
    return sorted(p for p in directory.rglob("*") if p.is_file() or p.is_symlink() or not any(p.iterdir()))


def _own_reference(project: Project, reference: Path | None, staying: set[Path | None]) -> bool:
    """Whether ``reference`` goes with its model: a file no staying model shares, not the project's
    reference.py."""
    return (
        reference is not None
        and reference != project.reference_file
        and reference not in staying
        and reference.is_file()
    )


# ---- what is the user's ------------------------------------------------------------------------------------


def _check_unedited(
    project: Project,
    record: Record,
    name: str,
    models: list[str],
    files: list[Path],
    current: str,
    force: bool,
) -> None:
    """UsageError naming the files (and tbgen.toml entries) of ``models`` that differ from the record, unless
    ``force``."""
    yours = []
    for path in files:
        relative = _relative(project, path)
        named = _named_if_yours(path, relative, record.files.get(relative))
        if named is not None:
            yours.append(named)
    yours += _edited_entries(record, models, current)
    if yours and not force:
        raise UsageError(
            f"`tbgen remove model {name}` would delete what is yours: {'; '.join(yours)}.",
            "Keep what you need elsewhere, then run it again with --force, which removes these too.",
        )


def _named_if_yours(path: Path, relative: str, generated: GeneratedFile | None) -> str | None:
    """``path`` (``relative`` to the root, recorded as ``generated``) named with why it counts as the user's;
    None when it is as tbgen wrote it (or Python's leftovers, which are nobody's)."""
    if _LEFTOVERS in path.parts or path.name == BATCH_STRATEGY_LIBRARY:  # a build's output, nobody's edit
        return None
    if path.is_dir() and not path.is_symlink():
        return f"{relative}/ (an empty directory tbgen did not make)"
    if generated is None:
        return f"{relative} (not generated by tbgen)"
    if path.is_symlink() or path.read_bytes() != generated.data:
        return f"{relative} (edited)"
    return None


def _edited_entries(record: Record, models: list[str], current: str) -> list[str]:
    """The [[models]] entries of ``models`` in tbgen.toml's ``current`` text that differ from the record's."""
    recorded = record.files.get(PROJECT_FILE)
    recorded_text = recorded.data.decode() if recorded is not None else ""
    return [
        f"the [[models]] entry of {model} in tbgen.toml (edited)"
        for model in models
        if model_entries.entry_text(current, model) != model_entries.entry_text(recorded_text, model)
    ]


# ---- the record --------------------------------------------------------------------------------------------


def _forget(record: Record, project: Project, name: str, models: list[str]) -> Record:
    """``record`` without ``models``: their files, their entries in the recorded tbgen.toml, and the addition
    of ``name``, so that the next rendering of the recipe does not create them again."""
    gone = _goes_with(record, project, models)
    files = {relative: file for relative, file in record.files.items() if not gone(relative)}
    recorded = record.files.get(PROJECT_FILE)
    if recorded is not None:
        text = _without(recorded.data.decode(), models, f"the recorded tbgen.toml ({RECORD_FILE})")
        files[PROJECT_FILE] = GeneratedFile(text.encode(), recorded.executable)
    recipe = replace(
        record.recipe,
        additions=tuple(a for a in record.recipe.additions if a.name != name),
        carried=tuple(c for c in record.recipe.carried if not gone(c)),
    )
    return Record(recipe, files)


def _goes_with(record: Record, project: Project, models: list[str]) -> Callable[[str], bool]:
    """Whether a recorded file (its path relative to the root) goes with ``models``: one under their
    directories (batching/ too), or the reference of one of them."""
    directories = [_relative(project, top) for top in (project.model_repository, project.batching_dir)]
    entries = _recorded_entries(record)
    references = {str(entries[m]["reference"]) for m in models if m in entries and "reference" in entries[m]}

    def gone(relative: str) -> bool:
        under = (relative.startswith(f"{top}/{m}/") for top in directories for m in models)
        return relative in references or any(under)

    return gone


def _recorded_entries(record: Record) -> dict[str, dict[str, Any]]:
    recorded = record.files.get(PROJECT_FILE)
    if recorded is None:
        return {}
    return {str(m.get("name")): m for m in model_tables(recorded.data.decode())}


def _without(text: str, models: list[str], where: str) -> str:
    """tbgen.toml's ``text`` without the entries of ``models``, checked to list exactly the others."""
    before = [str(m.get("name")) for m in model_tables(text)]
    return model_entries.checked(
        model_entries.remove_entries(text, models), [m for m in before if m not in models], where
    )


# ---- all or nothing ----------------------------------------------------------------------------------------


def _commit(
    project: Project, models: list[str], files: list[Path], writes: list[tuple[Path, GeneratedFile]]
) -> None:
    """Move the models' directories and references aside, write ``writes``, then delete what was moved; on any
    failure or signal, everything is put back as it was."""
    moves = _paths_to_move(project, models, files)
    written = [path for path, _ in writes]
    aside = Path(tempfile.mkdtemp(prefix=".tbgen-remove-", dir=project.root))
    done: list[tuple[Path, Path | bytes]] = []  # (a path, where it was moved or the bytes it had), in order
    with signals_recorded() as received:
        try:
            _move_aside(moves, aside, done)
            _replace_files(writes, done)
        except OSError as err:
            _put_back(done, written, aside)
            raise ScaffoldError(
                f"Cannot remove {err.filename or project.root}: {err.strerror or err}; the project "
                "is as it was.",
                "Fix the permissions, then run `tbgen remove model` again.",
            ) from err
        except BaseException:
            _put_back(done, written, aside)
            raise
        if received:
            _put_back(done, written, aside)
        else:
            shutil.rmtree(aside, ignore_errors=True)
            _remove_empty_parents(project, moves)
    raise_received(received)


def _paths_to_move(project: Project, models: list[str], files: list[Path]) -> list[Path]:
    """What ``_commit`` moves aside: the models' directories whole (batching/'s too), and those of ``files``
    outside them."""
    tops = (project.model_repository, project.batching_dir)
    directories = [top / m for m in models for top in tops if (top / m).exists()]
    return directories + [f for f in files if not any(d in f.parents for d in directories)]


def _move_aside(moves: list[Path], aside: Path, done: list[tuple[Path, Path | bytes]]) -> None:
    """Rename each of ``moves`` into ``aside``, noting each move in ``done``."""
    for index, path in enumerate(moves):
        path.rename(aside / str(index))
        done.append((path, aside / str(index)))


def _replace_files(writes: list[tuple[Path, GeneratedFile]], done: list[tuple[Path, Path | bytes]]) -> None:
    """Replace each file of ``writes``, noting the bytes it had in ``done``."""
    for path, file in writes:
        data = path.read_bytes()
        replace_file(path, file)
        done.append((path, data))


def _put_back(done: list[tuple[Path, Path | bytes]], written: list[Path], aside: Path) -> None:
    """Undo ``_commit``'s steps ``done``, last first: the files replaced get their bytes back, the moved ones
    their place; no half-written sibling stays."""
    for path, before in reversed(done):
        if isinstance(before, bytes):
            replace_file(path, GeneratedFile(before))
        else:
            before.rename(path)
    for path in written:
        partial_of(path).unlink(missing_ok=True)
    shutil.rmtree(aside, ignore_errors=True)


def _remove_empty_parents(project: Project, moved: list[Path]) -> None:
    """Remove the directories (references/) the moved references leave empty; never the repository or root."""
    for parent in {path.parent for path in moved}:
        if parent not in (project.root, project.model_repository) and project.root in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                pass  # not empty: it holds other files


def _relative(project: Project, path: Path) -> str:
    return Path(os.path.relpath(path, project.root)).as_posix()
