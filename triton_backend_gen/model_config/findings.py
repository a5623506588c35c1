"""What a check reports (Finding) and what the project around a model expects of it (Expectations)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = "config.pbtxt"
ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem in one config file; ``line`` is 1-based, None when no single line is to blame."""

    path: Path
    line: int | None
    message: str
    severity: str = ERROR

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else f"{self.path}"
        return f"{where}: {self.severity}: {self.message}"


@dataclass(frozen=True)
class Expectations:
    """What the project around a model requires of it (None: not checked)."""

    backend: str | None = None
    decoupled: bool | None = None
    gpu: bool | None = None
    gpus_visible: bool | None = None  # does this machine show a GPU to a server started here?
