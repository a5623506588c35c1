"""The project: ``tbgen.toml`` read once into a typed :class:`Project` (the contract between tbgen's stages).

Every stage after ``tbgen new`` takes a :class:`Project` from :func:`load_project` and asks it for what it
needs: the backend's kind, the release (a :class:`versions.Release`), the models, and every path under the
project (build tree, installed library, server log ...). Nothing else reads tbgen.toml or rebuilds a path.

    <root>/tbgen.toml              the manifest (see docs/templates.md)
    <root>/model_repository/       the models (``model_repository``)
    <root>/build/                  CMake's tree of a C++ build (``build_dir``)
    <root>/build/install/          what it installs; backends/<backend>/libtriton_<backend>.so (``library``)
    <root>/build/sanitize/         a --sanitize build (``sanitize_build_dir``)
    <root>/build/native/           a python project's pybind11 extension (``native_build_dir``)
    <root>/build/batching/         the models' batching strategies (``batching_build_dir``), each installed
                                   as <model directory>/batchstrategy.so
    <root>/build/docker/<image>/   a --docker build (``docker_build_dir(image)``)
    <root>/build/tbgen/            the runtime's: backend tree, server log, run copies (``runtime_dir``)
"""

from __future__ import annotations

import enum
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_backend_gen import versions
from triton_backend_gen.errors import ProjectError, UnknownReleaseError, UsageError

PROJECT_FILE = "tbgen.toml"
BATCH_STRATEGIES = ("single", "volume", "tokens", "custom")  # a model's batch_strategy in tbgen.toml
# The config.pbtxt parameter of each strategy's limit (batching/<model>/decision.h reads it once, at load),
# and of the input whose elements tokens (or a custom rule) counts: the one list of their names.
STRATEGY_LIMITS = {
    "volume": "MAX_BATCH_VOLUME_BYTES",
    "tokens": "MAX_BATCH_ELEMENTS",
    "custom": "MAX_BATCH_REQUESTS",
}
ELEMENTS_INPUT_PARAMETER = "BATCH_ELEMENTS_INPUT"
BATCH_STRATEGY_LIBRARY = "batchstrategy.so"  # the name Triton looks for in a model's directory
BATCHING_DIR = "batching"  # <root>/batching/: the CMake project of the models' batching strategies


class BackendKind(enum.Enum):
    """What serves the project's models."""

    CPP = "cpp"  # a C++ backend library built by CMake (cpp-backend, decoupled-backend with language=cpp)
    PYTHON = (
        "python"  # models of Triton's python backend (python-backend, decoupled-backend with language=python)
    )
    PYTHON_BASED = (
        "python-based"  # a Python-based backend: backends/<backend>/model.py beside the python backend
    )


@dataclass(frozen=True)
class ModelEntry:
    """One model of the project's repository (a ``[[models]]`` entry)."""

    name: str
    directory: Path  # <model_repository>/<name>
    decoupled: bool = False
    reference: Path | None = None  # its numpy reference: <root>/reference.py unless [[models]] names another
    pattern: str = ""  # how it composes other models: bls, bls-async, bls-decoupled, ensemble ("" for none)
    backend: str | None = (
        None  # the backend serving it when it is not the project's (a python model beside C++)
    )
    calls: tuple[str, ...] = ()  # the models a composed model sends requests to
    metrics: tuple[str, ...] = ()  # the custom metric families it publishes (checked by tbgen test)
    # request parameters it answers back as response parameters: (name, the value it answers when absent)
    parameters: tuple[tuple[str, str], ...] = ()
    # the dynamic batcher's include rule in batching/<name>/ (single, volume, tokens, custom; "" for Triton's
    # own), built by `tbgen build` into <directory>/batchstrategy.so
    batch_strategy: str = ""

    @property
    def config_file(self) -> Path:
        return self.directory / "config.pbtxt"

    @property
    def batch_strategy_library(self) -> Path:
        """Where `tbgen build` installs the model's batching strategy: beside its config.pbtxt, where Triton
        looks for batchstrategy.so (and where r26.06+ requires it)."""
        return self.directory / BATCH_STRATEGY_LIBRARY


@dataclass(frozen=True)
class NativeSpec:
    """A python project's pybind11 extension (the ``[native]`` table): built by `tbgen build`."""

    source_dir: Path
    module: str
    install_dir: Path


@dataclass(frozen=True)
class Project:
    root: Path
    template: str
    template_version: str
    name: str
    backend: str
    kind: BackendKind
    release: versions.Release
    gpu: bool
    model_repository: Path
    models: tuple[ModelEntry, ...]
    native: NativeSpec | None = None
    python_based_dir: Path | None = None  # backends/<backend> of a Python-based backend
    framework: str = "none"  # the inference library a cpp-backend wraps (frameworks.FRAMEWORKS), or "none"
    # the [answers] table: the answers the project was rendered with (left out of the hash: a dict has none)
    answers: dict[str, Any] = field(default_factory=dict, hash=False)

    # --- what it is ----------------------------------------------------------------------------------------
    @property
    def is_cpp(self) -> bool:
        return self.kind is BackendKind.CPP

    @property
    def decoupled(self) -> bool:
        return any(model.decoupled for model in self.models)

    def needed_by(self, name: str) -> list[str]:
        """``name`` and every model it calls, directly or through others (those tbgen.toml lists)."""
        needed, todo = [], [name]
        while todo:
            model = todo.pop(0)
            if model not in needed:
                needed.append(model)
                todo += next((m.calls for m in self.models if m.name == model), ())
        return needed

    def model(self, name: str | None) -> ModelEntry:
        """The model called ``name`` (the first model for None); UsageError naming the models otherwise."""
        if not self.models:
            raise ProjectError(
                f"{self.project_file} lists no models.", "Add a [[models]] entry (see docs/templates.md)."
            )
        for model in self.models:
            if name in (None, model.name):
                return model
        raise UsageError(
            f"{self.name} has no model {name!r}.", f"Its models: {', '.join(m.name for m in self.models)}."
        )

    def project_option(self) -> str:
        """What a suggested command adds to name this project: "" when the current directory is in it, else
        ``--project PATH`` (relative when the project is below the current directory, quoted for a shell)."""
        cwd = Path.cwd().resolve()
        if cwd == self.root or self.root in cwd.parents:
            return ""
        path = self.root.relative_to(cwd) if cwd in self.root.parents else self.root
        return f" --project {shlex.quote(str(path))}"

    def path_argument(self) -> str:
        """What a suggested command that takes the project as its argument (`tbgen build`, `tbgen test`) adds:
        "" when the current directory is in it, else `` PATH``."""
        return self.project_option().removeprefix(" --project")

    # --- where things are -----------------------------------------------------------------------------------
    @property
    def project_file(self) -> Path:
        return self.root / PROJECT_FILE

    @property
    def reference_file(self) -> Path:
        return self.root / "reference.py"

    @property
    def export_script(self) -> Path:
        """export_model.py of a framework project: it writes the example model file."""
        return self.root / "export_model.py"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def install_dir(self) -> Path:
        return self.build_dir / "install"

    @property
    def installed_backend_dir(self) -> Path:
        return self.install_dir / "backends" / self.backend

    @property
    def library(self) -> Path:
        """The installed C++ backend library."""
        return self.installed_backend_dir / f"libtriton_{self.backend}.so"

    @property
    def sanitize_build_dir(self) -> Path:
        return self.build_dir / "sanitize"

    @property
    def native_build_dir(self) -> Path:
        return self.build_dir / "native"

    @property
    def batching_dir(self) -> Path:
        """batching/: the CMake project of the models' batching strategies (one library per model)."""
        return self.root / BATCHING_DIR

    @property
    def batching_build_dir(self) -> Path:
        return self.build_dir / BATCHING_DIR

    @property
    def batched_models(self) -> tuple[ModelEntry, ...]:
        """The models with a batching strategy of their own (batching/<model>/)."""
        return tuple(model for model in self.models if model.batch_strategy)

    def docker_build_dir(self, image: str) -> Path:
        """The CMake tree of a build in ``image`` (each image gets its own)."""
        return self.build_dir / "docker" / image_slug(image)

    @property
    def runtime_dir(self) -> Path:
        """The runtime's own directory (backend tree, logs, run copies); `tbgen build --clean` keeps it."""
        return self.build_dir / "tbgen"

    @property
    def server_log(self) -> Path:
        return self.runtime_dir / "server.log"


def image_slug(image: str) -> str:
    """A directory name for a container image."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", image).strip("_")


def find_project_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds a tbgen.toml, or None."""
    start = Path(start).resolve()
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
        return parse_project(root, toml_tables(file.read_text()))
    except tomllib.TOMLDecodeError as err:
        raise ProjectError(
            f"{file} is not valid TOML: {err}", "Fix the file or render the project again."
        ) from err
    except UnknownReleaseError as err:
        raise ProjectError(f"{file}: {err.message}", err.hint) from err
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ProjectError(
            f"{file} lacks or mistypes the entry {err}.",
            "Compare it with docs/templates.md, or restore it from version control.",
        ) from err


def toml_tables(text: str) -> dict[str, Any]:
    """The tables of ``text``, a tbgen.toml or an answers file in TOML (the one place tbgen parses TOML);
    tomllib.TOMLDecodeError when it is not TOML."""
    return tomllib.loads(text)


def model_tables(text: str) -> list[dict[str, Any]]:
    """The [[models]] tables of ``text``, a tbgen.toml."""
    return list(toml_tables(text).get("models", []))


TOMLError = tomllib.TOMLDecodeError  # what toml_tables raises for text that is not TOML


def load_project_or_none(path: Path) -> Project | None:
    """The project at or above ``path``, or None when there is none (a bare model repository)."""
    return load_project(path) if find_project_root(path) is not None else None


def parse_project(root: Path, data: dict[str, Any]) -> Project:
    """A Project from tbgen.toml's tables (KeyError/TypeError/ValueError on a missing or mistyped entry)."""
    meta, proj = data["tbgen"], data["project"]
    repository = root / str(proj.get("model_repository", "model_repository"))
    based = data.get("python_based_backend")
    kind = _backend_kind(str(proj["language"]), python_based=bool(based))
    native, answers = data.get("native"), data.get("answers", {})
    if not isinstance(answers, dict):
        raise ValueError(f"answers = {answers!r} (a table)")
    return Project(
        root=root,
        template=str(meta["template"]),
        template_version=str(meta["template_version"]),
        name=str(proj["name"]),
        backend=str(proj["backend"]),
        kind=kind,
        release=versions.resolve(str(proj["triton_version"])),
        gpu=bool(proj.get("gpu", False)),
        model_repository=repository,
        models=tuple(_model_entry(root, repository, m) for m in data.get("models", [])),
        native=NativeSpec(root / native["source_dir"], str(native["module"]), root / native["install_dir"])
        if native
        else None,
        python_based_dir=root / str(based.get("dir", f"backends/{proj['backend']}")) if based else None,
        framework=str(proj.get("framework", "none")),
        answers=dict(answers),
    )


def _backend_kind(language: str, *, python_based: bool) -> BackendKind:
    """What serves the models of a project in ``language`` (ValueError for another than cpp or python)."""
    if language not in ("cpp", "python"):
        raise ValueError(f"project.language = {language!r} (cpp or python)")
    if language == "cpp":
        return BackendKind.CPP
    return BackendKind.PYTHON_BASED if python_based else BackendKind.PYTHON


def _model_entry(root: Path, repository: Path, table: dict[str, Any]) -> ModelEntry:
    """One [[models]] table as a ModelEntry."""
    return ModelEntry(
        str(table["name"]),
        repository / str(table["name"]),
        bool(table.get("decoupled", False)),
        root / str(table.get("reference", "reference.py")),
        str(table.get("pattern", "")),
        str(table["backend"]) if "backend" in table else None,
        tuple(str(name) for name in table.get("calls", ())),
        tuple(str(name) for name in table.get("metrics", ())),
        tuple((str(k), str(v)) for k, v in table.get("parameters", {}).items()),
        _batch_strategy(table.get("batch_strategy", "")),
    )


def _batch_strategy(value: Any) -> str:
    """A [[models]] entry's batch_strategy (ValueError for one tbgen does not know)."""
    if value not in ("", *BATCH_STRATEGIES):
        raise ValueError(f"batch_strategy = {value!r} (one of {', '.join(BATCH_STRATEGIES)})")
    return str(value)
