"""check_config: every finding for one config, from the checks of each theme module."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.findings import ERROR, Finding
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.checks.context import CheckContext
from triton_backend_gen.model_config.checks.ensembles import check_ensemble
from triton_backend_gen.model_config.checks.model import (
    check_expectations,
    check_identity,
    check_model_directory,
)
from triton_backend_gen.model_config.checks.parameters import check_parameters
from triton_backend_gen.model_config.checks.scheduling import (
    check_batching,
    check_instance_groups,
    check_transaction_policy,
)
from triton_backend_gen.model_config.checks.tensors import check_batch_io, check_tensors, check_warmup
from triton_backend_gen.model_config.expectations import Expectations
from triton_backend_gen.model_config.locate import locate
from triton_backend_gen.model_config.parsing import explain_parse_error, parse_text, read_text

text_format = lazy_module("google.protobuf.text_format")

_CHECKS = (
    check_identity,
    check_tensors,
    check_batching,
    check_instance_groups,
    check_warmup,
    check_batch_io,
    check_ensemble,
    check_transaction_policy,
    check_expectations,
    check_model_directory,
    check_parameters,
)
# The rules that change with the release serving the model (what `tbgen check` also reports).
RELEASE_RULES = (check_parameters,)
_NOTHING_EXPECTED = Expectations()


def check_config(
    path: Path, expect: Expectations = _NOTHING_EXPECTED, checks: tuple[Callable, ...] = _CHECKS
) -> list[Finding]:
    """Every finding for the config at ``path``: parse errors, Triton's load-time rules, project expectations
    (``checks``: only those, e.g. RELEASE_RULES).

    When ``path`` is ``<model>/config.pbtxt`` inside a model repository, the directory is checked too (model
    name, version directories, model.py for the python backend, the models an ensemble calls)."""
    path = Path(path)
    try:
        text = read_text(path)
    except ConfigError as err:
        return [Finding(ERROR, err.message, path=path)]
    try:
        config = parse_text(text)
    except text_format.ParseError as err:
        line, message = explain_parse_error(err)
        return [Finding(ERROR, message, path=path, line=line)]
    ctx = CheckContext(path, config, locate(text), expect)
    for check in checks:
        check(ctx)
    return sorted(ctx.findings, key=lambda f: (f.line or 0, f.severity != ERROR, f.message))
