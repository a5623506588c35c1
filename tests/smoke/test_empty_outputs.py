"""An output with no elements (a tokenizer's ``[batch, 0]`` for empty strings) keeps its datatype everywhere
tbgen reads outputs: the smoke suite, the fuzzer and `tbgen infer` (over HTTP, where tritonclient returns an
empty output as float64) and the generated project's own tests."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from conftest import run_tbgen

# One worker for the module: its module-scoped projects serve every test (see tests/conftest.py).
pytestmark = pytest.mark.xdist_group("empty-outputs")

# Each row of a request: the lengths of its words, padded with zeros to the longest row of the request (the
# rows of a batched -1 output share one width within a request); a request whose strings are all empty
# answers TOKENS [batch, 0].
TOKENIZER = """

def compute(inputs):
    rows = [[len(word) for word in b" ".join(row).split()] for row in inputs["TEXT"]]
    width = max((len(row) for row in rows), default=0)
    tokens = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
    return {"TOKENS": tokens, "LENGTH": np.array([[len(row)] for row in rows], dtype=np.int32)}
"""


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A python-backend tokenizer project whose compute.py and reference.py compute the same (appended
    definitions replace the placeholder's), for the newest release (so the embedded 24.10 server has a
    note)."""
    root = tmp_path_factory.mktemp("tokenizer")
    result = run_tbgen(
        "new",
        str(root / "txt"),
        "-t",
        "python-backend",
        "--no-input",  # the newest release
        "--input",
        "TEXT:BYTES:1",
        "--output",
        "TOKENS:INT64:-1",
        "--output",
        "LENGTH:INT32:1",
    )
    assert result.returncode == 0, result.stderr
    project = root / "txt"
    for file in (project / "reference.py", project / "model_repository" / "txt" / "1" / "compute.py"):
        file.write_text(file.read_text() + TOKENIZER)
    return project


@pytest.mark.slow
def test_a_tokenizer_answering_empty_rows_passes_test_and_the_fuzzer(tokenizer, server_or_skip):
    """Off a terminal: a line per check with its detail beneath, no line over 200 columns, the release note
    (the project targets another release than the embedded server's) once, its command whole on one line."""
    result = run_tbgen("test", str(tokenizer), "--fuzz", "200", env={"COLUMNS": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dtype float64" not in result.stdout
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 200, max(lines, key=len)
    assert any(line.startswith("pass  fuzz: 200 malformed requests") for line in lines), result.stdout
    note = [line for line in lines if "`tbgen update --triton-version 24.10 --project" in line]
    assert len(note) == 1 and note[0].count("`") == 2, result.stdout  # said once, the command whole
    assert lines[-1].startswith("23 passed, 0 failed")  # 22 checks and the unit tests
    again = run_tbgen("test", str(tokenizer), "--quiet", env={"COLUMNS": ""})
    assert again.returncode == 0 and again.stdout.splitlines() == [again.stdout.splitlines()[-1]], (
        again.stdout
    )
    assert "passed, 0 failed" in again.stdout  # --quiet: the summary line only; the note was said before


@pytest.mark.slow
def test_on_a_terminal_test_shows_the_check_that_runs(tokenizer, server_or_skip):
    pexpect = pytest.importorskip("pexpect", reason="pexpect drives a real terminal for this test")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "triton_backend_gen", "test", str(tokenizer), "--verbose"],
        env={**os.environ, "COLUMNS": "160", "LINES": "50"},
        encoding="utf-8",
        timeout=120,
    )
    child.logfile_read = shown = io.StringIO()
    child.expect(r"check \d+: \S.*\[(http|grpc|-)\]")  # the live line: which check runs, with its time
    child.expect("smoke tests against")  # then the table
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "tbgen update --triton-version 24.10" in shown.getvalue()  # --verbose says the note again


@pytest.fixture(scope="module")
def served(tokenizer):
    """The tokenizer in a running server, shared by the tests that only send requests."""
    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import start_server

    with start_server(load_project(tokenizer)) as triton:
        yield triton


@pytest.mark.slow
def test_infer_prints_an_empty_output_in_its_datatype(served, server_or_skip):
    result = run_tbgen("infer", "txt", "--url", served.http_url, "--input", 'TEXT=[[""], [""]]')
    assert result.returncode == 0, result.stderr
    assert "TOKENS int64 [2, 0]" in result.stdout, result.stdout
    assert "LENGTH int32 [2, 1]" in result.stdout, result.stdout


@pytest.mark.slow
def test_the_projects_own_tests_read_empty_outputs_in_their_datatype(tokenizer, served, server_or_skip):
    """The generated tests send reference.make_inputs (about a quarter of the strings empty); a request of
    only empty strings goes over HTTP too."""
    test = tokenizer / "tests" / "test_empty.py"
    test.write_text(
        "import numpy as np\n"
        "import tritonclient.http\n"
        "from test_txt import assert_matches_reference, infer\n\n\n"
        "def test_empty_strings_over_http(triton_server, reference):\n"
        "    inputs = {'TEXT': np.array([[b''], [b'']], dtype=np.object_)}\n"
        "    client = triton_server.http_client()\n"
        "    assert_matches_reference(reference, inputs, infer(tritonclient.http, client, reference, "
        "inputs))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tokenizer / "tests")],
        cwd=tokenizer,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_HTTP_URL": served.http_url, "TRITON_GRPC_URL": served.grpc_url},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    counts = json.dumps(done.stdout.splitlines()[-1])
    assert "passed" in counts and "skipped" not in counts, counts
