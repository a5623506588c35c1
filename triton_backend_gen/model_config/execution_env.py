"""A python-backend model's own Python environment: the EXECUTION_ENV_PATH parameter of its config.pbtxt and
the packed environment (a venv-pack gzip tarball) it names.

The python backend unpacks the tarball and runs the model's stub in it, so the environment must be of the
Python the stub is built for (major.minor), its base interpreter must exist at the same path where the server
runs (a venv links to it), and numpy must be in it (the stub imports it). ``read_packed_env`` reads what that
takes from the tarball (its pyvenv.cfg and its site-packages), ``env_problems`` says what does not fit.
"""

from __future__ import annotations

import ast
import re
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.lazy import lazy_module

model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

ENV_PARAMETER = "EXECUTION_ENV_PATH"
ENV_FILE = "python-env.tar.gz"  # beside config.pbtxt
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
REQUIREMENTS = "requirements.txt"  # beside config.pbtxt: what the model imports beyond the server's Python
# What the stub provides without any package: the python backend's utilities module.
PROVIDED = frozenset({"triton_python_backend_utils"})
_CONDA_PYTHON = re.compile(r"(?:^|/)conda-meta/python-(\d+\.\d+)\.[^/]*\.json$")
_SITE_PACKAGES = re.compile(r"(?:^|/)lib/python(\d+\.\d+)/site-packages/([^/]+)")


@dataclass(frozen=True)
class PackedEnv:
    path: Path
    python: str  # "3.11"
    home: (
        str  # the directory of the base interpreter a venv was made from ("" for a self-contained conda env)
    )
    modules: frozenset[str]  # top-level names importable from its site-packages

    @property
    def interpreter(self) -> str:
        """The base interpreter the environment needs where the server runs ("" when it brings its own)."""
        return f"{self.home.rstrip('/')}/python{self.python}" if self.home else ""


def env_file(config: model_config_pb2.ModelConfig, model_dir: Path) -> Path | None:
    """The tarball ``config``'s EXECUTION_ENV_PATH names (``$$TRITON_MODEL_DIRECTORY`` resolved to
    ``model_dir``), or None when the model has no environment of its own."""
    if ENV_PARAMETER not in config.parameters:
        return None
    value = config.parameters[ENV_PARAMETER].string_value.strip()
    return Path(value.replace(MODEL_DIRECTORY, str(model_dir)))


def read_packed_env(path: Path) -> PackedEnv:
    """What a packed environment holds (a venv-pack tarball, or a conda-pack one: self-contained, its Python
    read from conda-meta); ConfigError naming the file when it is neither."""
    names, pyvenv = _read_tarball(path)
    modules = _site_modules(names)
    if pyvenv is not None:
        settings = dict(_setting(line) for line in pyvenv.splitlines() if "=" in line)
        return PackedEnv(path, _major_minor(settings), settings.get("home", ""), modules)
    conda = next((m for m in map(_CONDA_PYTHON.search, names) if m), None)
    if conda is not None:
        return PackedEnv(path, conda.group(1), "", modules)
    raise ConfigError(
        f"{path} holds neither a pyvenv.cfg nor conda-meta: it is not a packed Python environment.",
        "Pack it with `tbgen env pack` (or conda-pack).",
    )


def _read_tarball(path: Path) -> tuple[list[str], str | None]:
    """The member names of the gzip tarball at ``path``, and the text of the pyvenv.cfg at its top (or one
    directory down; None when there is none); ConfigError when it cannot be read."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            names = tar.getnames()
            member = next(
                (n for n in names if PurePosixPath(n).name == "pyvenv.cfg" and n.count("/") <= 1), None
            )
            if member is None:
                return names, None
            return names, tar.extractfile(member).read().decode(errors="replace")  # type: ignore[union-attr]
    except (OSError, tarfile.TarError) as err:
        raise ConfigError(
            f"Cannot read the packed environment {path}: {err}", "Pack it again with `tbgen env pack`."
        ) from err


def _site_modules(names: list[str]) -> frozenset[str]:
    """The top-level modules of the site-packages entries among a tarball's member ``names``."""
    return frozenset(filter(None, (_module_name(m.group(2)) for m in map(_SITE_PACKAGES.search, names) if m)))


def _major_minor(settings: dict[str, str]) -> str:
    """The Python version ("3.11") of a venv's pyvenv.cfg ``settings`` ("" when it names none)."""
    version = settings.get("version") or settings.get("version_info", "")
    return ".".join(version.split(".")[:2])


def _setting(line: str) -> tuple[str, str]:
    key, _, value = line.partition("=")
    return key.strip(), value.strip()


def _module_name(entry: str) -> str:
    """The importable name of a site-packages entry ("numpy", "six.py" -> "six", "_cffi.cpython-311-x.so")."""
    if entry.endswith((".dist-info", ".egg-info", ".pth", ".data")) or entry.startswith(("_distutils", "__")):
        return ""
    return entry.split(".")[0]


def env_problems(env: PackedEnv, python: str, interpreter_exists: bool, where: str) -> list[str]:
    """Why ``env`` cannot run under a stub of ``python`` ("3.11") ``where`` ("this machine", "image X")."""
    problems = []
    if env.python != python:
        problems.append(
            f"it is a Python {env.python or '?'} environment, and the python backend's stub on {where} "
            f"runs Python {python}"
        )
    elif env.interpreter and not interpreter_exists:
        problems.append(
            f"its base interpreter {env.interpreter} does not exist on {where} (a venv runs the "
            "interpreter it was made from)"
        )
    if "numpy" not in env.modules:
        problems.append("numpy is not in it (the stub imports numpy)")
    return problems


def model_imports(source: Path) -> set[str]:
    """The top-level modules a model.py imports (absolute imports only); empty when it does not parse."""
    try:
        tree = ast.parse(source.read_text(errors="replace"))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def unsatisfied_imports(
    imports: set[str], available: frozenset[str] | set[str], local: set[str]
) -> list[str]:
    """Of ``imports``, those neither in the standard library, nor provided by the stub, nor in ``available``
    (an environment's modules) or ``local`` (modules beside model.py)."""
    return sorted(
        name
        for name in imports
        if name not in sys.stdlib_module_names
        and name not in PROVIDED
        and name not in available
        and name not in local
    )


def with_env_parameter(text: str, value: str) -> str:
    """config.pbtxt ``text`` with EXECUTION_ENV_PATH set to ``value`` (added at the end, or its value
    replaced)."""
    pattern = re.compile(
        r'(key\s*:\s*"' + ENV_PARAMETER + r'"\s*value\s*:?\s*\{\s*string_value\s*:\s*)"[^"]*"'
    )
    if pattern.search(text):
        return pattern.sub(lambda m: f'{m.group(1)}"{value}"', text, count=1)
    if ENV_PARAMETER in text:
        raise ConfigError(
            f"config.pbtxt sets {ENV_PARAMETER} in a form tbgen does not edit.",
            f'Set it by hand: parameters {{ key: "{ENV_PARAMETER}" value: {{ string_value: "{value}" }} }}',
        )
    return (
        text.rstrip("\n") + "\n\n# The model's Python environment, packed by `tbgen env pack` from "
        f'requirements.txt.\nparameters {{\n  key: "{ENV_PARAMETER}"\n'
        f'  value: {{ string_value: "{value}" }}\n}}\n'
    )
