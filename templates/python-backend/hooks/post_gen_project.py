"""Remove the files that the chosen options do not use (an explicit list per option)."""

import shutil
from pathlib import Path

NATIVE = {{ 'True' if cookiecutter.native else 'False' }}
PYTHON_BASED_BACKEND = {{ 'True' if cookiecutter.python_based_backend else 'False' }}
VERSION_DIR = Path("model_repository/{{ cookiecutter.model_name }}/1")
BATCH_STRATEGY = "{{ cookiecutter.batch_strategy }}"

# The pybind11 extension, only with native=true.
NATIVE_ONLY = [Path("native")]
# The reusable backend (and an otherwise empty version directory), only with python_based_backend=true.
PYTHON_BASED_BACKEND_ONLY = [Path("backends"), VERSION_DIR / ".gitkeep"]
# The model's batching strategy, only with batch_strategy single, volume, tokens or custom.
BATCHING_ONLY = [Path("batching")]
# model.py and compute.py for the stock python backend, only with python_based_backend=false.
STOCK_PYTHON_BACKEND_ONLY = [VERSION_DIR / "model.py", VERSION_DIR / "compute.py"]


def remove(paths):
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


if not NATIVE:
    remove(NATIVE_ONLY)
if BATCH_STRATEGY == "none":
    remove(BATCHING_ONLY)
if PYTHON_BASED_BACKEND:
    remove(STOCK_PYTHON_BACKEND_ONLY)
else:
    remove(PYTHON_BASED_BACKEND_ONLY)
