"""User-facing errors: one type per stage, each with a message, a hint and an exit code.

The CLI prints ``message`` and ``hint`` and exits with ``exit_code``: 1 when the thing checked or done failed
(a build error, a failing check, a server that would not start, an update conflict), 2 when the command could
not be used as given (bad flags or values, not a project, unreadable or invalid input files; nothing is
written then). No traceback is shown for these. Anything else that escapes is a bug in tbgen and keeps its
traceback.
"""

from __future__ import annotations


class TbgenError(Exception):
    """Base of every error meant for the user."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n{self.hint}" if self.hint else self.message


class UsageError(TbgenError):
    """Bad input from the command line or an answers file: exit code 2, nothing is written."""

    exit_code = 2


class UnknownReleaseError(UsageError):
    """A Triton version that the release matrix does not know."""


class AnswerError(UsageError):
    """An answer that breaks a naming or value rule."""


class ScaffoldError(TbgenError):
    """Rendering or writing a project failed (target exists, template broken, interrupted)."""


class ProjectError(UsageError):
    """A directory is not a tbgen project or its tbgen.toml is unreadable: the command cannot be used here
    (2)."""


class ConfigError(UsageError):
    """An input file (a config.pbtxt, a packed environment) could not be read at all: exit code 2 (validation
    findings are reported, not raised)."""


class BuildError(TbgenError):
    """Configuring, compiling or installing a project failed (the message names the first error and the
    log)."""


class ServerError(TbgenError):
    """No usable tritonserver, or one that would not start, become ready or stop (the message names the
    log)."""


class SourcesError(TbgenError):
    """Filling or reading the Triton source cache failed (a clone, a copy, or an entry that already
    exists)."""


class TuneError(TbgenError):
    """`tbgen tune` could not do what it set out to (write the tuned config.pbtxt)."""
