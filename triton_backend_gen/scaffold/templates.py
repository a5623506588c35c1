"""The template registry: which templates exist, where they live and what options they take.

A template is a plain cookiecutter directory; its options are read from its ``cookiecutter.json`` (visible
keys in file order, the first item of a list being the default choice, ``__prompts__`` giving their help
text).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from triton_backend_gen.errors import UsageError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Option:
    key: str
    default: Any  # as written in cookiecutter.json: may be a Jinja expression
    kind: type  # bool, int, str, or dict (the tensor signature)
    choices: tuple[str, ...] = ()
    help: str = ""


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    description: str
    version: str
    options: tuple[Option, ...]

    def option(self, key: str) -> Option | None:
        return next((o for o in self.options if o.key == key), None)


def templates_dir() -> Path:
    """The templates shipped in the wheel, or the repository's top-level templates/ in a source checkout."""
    for candidate in (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise UsageError(
        f"tbgen's templates are missing (looked in {_PACKAGE_DIR}).", "Reinstall triton-backend-gen."
    )


# Options that are integers even where cookiecutter.json's default is a Jinja expression (decoupled-backend's
# max_batch_size: 8 for a sequence model, else 0).
INTEGER_KEYS = frozenset({"max_batch_size", "instance_count"})


def _read_template(path: Path) -> Template:
    spec = json.loads((path / "cookiecutter.json").read_text())
    prompts = spec.get("__prompts__", {})
    options = []
    for key, raw in spec.items():
        if key.startswith("_"):
            continue
        if isinstance(raw, list):
            options.append(Option(key, raw[0], str, tuple(raw), _prompt_text(prompts.get(key), key)))
        else:
            integer = (
                isinstance(raw, int) or key in INTEGER_KEYS
            )  # a Jinja default is a string that renders to one
            kind = (
                bool if isinstance(raw, bool) else int if integer else dict if isinstance(raw, dict) else str
            )
            options.append(Option(key, raw, kind, (), _prompt_text(prompts.get(key), key)))
    return Template(
        name=path.name,
        path=path,
        description=spec.get("_tbgen_description", ""),
        version=spec.get("_tbgen_template_version", "0"),
        options=tuple(options),
    )


def _prompt_text(prompt: Any, key: str) -> str:
    if isinstance(prompt, dict):  # choice prompts: {"__prompt__": "...", "choice": "label"}
        return str(prompt.get("__prompt__", key))
    return str(prompt) if prompt else key


@cache
def list_templates() -> tuple[Template, ...]:
    root = templates_dir()
    return tuple(_read_template(p) for p in sorted(root.iterdir()) if (p / "cookiecutter.json").is_file())


def get_template(name: str) -> Template:
    for template in list_templates():
        if template.name == name:
            return template
    known = ", ".join(t.name for t in list_templates())
    raise UsageError(f"Unknown template {name!r}.", f"Known templates: {known} (see `tbgen templates list`).")
