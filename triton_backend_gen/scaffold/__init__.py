"""Scaffold stage: answers -> a project on disk.

``render_new_project`` is the library entry point of ``tbgen new``: it resolves and validates every answer
before anything is written, then renders the template atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from triton_backend_gen.errors import AnswerError
from triton_backend_gen.scaffold import naming
from triton_backend_gen.scaffold.answers import Prompter, parse_set_options, read_answers_file, resolve_answers
from triton_backend_gen.scaffold.render import render_project
from triton_backend_gen.scaffold.templates import get_template, list_templates

__all__ = ["render_new_project", "parse_set_options", "read_answers_file", "resolve_answers", "render_project", "get_template", "list_templates"]


def render_new_project(
    template: str,
    target: Path,
    given: Mapping[str, Any],
    *,
    force: bool = False,
    prompter: Prompter | None = None,
) -> Path:
    """Render ``template`` into ``target`` (the project directory; its name is the project name).

    ``given`` holds the answers the user set (values may be strings, as from ``--set``); the others take their
    defaults or are asked for through ``prompter``.
    """
    spec = get_template(template)
    name = naming.check_project_name(Path(target).name)  # as it is: answers are stripped, a directory name is not
    if "project_name" in given and str(given["project_name"]).strip() != name:
        raise AnswerError(
            f"project_name {given['project_name']!r} differs from the name of the project directory {name!r}.",
            "The project's name is the last part of PATH (tbgen new PATH): leave project_name out of --set and "
            "answers files.",
        )
    answers = resolve_answers(spec, {"project_name": name, **given}, prompter)
    return render_project(spec, answers, Path(target), force=force)
