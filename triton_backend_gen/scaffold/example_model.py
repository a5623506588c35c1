"""The example model file of a framework project: ``tbgen new`` runs the project's export_model.py once.

It runs with the first Python that imports the framework's module (tbgen's own, the ``python3`` on PATH, then
Debian's system interpreter, where python3-torch installs torch), never over an existing model file. Without
such a Python it writes nothing and says how to run the script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.frameworks import Framework

SYSTEM_PYTHON = Path("/usr/bin/python3")  # Debian's interpreter, which python3-torch serves
EXPORT_TIMEOUT_S = 300


@dataclass(frozen=True)
class ExampleModel:
    path: Path  # the model file
    written: bool
    message: str  # what happened, or how to write it


def pythons() -> list[str]:
    """Interpreters to try, in order, without repeats."""
    found = [
        sys.executable,
        *(str(Path(d) / "python3") for d in os.environ.get("PATH", "").split(os.pathsep) if d),
        str(SYSTEM_PYTHON),
    ]
    seen: list[str] = []
    for python in found:
        resolved = shutil.which(python)
        if resolved and os.path.realpath(resolved) not in map(os.path.realpath, seen):
            seen.append(resolved)
    return seen


def python_with(module: str) -> str | None:
    """The first interpreter of :func:`pythons` that imports ``module``."""
    for python in pythons():
        probe = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, timeout=120, check=False
        )
        if probe.returncode == 0:
            return python
    return None


def write_example_model(root: Path, model_dir: Path, framework: Framework) -> ExampleModel:
    """Run ``root``/export_model.py for ``framework`` unless ``model_dir``/1/<model file> exists."""
    path = model_dir / "1" / framework.model_file
    script = root / "export_model.py"
    if path.exists():
        return ExampleModel(path, False, f"{path} exists; left as it is")
    python = python_with(framework.python_module)
    if python is None:
        return ExampleModel(
            path,
            False,
            f"no Python here imports {framework.python_module}, so {path.name} was not "
            f"written. Get one ({framework.python_package}), then run: "
            f"python3 {script}",
        )
    result = subprocess.run(
        [python, str(script)], cwd=root, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False
    )
    if result.returncode != 0 or not path.is_file():
        last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
        return ExampleModel(
            path, False, f"{script.name} failed with {python}: {last[0]}. Fix it, then run: python3 {script}"
        )
    return ExampleModel(path, True, f"wrote {path} with {python}")
