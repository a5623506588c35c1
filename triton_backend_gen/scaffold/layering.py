"""The answers `tbgen new` and `tbgen add model` are given, layered before the template's rules see them.

Layers, highest first: flags and ``--set key=value``, then an answers file (another project's tbgen.toml, or a
TOML/JSON file of answers); a model's tensors come from --input/--output or from an imported config. What
is not given takes the template's default later (scaffold.answers.resolve_answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from triton_backend_gen import signature
from triton_backend_gen.errors import UsageError
from triton_backend_gen.scaffold.answers import parse_set_options, read_answers_file


def given_answers(
    *,
    answers_file: Path | None = None,
    flags: Mapping[str, Any] = {},
    sets: list[str] = (),
    inputs: list[str] = (),
    outputs: list[str] = (),
    from_config: Path | None = None,
) -> dict[str, Any]:
    """The answers given on the command line: ``flags`` (None: not given) and ``sets`` over ``answers_file``;
    the tensors of --input/--output (UsageError when --from-config gives them too)."""
    given: dict[str, Any] = read_answers_file(answers_file) if answers_file else {}
    given.update({key: value for key, value in flags.items() if value is not None})
    given.update(parse_set_options(list(sets)))
    flagged = signature.from_flags(list(inputs), list(outputs))
    if flagged is not None and from_config is not None:
        raise UsageError(
            "--from-config gives the model's tensors; --input/--output cannot be added to it.",
            "Drop --input/--output, or edit the configuration you import.",
        )
    if flagged is not None:
        given["signature"] = flagged.context()
    return given
