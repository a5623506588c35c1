"""How long the project's server took to load its models, as the last `tbgen test` measured it.

`tbgen test` records it (:func:`record_load_time`) in ``<project>/build/tbgen/load_time.json``; `tbgen deploy`
sizes the chart's startup probe from it (:func:`read_load_time`). The time runs from the server's start to
the moment it was live with every model loaded: what a startup probe has to wait for. A run whose
models did not all load records nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.project import Project

LOAD_TIME_FILE = "load_time.json"


@dataclass(frozen=True)
class LoadTime:
    seconds: float
    server: str  # which server measured it, e.g. "tritonserver in a container of ..."
    measured_at: str  # UTC, ISO 8601


def load_time_file(project: Project) -> Path:
    return project.runtime_dir / LOAD_TIME_FILE


def record_load_time(project: Project, seconds: float, server: str) -> Path:
    """Write the load time of this run (replacing the last one); the file written."""
    path = load_time_file(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    measured = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.write_text(
        json.dumps({"seconds": round(seconds, 3), "server": server, "measured_at": measured}) + "\n"
    )
    return path


def read_load_time(project: Project) -> LoadTime | None:
    """The last recorded load time, or None when `tbgen test` has not measured one (or the file is
    unreadable)."""
    try:
        data = json.loads(load_time_file(project).read_text())
        return LoadTime(float(data["seconds"]), str(data.get("server", "")), str(data.get("measured_at", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
