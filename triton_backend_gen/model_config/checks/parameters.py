"""Checks on the parameters a config hands to Triton's core and to the python backend, by the release that
serves the model: TRITON_BATCH_STRATEGY_PATH (core's custom batching library) and the archive
EXECUTION_ENV_PATH names (the python backend's packed environment).

Both are rules a newer server enforces at load time (``versions.FEATURES``): for a release that has the rule,
a config that breaks it is an error; for an older one, a warning that the newer server will refuse it.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.model_config.checks.context import CheckContext
from triton_backend_gen.model_config.env_archive import (
    LibarchiveMissing,
    Refusal,
    refused_entries,
    summarize,
)
from triton_backend_gen.model_config.execution_env import ENV_PARAMETER, MODEL_DIRECTORY, env_file
from triton_backend_gen.project import ELEMENTS_INPUT_PARAMETER, STRATEGY_LIMITS
from triton_backend_gen.versions import FEATURES

BATCH_STRATEGY_PARAMETER = "TRITON_BATCH_STRATEGY_PATH"
# The library core looks for without the parameter: in the version directory, the model's directory, then
# the backend's directory (backend_model.cc), on every release.
BATCH_STRATEGY_LIBRARY = "batchstrategy.so"
CONFINED_BATCH_STRATEGY = "confined_batch_strategy_path"
SECURE_ENV_EXTRACTION = "secure_env_extraction"


UINT64_MAX = 2**64 - 1


def check_parameters(ctx: CheckContext) -> None:
    """TRITON_BATCH_STRATEGY_PATH, the parameters of tbgen's batching strategies and the EXECUTION_ENV_PATH
    archive, by the model's release."""
    if BATCH_STRATEGY_PARAMETER in ctx.config.parameters:
        _check_batch_strategy(ctx)
    _check_strategy_parameters(ctx)
    if ENV_PARAMETER in ctx.config.parameters:
        _check_env_archive(ctx)


def _parameter_line(ctx: CheckContext, key: str) -> int | None:
    node = ctx.tree.with_child("parameters", "key", key)
    return node.line if node is not None else None


# --- TRITON_BATCH_STRATEGY_PATH ------------------------------------------------------------------------
def batch_strategy_problem(value: str, model_dir_name: str) -> tuple[bool, str] | None:
    """Why core may refuse TRITON_BATCH_STRATEGY_PATH ``value`` of the model whose directory is named
    ``model_dir_name``: (refused by every release, why), or None when it names a file inside the model's
    directory.

    From r26.06 core requires the path to resolve inside the model's directory (IsChildPathEscapingParentPath:
    ``weakly_canonical`` of the path, so a relative one resolves against the server's working directory).
    tbgen cannot know where a repository is served (a container mounts it anywhere), so an absolute path is
    taken as inside when the model's directory name is one of its directories (/models/<model>/1/x.so). (A
    repository on cloud storage is copied to a local temporary directory first: there only the library
    found without the parameter, batchstrategy.so in the model's directory, is inside.)"""
    path = PurePosixPath(value.strip())
    if not value.strip():
        return True, "is empty (core looks for a file of that name and finds none)"
    if value.strip().startswith(MODEL_DIRECTORY):
        return True, (
            f"starts with {MODEL_DIRECTORY}, which core does not replace in this parameter (only the python "
            "backend's EXECUTION_ENV_PATH gets it): the server looks for a file literally named so"
        )
    if not path.is_absolute():
        return False, (
            "is a relative path, which core resolves against the server's working directory, not the "
            "model's directory"
        )
    if ".." in path.parts:
        return False, 'has ".." in it, so where it leads depends on the symlinks along the way'
    if model_dir_name not in path.parts[1:-1]:
        return False, f'is not inside the model\'s directory (no directory named "{model_dir_name}" in it)'
    return None


def _check_batch_strategy(ctx: CheckContext) -> None:
    """The custom batching library: never beside a sequence batcher; inside the model's directory."""
    line = _parameter_line(ctx, BATCH_STRATEGY_PARAMETER)
    remedy = (
        f"drop the parameter and install the library as {ctx.model_name}/{BATCH_STRATEGY_LIBRARY} (or in "
        "a version directory), where core finds it without the parameter on every release"
    )
    if ctx.config.HasField("sequence_batching"):
        ctx.error(
            line,
            f"{BATCH_STRATEGY_PARAMETER} cannot be used with sequence_batching (core refuses the load: "
            f'"{BATCH_STRATEGY_PARAMETER} cannot be specified with sequence batcher"); remove the parameter',
        )
        return
    value = ctx.config.parameters[BATCH_STRATEGY_PARAMETER].string_value
    model_dir_name = ctx.model_dir.name if ctx.model_dir is not None else ctx.model_name
    problem = batch_strategy_problem(value, model_dir_name)
    if problem is None:
        return
    always, why = problem
    named = f'{BATCH_STRATEGY_PARAMETER} "{value}" {why}'
    if always:
        ctx.error(line, f"{named}; {remedy}")
        return
    feature, release = FEATURES[CONFINED_BATCH_STRATEGY], ctx.release
    refusal = '("Batching library path escapes model repository")'
    if release.has(CONFINED_BATCH_STRATEGY):
        ctx.error(line, f"{named}: Triton {release.container} refuses the model {refusal}; {remedy}")
    else:
        ctx.warn(
            line,
            f"{named}: Triton {release.container} accepts it, but {feature.since} and later refuse the model "
            f"{refusal}; {remedy}",
        )


def _check_strategy_parameters(ctx: CheckContext) -> None:
    """The model's tbgen batching strategy (tbgen.toml's batch_strategy): its limits positive 64-bit integers,
    the one it reads present, BATCH_ELEMENTS_INPUT an input's name; and a model that can use it (no sequence
    batching, dynamic batching on, max_batch_size 1 or more)."""
    strategy = ctx.expect.batch_strategy
    if not strategy:
        return  # parameters of these names in a model tbgen gave no strategy are someone else's
    parameters = ctx.config.parameters
    for name in STRATEGY_LIMITS.values():
        if name in parameters and _uint64(parameters[name].string_value) is None:
            ctx.error(
                _parameter_line(ctx, name),
                f'{name} "{parameters[name].string_value}" must be a positive integer (at most '
                f"{UINT64_MAX}): the batching strategy reads it at load and fails the model's load otherwise",
            )
    wanted = STRATEGY_LIMITS.get(strategy)
    if wanted and wanted not in parameters:
        ctx.error(
            None,
            f"tbgen.toml gives {ctx.model_name} batch_strategy {strategy}, which reads the parameter "
            f'{wanted}, and config.pbtxt has none: add parameters {{ key: "{wanted}" value {{ string_value: '
            '"..." } }',
        )
    if ELEMENTS_INPUT_PARAMETER in parameters:
        named = parameters[ELEMENTS_INPUT_PARAMETER].string_value
        inputs = [tensor.name for tensor in ctx.config.input]
        if inputs and named not in inputs:
            ctx.error(
                _parameter_line(ctx, ELEMENTS_INPUT_PARAMETER),
                f'{ELEMENTS_INPUT_PARAMETER} "{named}" is no input of the model (its inputs: '
                f"{', '.join(inputs)})",
            )
    problem = _strategy_model_problem(ctx.config)
    if problem:
        ctx.error(None, f"tbgen.toml gives {ctx.model_name} batch_strategy {strategy}, and {problem}")


def _strategy_model_problem(config) -> str:
    """Why a model of ``config`` cannot use a batching strategy ("" when it can)."""
    if config.HasField("sequence_batching"):
        return (
            "config.pbtxt has sequence_batching: core never uses a batching strategy beside a sequence "
            "batcher; remove batch_strategy from tbgen.toml, or the sequence batching"
        )
    if config.max_batch_size < 1:
        return "its max_batch_size is 0: it forms no batches for the strategy to decide"
    if not config.HasField("dynamic_batching"):
        return "config.pbtxt has no dynamic_batching, whose batches it decides: add dynamic_batching { }"
    return ""


def _uint64(text: str) -> int | None:
    """``text`` as a positive 64-bit integer, or None: ASCII digits only, as the strategy's
    ModelParameters::Uint64 takes them (no sign, no blank)."""
    if re.fullmatch(r"[0-9]+", text) is None or not 0 < int(text) <= UINT64_MAX:
        return None
    return int(text)


# --- the EXECUTION_ENV_PATH archive --------------------------------------------------------------------
def _check_env_archive(ctx: CheckContext) -> None:
    """The packed environment unpacks under python_backend's secure extraction (r26.06 and later)."""
    tarball = _env_tarball(ctx)
    if tarball is None:
        return
    line = _parameter_line(ctx, ENV_PARAMETER)
    if not tarball.is_file():
        ctx.note(
            line, f"{ENV_PARAMETER}: {tarball} is not there, so it was not checked; {_repack(ctx, 'pack it')}"
        )
        return
    try:
        refused = refused_entries(tarball)
    except LibarchiveMissing as err:
        ctx.note(
            line,
            f"{ENV_PARAMETER}: {tarball.name} was not checked against the python backend's unpacking: "
            f"{err.message}; {err.hint}",
        )
        return
    except ConfigError as err:
        ctx.error(line, f"{ENV_PARAMETER}: {err.message}; {_repack(ctx)}")
        return
    if refused:
        _report_refusals(ctx, line, tarball, refused)


def _env_tarball(ctx: CheckContext) -> Path | None:
    """The archive EXECUTION_ENV_PATH names, or None when it cannot be told: a config outside a model
    directory using $$TRITON_MODEL_DIRECTORY, or a relative path (the server's working directory is its
    base)."""
    value = ctx.config.parameters[ENV_PARAMETER].string_value.strip()
    if value.startswith(MODEL_DIRECTORY):
        return env_file(ctx.config, ctx.model_dir) if ctx.model_dir is not None else None
    return Path(value) if value.startswith("/") else None


def _report_refusals(ctx: CheckContext, line: int | None, tarball: Path, refused: list[Refusal]) -> None:
    """An error for a release that unpacks securely, else a warning that such a release will refuse it."""
    feature, release = FEATURES[SECURE_ENV_EXTRACTION], ctx.release
    why = f"{summarize(refused)}; {_repack(ctx)}"
    if release.has(SECURE_ENV_EXTRACTION):
        ctx.error(
            line,
            f"{ENV_PARAMETER}: the python backend of Triton {release.container} refuses to unpack "
            f"{tarball.name}: {why}",
        )
    else:
        ctx.warn(
            line,
            f"{ENV_PARAMETER}: {tarball.name} unpacks in Triton {release.container}, but the python backend "
            f"of {feature.since} and later refuses it: {why}",
        )


def _repack(ctx: CheckContext, verb: str = "pack it again") -> str:
    """How to pack the model's environment (again): the runnable command in a tbgen project."""
    model = ctx.model_dir.name if ctx.model_dir is not None else ctx.model_name
    if ctx.expect.project_argument is not None:
        return f"{verb}: `tbgen env pack{ctx.expect.project_argument} --model {model}`"
    return f"{verb} (`tbgen env pack` in a tbgen project; venv-pack or conda-pack elsewhere)"
