"""`tbgen tune` on a generated C++ model in the embedded server: against the model's own configuration
measured in the same run, under the same p99 budget, its recommendation is at least as good (or it says to
keep the current one); Ctrl-C stops a search cleanly and keeps what it measured, --resume continues it, the
printed apply command runs as printed and changes config.pbtxt alone (the old one kept), and `tbgen test`
passes after it; a finished search re-decides without a server (exit 1, saying what came closest, when
nothing meets a new budget). On a python model: --apply from a search's measurements, then `tbgen test`; a
search edited by hand is refused. (A python model's whole search is bench/tune.py's synthetic one, in
tests/bench.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import new_project, read_config, run_tbgen, snapshot, triton_sources_or_skip


def results(project: Path) -> list[dict]:
    path = project / "build" / "tbgen" / "tune" / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_at_least_the_start(entries: list[dict]) -> dict:
    """The recommended line, checked against the start configuration's best within the budget."""
    [chosen] = [e for e in entries if e["role"] == "recommended"]
    start = [e for e in entries if e["role"] == "start" and e["meets"]]
    assert chosen["meets"] and start, entries
    if chosen["config"]:  # a change: better than every start point within the budget, by the run's figures
        assert chosen["throughput"] >= max(e["throughput"] for e in start), entries
    return chosen


def assert_only_config_changed(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    """Of the model repository, only config.pbtxt changed, and the old one is beside it."""
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    assert changed == {"add_sub/config.pbtxt", "add_sub/config.pbtxt.before-tune"}, changed
    assert after["add_sub/config.pbtxt.before-tune"] == before["add_sub/config.pbtxt"]


def servers_serving(project: Path) -> list[int]:
    """tritonserver processes whose command line names ``project``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name.isdigit() and "tritonserver" in command and str(project) in command:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_cpp_model_interrupted_resumed_applied_and_tested(tmp_path, server_or_skip):
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, "cpp-backend", name="tuned")
    assert run_tbgen("build", cwd=project).returncode == 0
    # instances and batching at 1, 4 and 16 clients (the whole space's search is bench/tune.py's cpp one)
    budget = ("--budget", "3m", "--max-latency-p99", "5", "--dimensions", "instances,batching")
    budget += ("--concurrency", "1,4,16")
    process = subprocess.Popen(
        [sys.executable, "-m", "triton_backend_gen", "tune", str(project), *budget],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
    )
    results_file = project / "build" / "tbgen" / "tune" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if results_file.is_file() and len(results_file.read_text().splitlines()) >= 2:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    measured = results(project)
    assert len(measured) >= 2 and all(e["role"] == "start" for e in measured[:2]), output
    assert not servers_serving(project), "the server outlived tbgen tune"

    resumed = run_tbgen("tune", str(project), "--resume", *budget)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    entries = results(project)
    assert entries[: len(measured)] == measured  # what was measured before Ctrl-C is kept and used
    chosen = assert_at_least_the_start(entries)
    report = project / "build" / "tbgen" / "tune"
    for name in ("report.html", "front.png", "concurrency.png", "dimensions.png"):
        assert (report / name).stat().st_size > 1000
    assert (report / "report.html").read_text().count("data:image/png;base64,") == 3

    # A finished search decides again without a server: nothing meets 1 microsecond: exit 1, the closest.
    started = time.monotonic()
    impossible = run_tbgen("tune", str(project), "--resume", "--max-latency-p99", "0.001")
    assert impossible.returncode == 1, impossible.stdout + impossible.stderr
    assert re.search(r"No configuration measured met the constraints .* The closest: ", impossible.stdout)
    assert time.monotonic() - started < 30

    before = snapshot(project / "model_repository")
    if chosen["config"]:
        [apply_line] = [line for line in resumed.stdout.splitlines() if line.startswith("Apply it: ")]
        applied = subprocess.run(
            apply_line.removeprefix("Apply it: ")
            .strip("`")
            .replace("tbgen", f"{sys.executable} -m triton_backend_gen", 1),
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert applied.returncode == 0, applied.stdout + applied.stderr
        after = snapshot(project / "model_repository")
        assert_only_config_changed(before, after)
        assert "# Tuned by `tbgen tune`: " in after["add_sub/config.pbtxt"].decode()
    tested = run_tbgen("test", str(project))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--objective", "speed"), "neither throughput nor latency"),
        (("--dimensions", "threads"), "no such dimension"),
        (("--budget", "0s"), "is not a duration"),
        (("--resume",), "no earlier search to resume"),
        (("--concurrency", "0"), "not a list of positive integers"),
    ],
)
def test_usage_errors_exit_2_before_any_server(tmp_path, args, message):
    project = new_project(tmp_path, "python-backend", name="bad")
    run = run_tbgen("tune", str(project), *args, timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stdout + run.stderr
    assert not (project / "build" / "tbgen" / "server.log").exists()


def write_search(project: Path, lines: list[object], search: object | None = None) -> None:
    """A search on disk, as `tbgen tune` leaves it (or as a hand may have edited it)."""
    directory = project / "build" / "tbgen" / "tune"
    directory.mkdir(parents=True, exist_ok=True)
    start = {"instances": 1, "max_batch_size": 8, "batching": "0us"}
    default = {"model": "add_sub", "start": start, "grid": False, "finished": True}
    (directory / "search.json").write_text(json.dumps(default if search is None else search))
    (directory / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def measurement(instances: int, throughput: float, p99_ms: float) -> dict:
    settings = {"instances": instances, "max_batch_size": 8, "batching": "0us"}
    return {
        "config": {"instances": instances} if instances != 1 else {},
        "settings": settings,
        "label": "",
        "concurrency": 8,
        "throughput": throughput,
        "p50_us": p99_ms * 500,
        "p99_us": p99_ms * 1000,
        "batch": 2.0,
        "exec_us": 100.0,
        "queue_us": 10.0,
        "elapsed_s": 1.0,
        "meets": True,
        "role": "start" if instances == 1 else "point",
    }


@pytest.mark.slow
def test_apply_from_a_finished_search_changes_config_pbtxt_alone_and_the_model_still_passes(
    tmp_path, server_or_skip
):
    project = new_project(tmp_path, "python-backend", name="applied")
    write_search(project, [measurement(1, 1000.0, 4.0), measurement(2, 1500.0, 5.0)])
    before = snapshot(project / "model_repository")
    run = run_tbgen("tune", str(project), "--resume", "--apply", "--max-latency-p99", "20", timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1.50x the current configuration's 1,000 inf/s" in run.stdout
    after = snapshot(project / "model_repository")
    assert_only_config_changed(before, after)
    assert read_config(project).instance_group[0].count == 2
    assert not (project / "build" / "tbgen" / "server.log").exists()  # decided without a server
    tested = run_tbgen("test", str(project))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize(
    ("lines", "search", "message"),
    [
        ([1], None, "is not a search that --resume can continue"),
        ([{"settings": {}}], None, "is not a search that --resume can continue"),
        ([measurement(1, 0.0, 4.0)], None, "is not a search that --resume can continue"),
        ([], ["not", "an", "object"], "is not a search that --resume can continue"),
        ([], {"model": "other", "start": {}}, "tuned model 'other'"),
    ],
)
def test_a_search_edited_by_hand_is_refused_with_exit_2(tmp_path, lines, search, message):
    project = new_project(tmp_path, "python-backend", name="edited")
    write_search(project, lines, search)
    run = run_tbgen("tune", str(project), "--resume", timeout=60)
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stdout + run.stderr and "Traceback" not in run.stderr
