"""perf.report draws `tbgen tune`'s and `tbgen bench --report`'s reports: PNGs that decode, and one HTML page
that holds everything it shows (no network) and that a real browser (headless Chromium) renders with every
image loaded; the edge cases (nothing meets the constraints, one point, no budget, one dimension) draw too."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import suppress
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from triton_backend_gen.cli import running
from triton_backend_gen.cli.app import app
from triton_backend_gen.errors import UsageError
from triton_backend_gen.perf.report import (
    ReportError,
    _best_labels,
    _dimensions,
    check_report_dir,
    write_bench_report,
    write_tune_report,
)
from triton_backend_gen.perf.soak_report import write_soak_report
from triton_backend_gen.perf.stats import BenchReport, Level
from triton_backend_gen.smoke.soak import ModelLoad, Sample, SoakOptions, SoakRun
from triton_backend_gen.tune import search
from triton_backend_gen.tune.results import point_of, record
from triton_backend_gen.tune.search import Constraints, Point
from triton_backend_gen.tune.space import OFF, Batching, Settings

TUNE_FILES = ["report.html", "front.png", "concurrency.png", "dimensions.png"]
BUDGET_US = 20_000.0
# Appended by the test (never by the product) to a copy of a report: once the page has loaded, it counts the
# images the browser decoded, for --dump-dom to show.
IMAGE_CHECK = """
<script>
window.addEventListener("load", () => {
  const images = Array.from(document.images);
  const loaded = images.filter((image) => image.complete && image.naturalWidth > 0).length;
  const check = document.createElement("div");
  check.id = "check";
  check.textContent = `${loaded}/${images.length}`;
  document.body.appendChild(check);
});
</script>
"""
browser = pytest.mark.xdist_group("chromium")  # one Chromium at a time, each with its own profile and home

# ---- Synthetic measurements: 3 configurations x 4 concurrencies --------------------------------------------

START = Settings(1, 8, OFF)
CONFIGURATIONS = [  # each with the throughput it saturates at
    (START, 900.0),
    (Settings(2, 8, OFF), 1700.0),
    (Settings(2, 16, Batching(True, 500)), 3200.0),
]


def tune_records(max_p99_us: float | None = BUDGET_US) -> list[dict]:
    """Measurements in the order measured, as tune writes them (tune.results.record): throughput saturating
    with concurrency, latency = queue depth / throughput (Little's law), p99 half as much again as p50."""
    constraints = Constraints(max_p99_us=max_p99_us, min_throughput=200.0)
    records = []
    for settings, ceiling in CONFIGURATIONS:
        for concurrency in (1, 4, 16, 64):
            throughput = ceiling * concurrency / (concurrency + 6)
            p50 = concurrency / throughput * 1e6
            elapsed = 7.5 * (len(records) + 1)
            point = Point(settings, concurrency, throughput, p50, p50 * 1.5, 1.0, 100.0, 10.0, elapsed)
            records.append(record(point, START, constraints))
    return records


def pareto_front(records: list[dict]) -> list[dict]:
    """The records on tune's Pareto front."""
    front = {p.key for p in search.pareto_front([point_of(r) for r in records])}
    return [r for r in records if point_of(r).key in front]


def recommend(records: list[dict]) -> dict | None:
    """The best record within the constraints, as tune's recommended line (a copy, role "recommended")."""
    within = [r for r in records if r["meets"]]
    return {**max(within, key=lambda r: r["throughput"]), "role": "recommended"} if within else None


def write_tune(out_dir: Path, records: list[dict], **overrides) -> list[Path]:
    arguments = {
        "model": "add_sub",
        "objective": "throughput",
        "max_p99_us": BUDGET_US,
        "min_throughput": 200.0,
        "front": overrides["front"] if "front" in overrides else pareto_front(records),
        "recommended": overrides["recommended"] if "recommended" in overrides else recommend(records),
        "notes": ["perf_analyzer measured each point for 5 s"],
        **overrides,
    }
    return write_tune_report(out_dir, records, **arguments)


def bench_report() -> BenchReport:
    levels = [
        Level(
            concurrency=c,
            requests=1000 * c,
            seconds=10.0,
            throughput=900 * c / (c + 3),
            p50_us=200.0 * c,
            p90_us=300.0 * c,
            p99_us=450.0 * c,
            server_queue_us=20.0 * c,
            server_compute_us=150.0,
            client_cpu=0.3,
            server_cpu=1.2,
        )
        for c in (1, 8, 32)
    ]
    return BenchReport("add_sub", "grpc", "perf_analyzer", 1, "tritonserver 2.50 (local)", levels)


# ---- What the files hold ----------------------------------------------------------------------------------


def assert_png(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.load()
        assert image.format == "PNG"
        assert image.width > 300 and image.height > 200, image.size
        return image.size


def assert_self_contained(page: str, images: int) -> None:
    assert re.search(r"""(src|href)\s*=\s*['"]?(https?:|//|file:)""", page) is None
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()
    assert len(re.findall(r"<img src='data:image/png;base64,[A-Za-z0-9+/=]+'", page)) == images


@pytest.fixture(scope="module")
def tune_report(tmp_path_factory) -> list[Path]:
    return write_tune(tmp_path_factory.mktemp("tune") / "report", tune_records(), model="add_sub <b>&")


def test_the_tune_report_is_a_self_contained_page_with_three_plots(tune_report):
    assert [path.name for path in tune_report] == TUNE_FILES
    assert sorted(p.name for p in tune_report[0].parent.iterdir()) == sorted(TUNE_FILES)  # no temporary left
    for png in tune_report[1:]:
        assert_png(png)
    page = tune_report[0].read_text()
    assert_self_contained(page, images=3)
    assert "<h1>Tuning add_sub &lt;b&gt;&amp;</h1>" in page  # user text escaped
    assert "2 inst, batch 16, dyn 500us" in page and "No configuration met" not in page
    assert page.count("<tr") == 1 + len(pareto_front(tune_records())) + 1 + len(tune_records())


def test_nothing_meeting_the_constraints_still_draws_every_point(tmp_path):
    records = tune_records(max_p99_us=1.0)
    assert not any(r["meets"] for r in records)
    paths = write_tune(tmp_path, records, max_p99_us=1.0, recommended=None)
    for png in paths[1:]:
        assert_png(png)
    page = paths[0].read_text()
    assert "No configuration met the constraints" in page
    assert_self_contained(page, images=3)


def test_a_single_record_without_constraints(tmp_path):
    record = tune_records(max_p99_us=None)[0]
    paths = write_tune(
        tmp_path, [record], max_p99_us=None, min_throughput=None, front=[record], recommended=record, notes=[]
    )
    assert [p.name for p in paths] == TUNE_FILES
    for png in paths[1:]:
        assert_png(png)
    page = paths[0].read_text()
    assert "Constraints: none." in page and "Notes" not in page
    assert_self_contained(page, images=3)


def test_one_dimension_and_no_measurement_at_all(tmp_path):
    records = tune_records()
    front, recommended = pareto_front(records), recommend(records)
    for entry in records:
        entry["settings"] = {"instances": entry["settings"]["instances"]}
    paths = write_tune(tmp_path / "one", records, front=front, recommended=recommended)
    width, _ = assert_png(paths[3])
    assert width < assert_png(write_tune(tmp_path / "three", tune_records())[3])[0]  # one panel, not three
    empty = write_tune(tmp_path / "empty", [], front=[], recommended=None)
    assert_self_contained(empty[0].read_text(), images=3)


def test_which_configurations_and_dimensions_are_drawn():
    records = tune_records()
    recommended = recommend(records)
    # the recommended first, then the start, then the best of the others
    assert _best_labels(records, recommended, 5) == [
        "2 inst, batch 16, dyn 500us",
        "1 inst, batch 8, no dyn",
        "2 inst, batch 8, no dyn",
    ]
    assert _best_labels(records, None, 1) == ["1 inst, batch 8, no dyn"]
    # integers sorted, strings in the order first measured, single-valued keys left out
    shuffled = [dict(r, settings={**r["settings"], "kind": "cpu"}) for r in reversed(records)]
    assert _dimensions(shuffled) == {
        "instances": [1, 2],
        "max_batch_size": [8, 16],
        "batching": ["500us", "off"],
    }


def test_the_bench_report_has_one_plot_and_a_row_per_level(tmp_path):
    paths = write_bench_report(tmp_path / "bench", bench_report())
    assert [p.name for p in paths] == ["bench-report.html", "bench.png"]
    assert_png(paths[1])
    page = paths[0].read_text()
    assert_self_contained(page, images=1)
    assert "tritonserver 2.50 (local)" in page and page.count("<tr") == 1 + 3
    assert "failed" not in page and "responses/s" not in page
    streaming = bench_report()
    streaming.levels[-1].errors = 1
    for level in streaming.levels:
        level.responses_per_s = 4 * level.throughput  # a decoupled model: 4 responses per request
    paths = write_bench_report(tmp_path / "streaming", streaming)
    assert_png(paths[1])
    page = paths[0].read_text()
    assert "1 request failed" in page and "responses/s" in page


def test_a_report_where_a_file_is_is_an_error(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("")
    with pytest.raises(UsageError, match="is a file"):
        check_report_dir(taken)
    with pytest.raises(ReportError, match="Could not write the report"):
        write_bench_report(taken / "below", bench_report())
    check_report_dir(tmp_path / "new")  # missing: created when written


def test_bench_report_option_writes_the_report_after_the_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(running, "load_project", lambda path: path)
    monkeypatch.setattr(running, "run_bench", lambda *args, **kwargs: calls.append(kwargs) or bench_report())
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["bench", str(tmp_path), "--report", str(out), "--duration", "1s"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"Report: {out / 'bench-report.html'}" in " ".join(result.stdout.split())
    assert_self_contained((out / "bench-report.html").read_text(), images=1)
    taken = tmp_path / "taken"
    taken.write_text("")
    result = CliRunner().invoke(app, ["bench", str(tmp_path), "--report", str(taken)])
    assert result.exit_code == 2 and "is a file" in result.stderr and len(calls) == 1  # said before the run


# ---- In a real browser ------------------------------------------------------------------------------------


def chromium(work: Path, *args: str) -> str:
    """Run headless Chromium with ``args`` in a home and profile of its own under ``work``; its stdout. No
    Chromium process outlives the call."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("chromium is not installed: apt-get install chromium")
    home = work / "chromium-home"  # crash reports and caches land here, not in the user's home
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config")}
    env["XDG_CACHE_HOME"] = str(home / "cache")
    command = [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    command += ["--disable-extensions", f"--user-data-dir={home / 'profile'}", "--virtual-time-budget=5000"]
    process = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        stop_chromium(process.pid, str(home))
        process.communicate()
        pytest.fail("chromium did not finish within 60 s")
    stop_chromium(process.pid, str(home))
    assert process.returncode == 0, err[-3000:]
    return out


def stop_chromium(group: int, marker: str) -> None:
    """Kill what is left of the Chromium started in process group ``group`` (its crash handlers start
    sessions of their own: they are found by ``marker``, the home they were given), and check none is left."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (left := processes_mentioning(marker)) and time.monotonic() < deadline:
        for pid in left:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    assert not processes_mentioning(marker), "a chromium process outlived the test"


def processes_mentioning(marker: str) -> list[int]:
    """Processes still running (not zombies, whose command line is empty) whose command line holds
    ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def loaded_images(page: Path, work: Path) -> str:
    """ "loaded/all" images of ``page`` as Chromium shows it, from a copy with IMAGE_CHECK appended."""
    copy = work / f"check-{page.name}"
    copy.write_text(page.read_text() + IMAGE_CHECK)
    dom = chromium(work, "--dump-dom", copy.as_uri())
    found = re.search(r'<div id="check">([^<]*)</div>', dom)
    assert found, dom[-2000:]
    return found.group(1)


def assert_not_blank(screenshot: Path) -> None:
    with Image.open(screenshot) as image:
        pixels = image.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 20) or []
        inked = sum(count for count, rgb in colours if min(rgb) < 235)
        assert len(colours) > 200, f"{len(colours)} colours"
        assert inked / (pixels.width * pixels.height) > 0.03, f"{inked} pixels drawn"


@browser
def test_chromium_shows_the_tune_report_with_its_three_images(tune_report, tmp_path):
    assert loaded_images(tune_report[0], tmp_path) == "3/3"
    screenshot = tmp_path / "tune.png"
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1200,2400", tune_report[0].as_uri())
    assert_not_blank(screenshot)


@browser
def test_chromium_shows_the_bench_report_with_its_image(tmp_path):
    page = write_bench_report(tmp_path / "bench", bench_report())[0]
    assert loaded_images(page, tmp_path) == "1/1"
    screenshot = tmp_path / "bench.png"
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1200,1200", page.as_uri())
    assert_not_blank(screenshot)


# ---- The soak's report ------------------------------------------------------------------------------------


def soak_run() -> SoakRun:
    """A 60 s soak: the server flat, one stub growing 2 KiB a request, the stub's model's latency flat."""
    run = SoakRun(SoakOptions(60.0), seconds=60.0)
    run.models = {"grows <b>": ModelLoad("grows <b>", 60.0), "add_sub": ModelLoad("add_sub", 60.0)}
    for second in range(61):
        requests = second * 200
        run.samples.append(
            Sample(
                float(second),
                2 * requests,
                {"grows <b>": requests, "add_sub": requests},
                {"tritonserver": 8 << 20, "python stub grows <b> grows_0_0": (20 << 20) + 2048 * requests},
            )
        )
        for name in run.models:
            for i in range(200):
                run.models[name].record(second + i / 200, requests + i, 2000.0 + i)
    run.process_models["python stub grows <b> grows_0_0"] = "grows <b>"
    return run


def test_the_soak_report_draws_memory_and_latency_and_keeps_the_samples(tmp_path):
    files = write_soak_report(tmp_path / "soak", soak_run())
    assert [path.name for path in files] == ["report.html", "memory.png", "latency.png", "samples.json"]
    assert_png(files[1]) and assert_png(files[2])
    page = files[0].read_text()
    assert_self_contained(page, images=2)
    assert "grows &lt;b&gt; grows_0_0</td><td>LEAK</td><td class=n>+2000.00</td>" in page  # escaped, judged
    assert "<td>tritonserver</td><td>ok</td>" in page
    assert len(json.loads(files[3].read_text())) == 61


@browser
def test_chromium_shows_the_soak_report_with_its_two_images(tmp_path):
    page = write_soak_report(tmp_path / "soak", soak_run())[0]
    assert loaded_images(page, tmp_path) == "2/2"
    screenshot = tmp_path / "soak.png"
    chromium(tmp_path, f"--screenshot={screenshot}", "--window-size=1200,2000", page.as_uri())
    assert_not_blank(screenshot)
