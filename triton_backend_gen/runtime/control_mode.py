"""How a server tbgen starts lets its models be loaded and reloaded: Triton's ``--model-control-mode`` and the
flags that go with it (a pure decision; `tbgen serve` passes the flags on).

- ``explicit``: the repository API loads, reloads and unloads models (`tbgen test --url`, `tbgen dev`, curl);
  the server starts with ``--load-model=*`` (every model) or the named ones. The default for a project.
- ``poll``: the server rescans the repository every ``POLL_SECONDS`` and reloads what changed on disk; the
  repository API is refused.
- ``none``: the models of the repository load at start and stay; the repository API is refused. Triton's own
  default, and `tbgen serve`'s for a bare model repository (as it always was).
"""

from __future__ import annotations

from collections.abc import Sequence

from triton_backend_gen.errors import UsageError

MODES = ("explicit", "poll", "none")
POLL_SECONDS = 1  # --repository-poll-secs in poll mode: a change on disk is served within a second


def control_mode_args(
    mode: str | None, *, project: bool, only: Sequence[str] = ()
) -> tuple[str, tuple[str, ...]]:
    """(the mode, the tritonserver flags) of a server for ``mode`` (None: ``explicit`` for a ``project``,
    else ``none``, Triton's default) that loads ``only`` those models when given (else all).
    UsageError for an unknown mode, or for ``only`` with a mode that cannot load some models alone."""
    if mode is not None and mode not in MODES:
        raise UsageError(
            f"--model-control-mode {mode!r} is not a model control mode.",
            "Use --model-control-mode explicit, poll or none.",
        )
    chosen = mode or ("explicit" if project or only else "none")
    if only and chosen != "explicit":
        raise UsageError(
            f"--model loads some models alone, which only explicit model control does "
            f"(--model-control-mode {chosen} loads the whole repository).",
            "Drop --model-control-mode, or drop --model.",
        )
    if chosen == "explicit":
        loads = only or ("*",)
        return chosen, (f"--model-control-mode={chosen}", *(f"--load-model={name}" for name in loads))
    if chosen == "poll":
        return chosen, (f"--model-control-mode={chosen}", f"--repository-poll-secs={POLL_SECONDS}")
    return chosen, ("--model-control-mode=none",)
