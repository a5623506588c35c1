"""bench/cli.py runs and reports each command, the goal and the slow modules `tbgen --help` imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_startup_bench_reports_each_command_the_goal_and_the_slow_imports():
    result = subprocess.run(
        [sys.executable, str(BENCH / "cli.py"), "--runs", "1"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ("python -c pass", "tbgen --version", "tbgen --help"):
        assert any(line.strip().startswith(f"{name}: median") for line in lines), result.stdout
    assert any("goal: tbgen --help under 700 ms:" in line for line in lines)
    assert any(line.strip().startswith("slow imports:") for line in lines)
