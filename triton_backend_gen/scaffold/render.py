"""Rendering a template onto disk, atomically.

The project is rendered by cookiecutter into a hidden temporary sibling of the target, then moved into place:
renamed when the target does not exist (or is an empty directory), or, with ``force``, merged file by file
into it (files the template does not produce are never touched). An error or Ctrl-C before the move leaves
nothing behind; during the move itself SIGINT/SIGTERM/SIGHUP are only recorded, and delivered once it is done.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from triton_backend_gen import __version__
from triton_backend_gen.errors import ScaffoldError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.scaffold.templates import Template
from triton_backend_gen.signals import raise_received, signals_recorded

cookiecutter_exceptions = lazy_module("cookiecutter.exceptions")
cookiecutter_generate = lazy_module("cookiecutter.generate")
cookiecutter_main = lazy_module("cookiecutter.main")
cookiecutter_prompt = lazy_module("cookiecutter.prompt")
jinja2 = lazy_module("jinja2")

# cookiecutter logs a failed hook with its traceback (logging's last-resort handler prints it); tbgen reports
# the failure itself, as a ScaffoldError under the hook's own message.
logging.getLogger("cookiecutter").addHandler(logging.NullHandler())


def render_project(
    template: Template,
    answers: Mapping[str, Any],
    target: Path,
    *,
    force: bool = False,
    files: Mapping[Path, bytes] | None = None,
    extend: Callable[[Path], None] | None = None,
) -> Path:
    """Render ``template`` with validated ``answers`` into ``target`` (whose name is the project name).
    ``files``: more files of the project (relative paths), written with the rendered ones; ``extend``: called
    with the rendered project before it is moved into place (the models of a composed project)."""
    target = target.absolute()
    if target.name != answers["project_name"]:
        raise ScaffoldError(f"Target {target} does not match project_name {answers['project_name']!r}.")
    created, staging = _prepare_target(target, force)
    moved = False
    try:
        rendered = _render_with_cookiecutter(template, answers, staging)
        _write_files(rendered, files or {})
        if extend is not None:
            extend(rendered)
        with signals_recorded() as received:
            _move_into_place(rendered, target)
            moved = True
        raise_received(received)  # Ctrl-C while the project was moved into place: delivered once it is there
    except OSError as err:
        raise _cannot_create(target, err) from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not moved:
            _remove_empty(created)
    return target


def _prepare_target(target: Path, force: bool) -> tuple[list[Path], Path]:
    """Check that the project may be written at ``target``, then make the missing directories above it and a
    staging directory beside it: (the directories made, the staging directory). Nothing stays on an error."""
    created: list[Path] = []
    try:
        _check_target(target, force)
        created = _make_parents(target)
        return created, Path(tempfile.mkdtemp(prefix=f".{target.name}.tbgen-", dir=target.parent))
    except OSError as err:
        _remove_empty(created)
        raise _cannot_create(target, err) from err


def _check_target(target: Path, force: bool) -> None:
    """UsageError when ``target`` is no directory, or (without ``force``) a directory with something in it."""
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} exists and is not a directory.", "Choose another project name or path.")
    if _non_empty_dir(target) and not force:
        raise UsageError(
            f"{target} already exists and is not empty.",
            "Pass --force to overwrite the files the template produces (your other files are kept), "
            "or choose another name.",
        )


def _write_files(rendered: Path, files: Mapping[Path, bytes]) -> None:
    """Write ``files`` (paths relative to the project) into the rendered project."""
    for relative, data in files.items():
        (rendered / relative).parent.mkdir(parents=True, exist_ok=True)
        (rendered / relative).write_bytes(data)


def _move_into_place(rendered: Path, target: Path) -> None:
    """Merge the rendered project into ``target`` when it holds something, else rename it to ``target``."""
    if _non_empty_dir(target):
        _merge_into(rendered, target)
        return
    if target.exists():
        target.rmdir()  # empty, so nothing of the user's is lost
    os.rename(rendered, target)


def _make_parents(target: Path) -> list[Path]:
    """Create the missing directories above ``target``; returns them, outermost first. A file where a
    directory must be is a UsageError."""
    missing = []
    parent = target.parent
    while not parent.is_dir():
        if parent.exists() or parent.is_symlink():
            raise UsageError(
                f"Cannot create {target}: {parent} exists and is not a directory.", "Choose another path."
            )
        missing.append(parent)
        parent = parent.parent
    created: list[Path] = []
    try:
        for directory in reversed(missing):
            directory.mkdir()
            created.append(directory)
    except OSError:
        _remove_empty(created)
        raise
    return created


def _remove_empty(directories: list[Path]) -> None:
    """Remove the directories tbgen created for a project that was not written, innermost first."""
    for directory in reversed(directories):
        try:
            directory.rmdir()
        except OSError:
            return


def _cannot_create(target: Path, err: OSError) -> UsageError:
    return UsageError(
        f"Cannot create {target}: {err.strerror or err}.",
        "Choose a path whose directories you can write to, with no name longer than 255 bytes.",
    )


def render_into(template: Template, answers: Mapping[str, Any], output_dir: Path) -> Path:
    """Render ``template`` into a new directory under ``output_dir`` (no checks, nothing moved); its path."""
    return _render_with_cookiecutter(template, answers, output_dir)


def template_context(template: Template, answers: Mapping[str, Any]) -> dict[str, Any]:
    """The context ``template``'s files are rendered with, before cookiecutter's prompts: cookiecutter.json
    (the template's name and version, its Jinja extensions) with ``answers`` over it, and the version of the
    tbgen that renders. Generated plumbing's header (generated_header.j2) names these versions; a composed
    model's files (scaffold.compose) take them from here too."""
    return cookiecutter_generate.generate_context(
        context_file=str(template.path / "cookiecutter.json"),
        extra_context={**answers, "_tbgen_version": __version__},
    )


def _render_with_cookiecutter(template: Template, answers: Mapping[str, Any], output_dir: Path) -> Path:
    # cookiecutter's building blocks rather than cookiecutter(): no replay file in the user's home, and the
    # answers are already validated.

    try:
        context = template_context(template, answers)
        # The template's Jinja extension (cookiecutter.json's _extensions: local_extensions.py beside it) is
        # imported from the template's directory, put on sys.path as cookiecutter's main() does.
        with cookiecutter_main._patch_import_path_for_repo(template.path):
            context["cookiecutter"] = cookiecutter_prompt.prompt_for_config(context, no_input=True)
            project_dir = cookiecutter_generate.generate_files(
                repo_dir=str(template.path), context=context, output_dir=str(output_dir), accept_hooks=True
            )
    except (cookiecutter_exceptions.CookiecutterException, jinja2.TemplateError) as err:
        # (a missing include is a TemplateNotFound, which is also an OSError: caught here, not as one)
        raise ScaffoldError(
            f"Template {template.name} failed to render: {err}", "This is a bug in the template."
        ) from err
    # pip byte-compiles an installed wheel's .py files, the templates' too: their bytecode is no project file.
    for cache in sorted(Path(project_dir).rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)
    return Path(project_dir)


def _non_empty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def _merge_into(rendered: Path, target: Path) -> None:
    for source in sorted(rendered.rglob("*")):
        if source.is_dir():
            continue
        dest = target / source.relative_to(rendered)
        if dest.is_dir():
            raise ScaffoldError(
                f"{dest} is a directory, but the template writes a file there.",
                "Move it away, then run again.",
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, dest)
