"""Why a model did not load or stopped answering, read from the server: what test, dev, serve and deploy say.

- A model that failed to load: the server's reason, tbgen validate's findings for its config, the relevant
  lines of the server log, and the known traps behind a python model (a module its Python lacks: its
  requirements.txt and `tbgen env pack`; a native wheel built for a newer libstdc++ than the server's).
- A python backend stub that stopped answering mid-run (Triton then fails every request of the model with
  "Stub process '...' is not healthy" and never restarts it): whether its process had exited (crashed or was
  killed) or was still running (hung), from the server's process group.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from triton_backend_gen.discovery import gpus_visible
from triton_backend_gen.errors import ServerError
from triton_backend_gen.model_config import validate_tree
from triton_backend_gen.model_config.execution_env import REQUIREMENTS
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.server import TritonServer, relevant_log_lines

_MISSING_MODULE = re.compile(r"No module named '([^'.]+)")
_GLIBCXX = re.compile(r"(GLIBCXX_[0-9.]+)' not found")
_STUB_UNHEALTHY = re.compile(r"Stub process '([^']+)' is not healthy")


def load_failure_hints(log: str, *, docker: bool) -> list[str]:
    """Known traps behind a python model that failed to load, from the server log: a module the stub's Python
    lacks (its requirements.txt and `tbgen env pack`), a native wheel built for a newer libstdc++."""
    pack = "`tbgen env pack --docker`" if docker else "`tbgen env pack`"
    hints = [
        f"A model imports {module}, which the server's Python lacks: list it in the model's {REQUIREMENTS} "
        f"(model_repository/MODEL/{REQUIREMENTS}) and run {pack}."
        for module in sorted(set(_MISSING_MODULE.findall(log)))
    ]
    hints += [
        f"A native library in the model's environment needs {symbol}, which the server's libstdc++ lacks: "
        "pack the environment inside the server's image (`tbgen env pack --docker`), where pip picks wheels "
        "built for it."
        for symbol in sorted(set(_GLIBCXX.findall(log)))[:1]
    ]
    return hints


def require_ready(project: Project, triton: TritonServer) -> None:
    """ServerError naming every model that did not load, with validate's findings and the server's log
    lines."""
    not_ready = [m for m in triton.model_states() if m.state != "READY"]
    if not_ready:
        names = ", ".join(f"{m.name} ({m.state or 'not loaded'}: {m.reason})" for m in not_ready)
        log = triton.log_text()
        hints = load_failure_hints(log, docker=triton.in_container)
        raise ServerError(
            f"Models failed to load: {names}",
            "".join(f"{hint}\n" for hint in hints)
            + _config_warnings(project, {m.name for m in not_ready})
            + "Server log:\n"
            + "\n".join(relevant_log_lines(log))
            + f"\nFull log: {triton.log_file}",
        )


def _config_warnings(project: Project, models: set[str]) -> str:
    """tbgen validate's warnings for the configs of ``models`` (they often say why a model did not load)."""
    findings = validate_tree(project.model_repository, project, gpus_visible=gpus_visible())
    lines = [str(f) for f in findings if f.path.parent.name in models]
    return "".join(f"{line}\n" for line in lines)


def unanswering_stubs(failures: Iterable[str]) -> list[str]:
    """The model instances whose python backend stub the ``failures`` (details of failed checks) found not
    answering."""
    return sorted({m.group(1) for detail in failures for m in [_STUB_UNHEALTHY.search(detail)] if m})


def stub_failures(
    instances: list[str], alive: set[str] | None, triton: TritonServer
) -> list[tuple[str, str]]:
    """(instance, what happened) for each model instance whose python backend stub stopped answering: whether
    its process had exited (``alive``: the instances whose stub runs, None when unknown), and the server log's
    lines (the stub prints its fatal errors there)."""
    found = []
    lines = "\n".join(triton.relevant_log_lines(limit=15)) if instances else ""
    for instance in instances:
        state = (
            "it crashed or hung"
            if alive is None
            else "its process had exited (it crashed or was killed)"
            if instance not in alive
            else "its process was still running (it hung)"
        )
        found.append(
            (
                instance,
                f"the python backend's stub process of {instance} stopped answering: {state}. Triton does "
                "not restart it, so every later request of the model failed. Run the test again: a fault "
                f"of model.py comes back every time. Server log ({triton.log_file}):\n"
                f"{lines or '(nothing about it)'}",
            )
        )
    return found
