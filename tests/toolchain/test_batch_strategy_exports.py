"""`tbgen check`'s judgement of a batching strategy library (toolchain.symbols.check_batch_strategy), on
small libraries compiled here: all five TRITONBACKEND_ModelBatch* functions pass; four of them (Triton would
fail the model's load) and an extra export fail, each named."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from triton_backend_gen.toolchain.symbols import BATCH_STRATEGY_EXPORTS, check_batch_strategy


def compiled(tmp_path: Path, names: list[str]) -> Path:
    """A shared library defining ``names`` as extern "C" functions (their signatures do not matter to nm)."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ here: the library to check cannot be compiled")
    source = tmp_path / "strategy.cc"
    source.write_text("".join(f'extern "C" void* {name}() {{ return nullptr; }}\n' for name in names))
    library = tmp_path / "batchstrategy.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return library


def test_five_functions_pass(tmp_path):
    findings = check_batch_strategy(compiled(tmp_path, list(BATCH_STRATEGY_EXPORTS)), None, "m")
    assert not [f for f in findings if f.failed]
    assert any("exports the five" in f.message for f in findings)


def test_a_missing_function_and_an_extra_export_are_named(tmp_path):
    names = [*BATCH_STRATEGY_EXPORTS[:4], "helper_of_mine"]
    errors = [f.message for f in check_batch_strategy(compiled(tmp_path, names), None, "m") if f.failed]
    missing = "lacks TRITONBACKEND_ModelBatchFinalize"
    assert any(missing in e and "fails the model's load" in e for e in errors), errors
    assert any("exports helper_of_mine too" in e for e in errors)
