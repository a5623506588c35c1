"""Checks on the model as a whole: its backend and platform, what the project expects of it, and the model
directory around its config."""

from __future__ import annotations

from pathlib import Path

from triton_backend_gen.model_config.checks.context import ENSEMBLE_PLATFORM, PLATFORM_BACKENDS, CheckContext


def check_identity(ctx: CheckContext) -> None:
    """Backend, platform and max_batch_size."""
    c = ctx.config
    if ctx.is_ensemble:
        if c.backend:
            ctx.error(
                ctx.line_of("backend"),
                f'backend "{c.backend}" is set on an ensemble; an ensemble has platform: "ensemble" and no '
                "backend: remove the backend line",
            )
        return
    if not c.backend and not c.platform and ctx.effective_backend() is None:
        ctx.error(
            ctx.line_of("name"),
            'neither backend nor platform is set; add backend: "<name>" (e.g. backend: "python"), or '
            'platform: "ensemble" for an ensemble',
        )
    _check_platform(ctx)
    if c.max_batch_size < 0:
        ctx.error(
            ctx.line_of("max_batch_size"),
            f"max_batch_size is {c.max_batch_size}; it must be 0 (no batching) or a positive batch size",
        )


def _check_platform(ctx: CheckContext) -> None:
    """A platform Triton knows, and (next to a known backend) the one that belongs to it."""
    c = ctx.config
    if (
        c.platform
        and c.platform not in PLATFORM_BACKENDS
        and c.platform != ENSEMBLE_PLATFORM
        and not c.backend
    ):
        ctx.error(
            ctx.line_of("platform"),
            f'platform "{c.platform}" is not one Triton knows; use backend: "<name>" for a custom backend '
            f"(known platforms: {', '.join([*PLATFORM_BACKENDS, ENSEMBLE_PLATFORM])})",
        )
    known_backend = c.backend in PLATFORM_BACKENDS.values()
    if c.backend and c.platform and known_backend and PLATFORM_BACKENDS.get(c.platform) != c.backend:
        ctx.error(
            ctx.line_of("platform"),
            f'platform "{c.platform}" does not belong to backend "{c.backend}"; remove the platform line',
        )


def check_expectations(ctx: CheckContext) -> None:
    """What tbgen.toml says of the model: decoupled or not, and its backend."""
    _check_expected_decoupled(ctx)
    if ctx.expect.backend is not None and not ctx.is_ensemble:
        backend = ctx.effective_backend()
        if backend is not None and backend != ctx.expect.backend:
            ctx.error(
                ctx.line_of("backend") or ctx.line_of("platform") or ctx.line_of("name"),
                f'backend "{backend}" does not match the project\'s backend "{ctx.expect.backend}"; set '
                f'backend: "{ctx.expect.backend}"',
            )


def _check_expected_decoupled(ctx: CheckContext) -> None:
    """The decoupled policy where tbgen.toml says the model is decoupled, and only there."""
    decoupled = ctx.config.model_transaction_policy.decoupled
    if ctx.expect.decoupled is True and not decoupled:
        ctx.error(
            ctx.line_of("model_transaction_policy") or ctx.line_of("name"),
            "the model is decoupled in tbgen.toml but its config lacks the decoupled policy; add "
            "model_transaction_policy { decoupled: true }",
        )
    elif ctx.expect.decoupled is False and decoupled:
        ctx.warn(
            ctx.line_of("model_transaction_policy", "decoupled"),
            "model_transaction_policy sets decoupled: true but tbgen.toml says the model is not decoupled; "
            "remove the policy, or set decoupled = true for the model in tbgen.toml",
        )


def check_model_directory(ctx: CheckContext) -> None:
    """Name, version directories and model file, when the config is ``<model>/config.pbtxt``."""
    model_dir, c = ctx.model_dir, ctx.config
    if model_dir is None:
        return
    if c.name and c.name != model_dir.name:
        ctx.error(
            ctx.line_of("name"),
            f'model name "{c.name}" differs from its directory "{model_dir.name}"; Triton requires them '
            f'to be equal: set name: "{model_dir.name}" or remove the name line',
        )
    versions = ctx.version_dirs()
    if not versions:
        ctx.error(
            None,
            f"{model_dir} has no version directory; add one named by a number, e.g. "
            f"{model_dir.name}/1/ (empty is fine for C++ backends and ensembles)",
        )
    elif ctx.effective_backend() == "python" and c.backend in ("python", ""):
        _check_python_model_files(ctx, model_dir, versions)


def _check_python_model_files(ctx: CheckContext, model_dir: Path, versions: list[Path]) -> None:
    """The python backend's model file (model.py, or default_model_filename) in every version directory."""
    filename = ctx.config.default_model_filename or "model.py"
    missing = [v.name for v in versions if not (v / filename).is_file()]
    if missing:
        ctx.error(
            ctx.line_of("backend"),
            f"the python backend loads {filename} from each version directory, but "
            + ", ".join(f"{model_dir.name}/{m}/" for m in missing)
            + f" has none; add {filename} there",
        )
