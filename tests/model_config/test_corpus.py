"""The config corpus: every valid file passes, every invalid file yields exactly the finding it announces.

An invalid file starts with ``# expect: <fragment>`` (an error) or ``# expect warning: <fragment>``; a line
holding ``# <-- here`` is where that finding must point.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from triton_backend_gen.findings import ERROR, WARNING
from triton_backend_gen.model_config import check_config

CORPUS = Path(__file__).parent / "corpus"
VALID = sorted((CORPUS / "valid").glob("*.pbtxt"))
INVALID = sorted((CORPUS / "invalid").glob("*.pbtxt"))
HEADER = re.compile(r"^# expect(?: (error|warning))?: (.+)$")


def expectation(path: Path) -> tuple[str, str, int | None]:
    """(severity, message fragment, marked line or None) that ``path`` announces."""
    lines = path.read_text().splitlines()
    match = HEADER.match(lines[0])
    assert match, (
        f"{path.name}: the first line must be '# expect: <fragment>' or '# expect warning: <fragment>'"
    )
    marked = [number for number, text in enumerate(lines, start=1) if "# <-- here" in text]
    assert len(marked) <= 1, f"{path.name}: at most one '# <-- here' marker"
    return match.group(1) or ERROR, match.group(2).strip(), marked[0] if marked else None


def test_corpus_is_large_enough():
    assert len(VALID) >= 30
    assert len(INVALID) >= 30


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_config_has_no_error(path):
    errors = [str(f) for f in check_config(path) if f.severity == ERROR]
    assert errors == []


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_config_yields_the_announced_finding(path):
    severity, fragment, line = expectation(path)
    findings = check_config(path)
    matching = [f for f in findings if fragment in f.message]
    assert len(matching) == 1, (
        f"expected one finding containing {fragment!r}, got: {[str(f) for f in findings]}"
    )
    finding = matching[0]
    assert finding.severity == severity
    assert finding.path == path
    if line is not None:
        assert finding.line == line, str(finding)
    # Each file tests one rule: no error besides the announced one.
    others = [str(f) for f in findings if f is not finding and f.severity == ERROR]
    assert others == []


def test_corpus_covers_the_features_it_promises():
    """The valid corpus exercises each config feature the issue lists (guards against a shrinking corpus)."""
    text = "\n".join(p.read_text() for p in VALID)
    for feature in (
        'platform: "ensemble"',
        "sequence_batching",
        "TYPE_STRING",
        "reshape",
        "optional: true",
        "instance_group",
        "decoupled: true",
        "preferred_batch_size",
        "parameters",
        "model_warmup",
        "priority_levels",
        "batch_input",
    ):
        assert feature in text, feature
    severities = {expectation(p)[0] for p in INVALID}
    assert severities == {ERROR, WARNING}
