"""bench/tune.py's smoke run (`--quick --models synthetic`): the synthetic model's project made, `tbgen
tune` and `tbgen tune --grid` run over a small space (instances at 1 and 4 clients), the figures computed and
written. The proof of tune's search (within 5% of the grid's best at least 4x sooner) is the full run, by
hand: its figures are README's; the search's method is tested against a simulated server
(tests/tune/test_search.py)."""

from __future__ import annotations

import json

import pytest
from conftest import run_bench_script

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bench-tune")]


def test_bench_tune_runs_tune_and_the_grid_and_computes_the_figures(tmp_path, server_or_skip):
    figures = tmp_path / "figures.json"
    out = run_bench_script(
        "tune",
        "--quick",
        "--models",
        "synthetic",
        "--work-dir",
        str(tmp_path),
        "--json",
        str(figures),
        timeout=600,
    )
    [synthetic] = json.loads(figures.read_text())
    assert synthetic["model"] == "synthetic" and synthetic["grid_points"] == 4, out  # 2 instances x 2 levels
    assert synthetic["grid_best"] > 0 and synthetic["tune_best"] > 0 and synthetic["tune_points"] >= 1, out
    assert synthetic["grid_best_label"].startswith(("1 inst", "2 inst")), out
    computed, measured = synthetic["execution_ms"]  # a + b x batch against what the server measured
    assert computed * 0.9 <= measured <= computed * 2, out
    tuned = tmp_path / "bench-tune" / "synthetic" / "build" / "tbgen" / "tune"
    assert (tuned / "tune.jsonl").is_file() and (tuned / "grid.jsonl").is_file(), out
    assert "synthetic" in out and "speed-up" in out, out
