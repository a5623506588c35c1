"""``tbgen add batcher``: give a model of an existing project a batching strategy of its own.

The model's template is rendered into a scratch directory for that model (its signature and batching read
from its config.pbtxt, ``batch_strategy`` and its limit set), and what the strategy adds is taken from it:

    batching/CMakeLists.txt, batchstrategy.ldscript   the CMake project of every model's strategy (when the
                                                      project has none yet)
    batching/<model>/                                 the model's library: generated plumbing, and for
                                                      custom, decision.h, the user's rule
    config.pbtxt                                      the strategy's parameters (and dynamic_batching when
                                                      the model has none), appended
    the model's reference                             custom: include_request, the rule's Python mirror
    tbgen.toml                                        batch_strategy in the model's [[models]] entry

Nothing is overwritten; a model that cannot take a strategy (sequence batching, no batching, an ensemble, a
strategy already) is refused before anything is written, and the writes are all or nothing (a failure or a
signal midway puts every file back).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import UsageError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.model_config.importing import import_config
from triton_backend_gen.project import (
    BATCH_STRATEGIES,
    BATCHING_DIR,
    ELEMENTS_INPUT_PARAMETER,
    STRATEGY_LIMITS,
    ModelEntry,
    Project,
)
from triton_backend_gen.scaffold import model_entries
from triton_backend_gen.scaffold.answers import resolve_answers
from triton_backend_gen.scaffold.record import GeneratedFile, replace_file
from triton_backend_gen.scaffold.render import render_into
from triton_backend_gen.scaffold.templates import Template, get_template
from triton_backend_gen.signals import raise_received, signals_recorded

MIRROR = "include_request"  # a custom rule's mirror in reference.py
IGNORED_LIBRARIES = "model_repository/*/batchstrategy.so"  # a build output, in the project's .gitignore
# The parameters a strategy reads (batching/<model>/decision.h), copied from the rendered config.pbtxt.
STRATEGY_PARAMETERS = (*STRATEGY_LIMITS.values(), ELEMENTS_INPUT_PARAMETER)
# Answers of the project that a stateless model with a signature of its own cannot take.
_NOT_FOR_A_BATCHER = {
    "sequence": "none",
    "pattern": "none",
    "framework": "none",
    "native": False,
    "python_based_backend": False,
    "auto_complete": False,
    "dynamic_batching": True,
    "implicit_state": False,
}


@dataclass(frozen=True)
class AddedBatcher:
    model: str
    strategy: str
    written: tuple[Path, ...]  # the new files
    parameters: tuple[tuple[str, str], ...]  # appended to config.pbtxt


def add_batcher(
    project: Project, model: str, strategy: str, *, limit: int = 0, elements_input: str = ""
) -> AddedBatcher:
    """Give ``model`` of ``project`` the batching strategy ``strategy`` (see the module docstring)."""
    entry = project.model(model)
    template = _template_with_strategies(project, strategy)
    _check_model(entry)
    _check_options(entry, strategy, limit, elements_input)
    imported = import_config(entry.config_file, template.name)
    given = {
        **{k: v for k, v in project.answers.items() if template.option(k) is not None},
        **_NOT_FOR_A_BATCHER,
        **imported.answers(template.name),
        "model_name": model,
        "batch_strategy": strategy,
        "batch_limit": limit,
        "batch_input": elements_input,
    }
    answers = resolve_answers(template, {k: v for k, v in given.items() if template.option(k) is not None})
    with tempfile.TemporaryDirectory(prefix="tbgen-batcher-") as scratch:
        rendered = render_into(template, answers, Path(scratch))
        files = _new_files(project, rendered, model)
        parameters = _strategy_parameters(rendered / "model_repository" / model / "config.pbtxt")
        mirror = _reference_mirror(rendered / "reference.py") if strategy == "custom" else ""
    edits = _edits(project, entry, strategy, parameters, mirror)
    written = _commit(files, edits)
    return AddedBatcher(model, strategy, tuple(written), parameters)


def _template_with_strategies(project: Project, strategy: str) -> Template:
    """The project's template, when its models take batching strategies; UsageError otherwise."""
    if strategy not in BATCH_STRATEGIES:
        raise UsageError(
            f"--strategy {strategy!r} is no batching strategy.", f"Use one of: {', '.join(BATCH_STRATEGIES)}."
        )
    template = get_template(project.template)
    if template.option("batch_strategy") is None:
        raise UsageError(
            f"{project.template} models take no batching strategy yet: cpp-backend and python-backend "
            "projects do.",
            "Add a cpp-backend or python-backend model with `tbgen add model`, then give it a strategy.",
        )
    return template


def _check_model(entry: ModelEntry) -> None:
    """UsageError for a model that cannot take a strategy, saying why (nothing written yet)."""
    name = entry.name
    if entry.batch_strategy:
        raise UsageError(
            f"{name} has a batching strategy already ({entry.batch_strategy}, in {BATCHING_DIR}/{name}/).",
            f"Edit {BATCHING_DIR}/{name}/decision.h, or change the limit in its config.pbtxt parameters.",
        )
    config = load_model_config(entry.config_file)
    problem = None
    if config.HasField("sequence_batching"):
        problem = "it has sequence_batching, and Triton refuses a batching strategy beside a sequence batcher"
    elif config.platform == "ensemble" or config.HasField("ensemble_scheduling"):
        problem = "it is an ensemble, which forms no batches of its own (its steps do)"
    elif config.max_batch_size < 1:
        problem = "its max_batch_size is 0, so it forms no batches for a strategy to decide"
    if problem:
        raise UsageError(
            f"{name} cannot take a batching strategy: {problem}.",
            "Give the strategy to a model with max_batch_size >= 1 and dynamic (not sequence) batching.",
        )


def _new_files(project: Project, rendered: Path, model: str) -> dict[Path, bytes]:
    """What the rendered project's batching/ adds to ``project``: the model's directory (which must be new),
    the CMake project's files when the project lacks them; by destination."""
    source = rendered / BATCHING_DIR
    files = {}
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = path.relative_to(source)
        dest = project.batching_dir / relative
        own = relative.parts[0] == model
        if dest.exists() and own:
            raise UsageError(
                f"{dest} exists already; tbgen never overwrites it.",
                f"Move {project.batching_dir / model} aside (it is no model's strategy in tbgen.toml), then "
                "run this again.",
            )
        if own or not dest.exists():
            files[dest] = path.read_bytes()
    return files


def _strategy_parameters(config_file: Path) -> tuple[tuple[str, str], ...]:
    """The strategy's parameters of the rendered config.pbtxt."""
    parameters = load_model_config(config_file).parameters
    return tuple((key, parameters[key].string_value) for key in STRATEGY_PARAMETERS if key in parameters)


def _reference_mirror(reference: Path) -> str:
    """The rendered reference.py's include_request (the Python mirror of a custom rule), "" when it has
    none."""
    lines = reference.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"def {MIRROR}(")), None)
    if start is None:
        return ""
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines)
    )
    return "\n".join(lines[start:end]).rstrip() + "\n"


def _check_options(entry: ModelEntry, strategy: str, limit: int, elements_input: str) -> None:
    """UsageError for --limit or --input that ``strategy`` does not take, or an --input that is no input of
    the model (the flags of `tbgen add batcher`, said as such)."""
    if limit and strategy == "single":
        raise UsageError("--limit: single has no limit (every batch holds one request).", "Drop --limit.")
    if not elements_input:
        return
    inputs = [tensor.name for tensor in load_model_config(entry.config_file).input]
    if strategy not in ("tokens", "custom") or elements_input not in inputs:
        raise UsageError(
            f"--input {elements_input!r} names the input whose elements tokens (or custom) counts; "
            + (
                f"{entry.name}'s inputs are {', '.join(inputs)}."
                if strategy in ("tokens", "custom")
                else f"{strategy} counts none."
            ),
            f"Example: --strategy tokens --input {inputs[0] if inputs else 'NAME'}",
        )


def _edits(
    project: Project, entry: ModelEntry, strategy: str, parameters: tuple[tuple[str, str], ...], mirror: str
) -> dict[Path, str]:
    """The existing files the strategy changes, with their new texts: config.pbtxt (its parameters, and
    dynamic_batching when it has none), tbgen.toml (batch_strategy in the model's entry), .gitignore (the
    built library), and for custom the model's reference (include_request, unless it has one)."""
    added = [
        f"\n# Batching strategy ({strategy}): {BATCHING_DIR}/{entry.name}/, installed beside this file as "
        "batchstrategy.so by `tbgen build`."
    ]
    added += [
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}' for key, value in parameters
    ]
    if not load_model_config(entry.config_file).HasField("dynamic_batching"):
        added.append("dynamic_batching { }")
    toml_text = model_entries.set_entry_line(
        project.project_file.read_text(), entry.name, f'batch_strategy = "{strategy}"'
    )
    model_entries.checked(toml_text, [m.name for m in project.models], str(project.project_file))
    edits = {
        entry.config_file: entry.config_file.read_text().rstrip("\n") + "\n" + "\n".join(added) + "\n",
        project.project_file: toml_text,
    }
    gitignore = project.root / ".gitignore"
    ignores = gitignore.read_text() if gitignore.is_file() else ""
    if IGNORED_LIBRARIES not in ignores.splitlines():
        edits[gitignore] = (
            ignores + ("\n" if ignores and not ignores.endswith("\n") else "") + IGNORED_LIBRARIES + "\n"
        )
    reference = entry.reference or project.reference_file
    text = reference.read_text() if reference.is_file() else ""
    if mirror and f"def {MIRROR}(" not in text:
        edits[reference] = text.rstrip("\n") + "\n\n\n" + mirror
    return edits


def _commit(files: dict[Path, bytes], edits: dict[Path, str]) -> list[Path]:
    """Write the new ``files`` (never over one) and the ``edits``, all or nothing: on any failure or signal
    the new files go and the edited ones get their texts back. The new files, written."""
    written: list[Path] = []
    before: dict[Path, bytes | None] = {}
    made = sorted({parent for dest in files for parent in dest.parents if not parent.exists()})
    with signals_recorded() as received:
        try:
            for dest, data in files.items():
                dest.parent.mkdir(parents=True, exist_ok=True)
                with dest.open("xb") as out:  # "x": never over a file that appeared meanwhile
                    out.write(data)
                written.append(dest)
            for path, text in edits.items():
                original = path.read_bytes() if path.exists() else None
                replace_file(path, GeneratedFile(text.encode()))  # whole, or not at all
                before[path] = original
        except BaseException:
            _undo(written, made, before)
            raise
        if received:
            _undo(written, made, before)
    raise_received(received)
    return written


def _undo(written: list[Path], made: list[Path], before: dict[Path, bytes | None]) -> None:
    """Take back what _commit did: the new files and the directories ``made`` for them removed, the edited
    files' bytes restored."""
    for path in written:
        path.unlink(missing_ok=True)
    for directory in sorted(made, reverse=True):  # deepest first
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    for path, data in before.items():
        if data is None:
            path.unlink(missing_ok=True)
        else:
            replace_file(path, GeneratedFile(data))
