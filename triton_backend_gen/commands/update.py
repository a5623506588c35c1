"""`tbgen update` and `tbgen check --drift`: a generated project moved to a newer release or template, or
other answers, without losing the user's edits.

The base of the 3-way merge is the project's generation record (scaffold.record); tbgen's side is the record's
recipe rendered again with the new release and answers (the models `tbgen add model` added replayed on it);
scaffold.update merges and applies. A project made before tbgen kept records gets its base rendered from
tbgen.toml's answers at its release with today's templates, and is told so.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from triton_backend_gen import versions
from triton_backend_gen.errors import UsageError
from triton_backend_gen.project import Project
from triton_backend_gen.scaffold import get_template, read_answers_file, read_record, render_recipe
from triton_backend_gen.scaffold.answers import chosen_answers
from triton_backend_gen.scaffold.layout import is_generated
from triton_backend_gen.scaffold.record import Recipe, Record
from triton_backend_gen.scaffold.update import CONFLICT, Change, Labels, apply_update, plan_update

RECONSTRUCTED_NOTE = (
    "this project has no generation record (.tbgen/generated.tar.gz: made before tbgen kept one), "
    "so its base was rendered from tbgen.toml's answers with today's templates: where they differ "
    "from the ones that made it, tbgen's changes count as yours"
)


@dataclass(frozen=True)
class UpdatePlan:
    project: Project
    base: Record  # the project as generated (recorded, or reconstructed)
    new: Record  # the project as tbgen generates it now, with the new release and answers
    changes: list[Change]
    reconstructed: bool

    @property
    def old_release(self) -> versions.Release:
        return versions.resolve(self.base.recipe.triton_version)

    @property
    def new_release(self) -> versions.Release:
        return versions.resolve(self.new.recipe.triton_version)

    @property
    def conflicts(self) -> list[Change]:
        return [c for c in self.changes if c.action == CONFLICT]


def plan_project_update(
    project: Project,
    *,
    triton_version: str | None = None,
    settings: Mapping[str, str] | None = None,
    template_version: str | None = None,
) -> UpdatePlan:
    """What `tbgen update` would do: to ``triton_version`` (default: versions.update_target), with
    ``settings`` (--set) over the recorded answers, with the template version tbgen ships
    (``template_version`` must name it)."""
    settings = dict(settings or {})
    if "project_name" in settings:
        raise UsageError(
            "project_name is the project directory's name and cannot be updated.",
            "Rename the directory instead; drop --set project_name.",
        )
    shipped = get_template(project.template).version
    if template_version is not None and template_version != shipped:
        raise UsageError(
            f"This tbgen ships {project.template} {shipped} only, not {template_version}.",
            f"Drop --template-version (or give {shipped}); another template version comes with the tbgen "
            "release that ships it.",
        )
    release = versions.resolve(triton_version) if triton_version else versions.update_target(project.release)
    base, reconstructed = base_record(project)
    recipe = replace(
        base.recipe, given={**base.recipe.given, **settings, "triton_version": release.container}
    )
    new = _render(recipe, base.carried)
    labels = Labels(
        "yours",
        f"generated (r{base.recipe.triton_version}, template {base.recipe.template_version})",
        f"tbgen update (r{release.container}, template {new.recipe.template_version})",
    )
    return UpdatePlan(
        project, base, new, plan_update(project.root, base.files, new.files, labels), reconstructed
    )


def base_record(project: Project) -> tuple[Record, bool]:
    """The project as tbgen generated it: its record, or (True) a rendering of tbgen.toml's answers."""
    record = read_record(project.root)
    if record is not None:
        return record, False
    if len(project.models) > 1 or any(m.pattern for m in project.models):
        raise UsageError(
            f"{project.name} has no generation record (it was made before tbgen kept one) and "
            "composes several models, which tbgen.toml's answers alone do not reproduce.",
            "Generate a project with today's tbgen and the same options, and carry your edits over "
            "by hand (or with git); later updates then work by themselves.",
        )
    given = {**read_answers_file(project.project_file), "project_name": project.name}
    given.pop("template", None)
    chosen = chosen_answers(get_template(project.template), given)
    recipe = Recipe(
        project.template,
        project.template_version,
        {**chosen, "project_name": project.name, "triton_version": project.release.container},
        releases=(project.release.container,),
    )
    return _render(recipe, {}), True


def _render(recipe: Recipe, carried: Mapping[str, bytes]) -> Record:
    with tempfile.TemporaryDirectory(prefix="tbgen-update-") as scratch:
        return render_recipe(recipe, Path(scratch) / recipe.project_name, carried)[1]


def check_clean(root: Path) -> None:
    """Refuse a project with uncommitted changes in its git work tree (none when it is not in one): the update
    is then reviewed with `git diff` and undone with git."""
    git = shutil.which("git")
    if git is None:
        return
    inside = subprocess.run(
        [git, "-C", str(root), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return
    status = subprocess.run(
        [git, "-C", str(root), "status", "--porcelain", "--", "."],
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    if dirty:
        listed = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
        raise UsageError(
            f"{root} has uncommitted changes in git: {listed}.",
            "Commit or stash them first, so that the update can be reviewed with `git diff` and undone "
            "with git; or pass --force.",
        )


def update_project(plan: UpdatePlan) -> None:
    """Apply ``plan``: every merged file and the new record, all or nothing."""
    apply_update(plan.project.root, plan.changes, plan.new)


# --- drift --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Drift:
    edited: list[str]  # generated files the user changed
    plumbing: list[str]  # those of them that are generated plumbing (their header says so), not the user's
    deleted: list[str]  # generated files the user deleted
    template: tuple[str, str]  # (the version the project was generated with, the version tbgen ships)
    template_changed: list[
        str
    ]  # files tbgen's templates now render otherwise for the same answers and release
    release: versions.Release
    target: versions.Release  # the release `tbgen update` moves to without --triton-version
    reconstructed: bool

    @property
    def release_behind(self) -> bool:
        return self.release.container != self.target.container

    @property
    def template_behind(self) -> bool:
        return bool(self.template_changed) or self.template[0] != self.template[1]

    @property
    def update_due(self) -> bool:
        return self.release_behind or self.template_behind


def drift(project: Project) -> Drift:
    """How the project stands against what generated it and what tbgen would generate now."""
    base, reconstructed = base_record(project)
    edited, deleted = [], []
    for path, file in base.files.items():
        current = project.root / path
        if not current.is_file():
            deleted.append(path)
        elif current.read_bytes() != file.data:
            edited.append(path)
    again = base if reconstructed else _render(base.recipe, base.carried)  # a reconstructed base is today's
    changed = sorted(p for p in set(base.files) | set(again.files) if base.files.get(p) != again.files.get(p))
    shipped = get_template(project.template).version
    plumbing = [p for p in edited if is_generated(base.files[p].data.decode(errors="replace"))]
    return Drift(
        sorted(edited),
        sorted(plumbing),
        sorted(deleted),
        (base.recipe.template_version, shipped),
        changed,
        project.release,
        versions.update_target(project.release),
        reconstructed,
    )
