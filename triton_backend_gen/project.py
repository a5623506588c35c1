"""Read ``tbgen.toml``, the contract between tbgen's stages (see docs/templates.md).

Every stage after ``tbgen new`` takes a :class:`Project` from :func:`load_project` instead of looking at
the project's files again.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_backend_gen.errors import ProjectError

PROJECT_FILE = "tbgen.toml"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    decoupled: bool = False
    max_batch_size: int = 0


@dataclass(frozen=True)
class Project:
    root: Path
    template: str
    template_version: str
    name: str
    backend: str
    language: str  # "cpp" or "python"
    triton_version: str
    gpu: bool
    model_repository: Path
    models: tuple[ModelEntry, ...]
    answers: dict[str, Any] = field(default_factory=dict)
    native: dict[str, str] = field(default_factory=dict)  # python-backend's [native] table, empty without one


def find_project_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds a tbgen.toml, or None."""
    start = start.resolve()
    for candidate in (start, *start.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate
    return None


def load_project(path: Path) -> Project:
    """The project whose tbgen.toml is at or above ``path``."""
    root = find_project_root(path)
    if root is None:
        raise ProjectError(
            f"{path} is not inside a tbgen project (no {PROJECT_FILE} found here or above).",
            "Run the command inside a project made by `tbgen new`, or pass the project's path.",
        )
    file = root / PROJECT_FILE
    try:
        data = tomllib.loads(file.read_text())
        meta, proj = data["tbgen"], data["project"]
        models = tuple(
            ModelEntry(m["name"], bool(m.get("decoupled", False)), int(m.get("max_batch_size", 0)))
            for m in data.get("models", [])
        )
        return Project(
            root=root,
            template=meta["template"],
            template_version=meta["template_version"],
            name=proj["name"],
            backend=proj["backend"],
            language=proj["language"],
            triton_version=proj["triton_version"],
            gpu=bool(proj.get("gpu", False)),
            model_repository=root / proj.get("model_repository", "model_repository"),
            models=models,
            answers=dict(data.get("answers", {})),
            native=dict(data.get("native", {})),
        )
    except tomllib.TOMLDecodeError as err:
        raise ProjectError(f"{file} is not valid TOML: {err}", "Fix the file or render the project again.") from err
    except (KeyError, TypeError, ValueError) as err:
        raise ProjectError(
            f"{file} lacks or mistypes the entry {err}.",
            "Compare it with docs/templates.md, or render the project again with `tbgen new --force`.",
        ) from err
