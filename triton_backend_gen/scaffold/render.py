"""Rendering a template onto disk, atomically.

The project is rendered by cookiecutter into a hidden temporary sibling of the target, then moved into place:
renamed when the target does not exist (or is an empty directory), or, with ``force``, merged file by file into
it (files the template does not produce are never touched). An error or Ctrl-C before the move leaves nothing
behind; the move itself runs with SIGINT deferred.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from triton_backend_gen.errors import ScaffoldError, UsageError
from triton_backend_gen.scaffold.templates import Template


def render_project(template: Template, answers: Mapping[str, Any], target: Path, *, force: bool = False) -> Path:
    """Render ``template`` with validated ``answers`` into ``target`` (whose name is the project name)."""
    target = target.absolute()
    if target.name != answers["project_name"]:
        raise ScaffoldError(f"Target {target} does not match project_name {answers['project_name']!r}.")
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target} exists and is not a directory.", "Choose another project name or path.")
    if _non_empty_dir(target) and not force:
        raise UsageError(
            f"{target} already exists and is not empty.",
            "Pass --force to overwrite the files the template produces (your other files are kept), "
            "or choose another name.",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tbgen-", dir=target.parent))
    try:
        rendered = _render_with_cookiecutter(template, answers, staging)
        with _sigint_deferred():
            if _non_empty_dir(target):
                _merge_into(rendered, target)
            else:
                if target.exists():
                    target.rmdir()  # empty, so nothing of the user's is lost
                os.rename(rendered, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _render_with_cookiecutter(template: Template, answers: Mapping[str, Any], output_dir: Path) -> Path:
    # cookiecutter's building blocks rather than cookiecutter(): no replay file in the user's home, and the
    # answers are already validated.
    from cookiecutter.exceptions import CookiecutterException
    from cookiecutter.generate import generate_context, generate_files
    from cookiecutter.prompt import prompt_for_config

    try:
        context = generate_context(
            context_file=str(template.path / "cookiecutter.json"), extra_context=dict(answers)
        )
        context["cookiecutter"] = prompt_for_config(context, no_input=True)
        project_dir = generate_files(
            repo_dir=str(template.path), context=context, output_dir=str(output_dir), accept_hooks=True
        )
    except CookiecutterException as err:
        raise ScaffoldError(f"Template {template.name} failed to render: {err}", "This is a bug in the template.") from err
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
                f"{dest} is a directory, but the template writes a file there.", "Move it away, then run again."
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, dest)


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while the rendered project is moved into place, then deliver it."""
    received: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    except ValueError:  # not the main thread: signals cannot be handled here anyway
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt
