"""What the project around a model expects of it (Expectations); the checks report findings.Finding, each with
the config file it is about and its line."""

from __future__ import annotations

from dataclasses import dataclass

CONFIG_FILE = "config.pbtxt"


@dataclass(frozen=True)
class Expectations:
    """What the project around a model requires of it (None: not checked)."""

    backend: str | None = None
    decoupled: bool | None = None
    gpu: bool | None = None
    gpus_visible: bool | None = None  # does this machine show a GPU to a server started here?
