"""Remove the files that the chosen language does not use (an explicit list per language)."""

import shutil
from pathlib import Path

LANGUAGE = "{{ cookiecutter.language }}"
VERSION_DIR = Path("model_repository") / "{{ cookiecutter.model_name }}" / "1"

# Paths that exist only for one language; every other language's list is removed.
ONLY_FOR = {
    # The C++ backend: its build files and sources; the version directory holds no model file.
    # tests/unit: the unit tests of src/compute.cc.
    "cpp": ["CMakeLists.txt", "CMakePresets.json", "cmake", "src", "third_party", "tests/unit",
            str(VERSION_DIR / ".gitkeep")],
    # The decoupled Python model (plumbing and your compute.py), served by the stock python backend, and its
    # unit tests, which need no server (with a stand-in for the python backend's module).
    "python": [str(VERSION_DIR / "model.py"), str(VERSION_DIR / "compute.py")]
    + ["tests/test_compute.py", "tests/triton_python_backend_utils.py"],
}

for language, paths in ONLY_FOR.items():
    if language == LANGUAGE:
        continue
    for relative in paths:
        path = Path(relative)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
