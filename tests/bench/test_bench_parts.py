"""Smoke runs of every part of bench/, so that a benchmark that breaks fails here rather than on the day
someone re-measures: bench/backends.py with all its parts in one run (--quick: concurrency 1, each model
measured once, the shortest windows), bench/build.py with the compiler cache on, bench/new.py with one run.
The figures of these runs mean nothing; what is checked is that each part prints its tables, a row per
compared backend with its ratio.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO_ROOT, triton_sources_or_skip

BENCH = REPO_ROOT / "bench"
RELEASE = "r24.10"

# One worker for the module: its module-scoped server serves every test (see tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("bench-parts")]

# Each part of bench/backends.py: the tables it prints, as (title pattern, the two columns it compares).
PAIR_TABLES = {
    "cpp": [
        (r"C\+\+ FP32 \[16\]: generated add/sub vs floor", ("generated", "floor")),
        (r"C\+\+ FP32 \[65536\]: generated add/sub vs floor", ("generated", "floor")),
    ],
    "signatures": [
        (r"C\+\+ mixed .*: generated vs floor", ("generated", "floor")),
        (r"C\+\+ BYTES TEXT \[1\] .*: generated vs floor", ("generated", "floor")),
        (r"C\+\+ BYTES TEXT \[65536\] .*: generated vs floor", ("generated", "floor")),
    ],
    "python": [
        (
            r"Python FP32 \[16\], dynamic batching .*: generated model\.py vs per-request loop",
            ("generated", "loop"),
        ),
        (
            r"Python FP32 \[16\], no dynamic batching: generated model\.py vs per-request loop",
            ("generated", "loop"),
        ),
    ],
    "decoupled": [
        (
            r"Decoupled C\+\+ TEXT, N -> TOKEN, INDEX, 16 responses a request: generated vs floor",
            ("generated", "floor"),
        )
    ],
    "frameworks": [
        (rf"libtorch FP32 \[{size}\]: generated vs {baseline}", ("generated", name))
        for size in (16, 65536)
        for baseline, name in ((r"python\+torch per request", "python+torch"), ("floor", "floor"))
    ],
    "composed": [
        (r"Python BLS router .* vs add_sub directly", ("via BLS", "direct")),
        (r"C\+\+ BLS router .* vs add_sub directly", ("via BLS", "direct")),
    ],
    "sequence": [
        (rf"C\+\+ sequence accumulator \({strategy}\) vs {baseline}", ("sequence", name))
        for strategy in ("direct", "oldest", "direct, implicit state")
        for baseline, name in (("stateless", "stateless"), ("the floor", "floor"))
    ],
}
PARTS = tuple(PAIR_TABLES)
NUMBER = r"[\d,]+(?:\.\d+)?"


def tables(output: str) -> dict[str, list[str]]:
    """{title line: the lines under it} of what bench/backends.py printed (blank lines separate tables)."""
    found = {}
    for block in re.split(r"\n\s*\n", output):
        lines = block.strip("\n").splitlines()
        if lines:
            found[lines[0]] = lines[1:]
    return found


def table(found: dict[str, list[str]], pattern: str, output: str) -> list[str]:
    matches = [lines for title, lines in found.items() if re.match(pattern, title)]
    assert len(matches) == 1, f"no single table titled {pattern!r} in:\n{output[-6000:]}"
    return matches[0]


def assert_pair_table(lines: list[str], names: tuple[str, str]) -> None:
    """A header naming both columns and a ratio, then one row per concurrency level (1 alone in --quick)."""
    header, *rows = lines
    assert re.search(rf"\bconc\s+{re.escape(names[0])}\s+{re.escape(names[1])}\s+ratio\b", header), header
    assert len(rows) == 1, rows
    assert re.match(rf"\s+1\s+{NUMBER}/s\s+{NUMBER}/s\s+(\d+\.\d\d|inf)x\s", rows[0]), rows[0]


@pytest.fixture(scope="module")
def backends_run(tmp_path_factory, compiler_cache) -> subprocess.CompletedProcess:
    """bench/backends.py, every part in one run (the floor built once, the C++ builds from the compiler
    cache)."""
    from triton_backend_gen.discovery import find_tritonserver
    from triton_backend_gen.errors import ServerError
    from triton_backend_gen.perf.perf_analyzer import find_perf_analyzer

    triton_sources_or_skip(RELEASE)
    try:
        find_tritonserver()
    except ServerError as err:
        pytest.skip(f"no tritonserver to run the benchmarks on: {err.message}")
    if find_perf_analyzer() is None:
        pytest.skip("perf_analyzer is not installed (the sequence part needs it; tritonclient 2.51 ships it)")
    work = tmp_path_factory.mktemp("bench-backends")
    only = [arg for part in PARTS for arg in ("--only", part)]
    command = [
        sys.executable,
        str(BENCH / "backends.py"),
        *only,
        "--duration",
        "0.3s",
        "--quick",
        "--work-dir",
        str(work),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)


@pytest.mark.cpp
def test_backends_runs_every_part_to_its_end(backends_run):
    assert backends_run.returncode == 0, backends_run.stdout[-4000:] + backends_run.stderr[-4000:]
    assert "--quick" in backends_run.stdout.splitlines()[0]


@pytest.mark.cpp
@pytest.mark.parametrize("part", PARTS)
def test_each_part_of_backends_prints_its_tables(backends_run, part):
    output = backends_run.stdout
    found = tables(output)
    expected = PAIR_TABLES[part]
    if part == "frameworks":
        skipped = re.search(r"^frameworks skipped: no example model\.pt.*$", output, re.MULTILINE)
        if skipped:
            pytest.skip(skipped.group(0))  # no Python with torch; a libtorch that does not build fails below
        if re.search(r"^python\+torch baseline skipped", output, re.MULTILINE):
            expected = [(title, names) for title, names in expected if names[1] != "python+torch"]
        assert re.search(r"within 10% of the floor at \[16\]: (met|NOT met) \(lowest \d+\.\d\dx\)", output)
    if part == "composed":
        header, *rows = table(found, r"Ensemble preprocess .* -> postprocess", output)
        assert re.search(r"ensemble\s+steps in a row\s+ratio\s+ensemble p50\s+sum of p50s\s+ratio", header)
        assert len(rows) == 1 and len(re.findall(r"\d+\.\d\dx", rows[0])) == 2, rows
    for pattern, names in expected:
        assert_pair_table(table(found, pattern, output), names)


@pytest.mark.cpp
def test_build_benchmark_times_its_three_builds(compiler_cache):
    triton_sources_or_skip(RELEASE)
    result = subprocess.run(
        [sys.executable, str(BENCH / "build.py"), "--ccache"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = re.findall(r"^  (.+?)\s*: +(\d+\.\d) s$", result.stdout, re.MULTILINE)
    labels = [label for label, _ in rows]
    assert labels == ["first configure + build", "no-op rebuild", "one-file rebuild"], result.stdout
    assert "ccache on" in result.stdout


def test_new_benchmark_compares_tbgen_new_with_cookiecutter(tmp_path):
    command = [sys.executable, str(BENCH / "new.py"), "--runs", "1", "--template", "cpp-backend"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    medians = re.findall(rf"^ *(cookiecutter|tbgen new): median +{NUMBER} ms", result.stdout, re.MULTILINE)
    assert sorted(medians) == ["cookiecutter", "tbgen new"], result.stdout
    assert re.search(r"ratio: tbgen / cookiecutter = \d+\.\d\d$", result.stdout, re.MULTILINE), result.stdout
