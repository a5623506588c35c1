"""What a check found (``Finding``, with a severity) and what a check command reports (``CheckReport``): one
of each for validate (config files), check (a built library), deploy check (a chart) and templates check (the
template variants)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ERROR = "error"  # the checked thing fails: the command exits 1
WARNING = "warning"  # it works here but may not everywhere (another machine, the release's image)
NOTE = "note"  # worth knowing; nothing wrong (a check skipped, and why)
PASSED = "passed"  # a check that found nothing wrong, for the reports that count the checks they ran


@dataclass(frozen=True)
class Finding:
    severity: str  # ERROR, WARNING, NOTE or PASSED
    message: str
    path: Path | None = None  # the file it is about
    line: int | None = None  # 1-based line in ``path``; None when no single line is to blame
    check: str = ""  # which check found it, where a report runs several ("helm lint", "schema 1.29")
    subject: str = ""  # what it is about when that is not a file: an object, a rendering, a library

    @property
    def failed(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.path is not None and self.line is not None else self.path
        where = where or self.subject
        return f"{where}: {self.severity}: {self.message}" if where else f"{self.severity}: {self.message}"


@dataclass
class CheckReport:
    """The findings of one check command about ``subject`` (a library, a chart, the templates), what it was
    checked against (a server, an image, Kubernetes versions) and what it counted (objects, variants,
    files)."""

    subject: str
    findings: list[Finding] = field(default_factory=list)
    against: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def notes(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == NOTE]

    @property
    def passed(self) -> bool:
        return not self.errors
