"""A smoke run of bench/dev.py (one edit each): its table has the three rows, each with its figures and its
goal's verdict. The figures of this run mean nothing; what is checked is that every part runs to its end."""

from __future__ import annotations

import re

import pytest
from conftest import run_bench_script, triton_sources_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.cpp, pytest.mark.xdist_group("bench-dev")]

SECONDS = r"\d+\.\d\d s"


def test_dev_benchmark_times_each_loop_against_build_and_test(tmp_path, compiler_cache, server_or_skip):
    triton_sources_or_skip("r24.10")
    out = run_bench_script("dev", "--runs", "1", "--work-dir", str(tmp_path))
    verdict = r"(met|MISSED)"
    assert re.search(
        rf"^python model, save to verdict +{SECONDS} +{SECONDS} +\d+\.\dx .*: {verdict}$", out, re.M
    ), out
    assert re.search(
        rf"^C\+\+ one-file change, save to verdict +{SECONDS} +{SECONDS} +\d+\.\dx +<= incremental build "
        rf"\({SECONDS}\) \+ 1\.0 s: {verdict} \(\+-?{SECONDS}\)$",
        out,
        re.M,
    ), out
    assert re.search(rf"^tbgen test --unit, python model +{SECONDS} +< 0\.5 s: {verdict}$", out, re.M), out
