"""Running a sanitizer build (``tbgen build --sanitize``): what the server needs preloaded, the options it
runs with, and the reports a run left in the server log.

tritonserver itself is not instrumented, so a backend built with -fsanitize=address needs the ASan runtime
loaded first (LD_PRELOAD) or it refuses to start. The runtimes are found from the library's own
dependencies (``ldd``), so whatever build is installed is served correctly. Reports go to the server's
stderr, which is the server log; ``sanitizer_reports`` finds them there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# ASan first: it must come before every other library, UBSan's runtime after it.
_RUNTIME_ORDER = ("libasan", "libubsan")
_LDD_LINE = re.compile(r"^\s*((lib(?:asan|ubsan))\.so\S*)\s+=>\s+(/\S+)", re.MULTILINE)
_REPORT = re.compile(r"ERROR: (?:Address|Leak)Sanitizer|: runtime error: ")

# detect_leaks=0: the server is not instrumented and its exit is not a clean teardown, so a leak check at
# exit reports the server's own allocations. protect_shadow_gap=0: CUDA's driver maps memory there.
ASAN_OPTIONS = "detect_leaks=0:protect_shadow_gap=0:halt_on_error=1"
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=0"


def parse_ldd_runtimes(output: str) -> tuple[Path, ...]:
    """The sanitizer runtimes in ``ldd`` output, ASan first."""
    found = {match.group(2): Path(match.group(3)) for match in _LDD_LINE.finditer(output)}
    return tuple(found[name] for name in _RUNTIME_ORDER if name in found)


def sanitizer_runtimes(library: Path) -> tuple[Path, ...]:
    """The sanitizer runtimes ``library`` links (none for a plain build)."""
    try:
        output = subprocess.run(["ldd", str(library)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return parse_ldd_runtimes(output)


def sanitizer_environment(runtimes: tuple[Path, ...]) -> dict[str, str]:
    """The server's environment additions for a backend that links ``runtimes`` (empty for none)."""
    if not runtimes:
        return {}
    return {
        "LD_PRELOAD": ":".join(map(str, runtimes)),
        "ASAN_OPTIONS": ASAN_OPTIONS,
        "UBSAN_OPTIONS": UBSAN_OPTIONS,
    }


def sanitizer_reports(log: str, context: int = 6) -> list[str]:
    """Each sanitizer report in a server log: its first line and the ``context`` lines after it."""
    lines = log.splitlines()
    return [
        "\n".join(lines[index : index + 1 + context])
        for index, line in enumerate(lines)
        if _REPORT.search(line)
    ]
