"""`tbgen test --url` against servers someone else started (`tbgen serve` in explicit and none model control
mode), `tbgen serve --model-control-mode`, and `tbgen test --unit` / the unit tests before the smoke suite:
real tbgen processes and the real embedded tritonserver, python-backend projects only (nothing compiled).

The servers are module-scoped (one `tbgen serve` each): the project in explicit mode, and a copy of it whose
config.pbtxt says another max_batch_size, in explicit and in none mode."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import new_project
from conftest import run_tbgen as tbgen
from typer.testing import CliRunner

from triton_backend_gen.cli import app
from triton_backend_gen.errors import ServerError
from triton_backend_gen.runtime.model_control import load_model, repository_index

pytestmark = pytest.mark.xdist_group("test_url")

DIFFERENCE = "max_batch_size: 8 in config.pbtxt, 4 as served"


@pytest.fixture(scope="module")
def embedded_server():
    from triton_backend_gen.discovery import find_tritonserver

    try:
        return find_tritonserver()
    except ServerError as err:
        pytest.skip(f"no tritonserver to test against: {err.message} ({err.hint})")


@contextmanager
def tbgen_serve(target: Path, *args: str) -> Iterator[str]:
    """A `tbgen serve` of ``target`` until the block ends (SIGTERM, as a terminal's Ctrl-C): the --url that
    its printed `tbgen test ... --url` line gives."""
    errors = target.parent / f"serve-{target.name}.err"
    with open(errors, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "triton_backend_gen", "serve", str(target), *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "COLUMNS": "250"},
        )
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while not any("Serving" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines) + errors.read_text()
            lines.append(proc.stdout.readline())
        printed = re.search(r"`tbgen test .*--url (\S+)`", "".join(lines))
        assert printed, "".join(lines)
        yield printed.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("url")


@pytest.fixture(scope="module")
def project(workspace, embedded_server) -> Path:
    return new_project(workspace, "python-backend")


def copy_with_batch_size_4(project: Path, copy: Path) -> Path:
    """A copy of ``project`` whose add_sub batches up to 4 (the project's config.pbtxt says 8)."""
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("build"))
    config = copy / "model_repository" / "add_sub" / "config.pbtxt"
    text = config.read_text()
    assert "max_batch_size: 8" in text
    config.write_text(text.replace("max_batch_size: 8", "max_batch_size: 4"))
    return copy


@pytest.fixture(scope="module")
def explicit_url(project) -> Iterator[str]:
    with tbgen_serve(project) as url:  # a project's default: explicit
        yield url


@pytest.fixture(scope="module")
def differing_urls(workspace, project) -> Iterator[dict[str, str]]:
    """The --url of a copy of the project with another max_batch_size served in explicit mode, and of another
    such copy in none mode (a copy each: a project's server keeps its log and backends in the project)."""
    explicit, none = (copy_with_batch_size_4(project, workspace / name) for name in ("explicit", "none"))
    with tbgen_serve(explicit, "--model-control-mode", "explicit") as explicit_url:
        with tbgen_serve(none, "--model-control-mode", "none") as none_url:
            yield {"explicit": explicit_url, "none": none_url}


@pytest.fixture(scope="module")
def other_model(workspace, embedded_server) -> Path:
    """A project whose model ("other") the servers above do not have."""
    return new_project(workspace, "python-backend", "model_name=other", name="other")


def http_of(url: str) -> str:
    return url.split(",")[0]


def assert_ran(result: subprocess.CompletedProcess, code: int) -> None:
    assert result.returncode == code, result.stdout[-4000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_test_url_passes_against_tbgen_serve_of_the_project(project, explicit_url):
    result = tbgen("test", str(project), "--url", explicit_url, "--fuzz", "20")
    assert_ran(result, 0)
    http = http_of(explicit_url)
    assert f"0 failed  (the server at {http})" in result.stdout
    assert f"loaded add_sub on the server at {http} through its repository API" in result.stdout
    assert "fuzz: 20 malformed requests" in result.stdout and "server memory not measured" in result.stdout
    # nothing was stopped: the server still serves the model
    with urllib.request.urlopen(f"http://{http}/v2/models/add_sub/ready", timeout=5) as response:
        assert response.status == 200


@pytest.mark.slow
def test_explicit_mode_lets_the_repository_api_reload_a_model(project, explicit_url):
    http = http_of(explicit_url)
    load_model(http, "add_sub")  # raises ServerError with the server's reason otherwise
    assert [(m["name"], m["state"]) for m in repository_index(http)] == [("add_sub", "READY")]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["explicit", "none"])
def test_a_served_config_that_differs_fails_naming_the_difference(project, differing_urls, mode):
    result = tbgen("test", str(project), "--url", differing_urls[mode])
    assert_ran(result, 1)
    assert re.search(rf"FAIL\s+config \[http\].*\n.*{re.escape(DIFFERENCE)}", result.stdout), result.stdout
    assert ("does not take model control requests" in result.stdout) == (mode == "none")


@pytest.mark.slow
def test_none_mode_refuses_model_control_with_the_option_in_the_hint(differing_urls):
    with pytest.raises(ServerError) as refused:
        load_model(http_of(differing_urls["none"]), "add_sub")
    assert "not allowed" in refused.value.message
    assert "--model-control-mode explicit" in refused.value.hint


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("none", "does not serve every model of the project ready: other (not in its index)"),
        ("explicit", "could not load model 'other'"),
    ],
)
def test_a_model_the_server_lacks_is_named(other_model, differing_urls, mode, said):
    result = tbgen("test", str(other_model), "--url", differing_urls[mode])
    assert_ran(result, 1)
    assert said in result.stderr and "`tbgen serve`" in result.stderr


@pytest.mark.slow
def test_unit_tests_run_first_and_join_the_junit_xml(other_model, tmp_path):
    junit = tmp_path / "junit.xml"
    unit = tbgen("test", str(other_model), "--unit")
    assert_ran(unit, 0)
    assert re.search(r"pass\s+unit: other: ", unit.stdout) and "no server started" in unit.stdout
    assert not (other_model / "build" / "tbgen" / "server.log").exists()
    result = tbgen("test", str(other_model), "--junit-xml", str(junit))
    assert_ran(result, 0)
    names = [case.get("name") for case in ET.parse(junit).getroot().iter("testcase")]
    assert names[0].startswith("unit: other: ") and "config [http]" in names


@pytest.mark.slow
def test_a_failing_unit_test_stops_tbgen_test_before_a_server(workspace, project, tmp_path):
    broken = workspace / "broken"
    shutil.copytree(project, broken, ignore=shutil.ignore_patterns("build"))
    compute = broken / "model_repository" / "add_sub" / "1" / "compute.py"
    text = compute.read_text()
    assert "in0 - in1}" in text
    compute.write_text(text.replace("in0 - in1}", "in0 - in1 + 1}"))
    junit = tmp_path / "junit.xml"
    for args in (["--unit"], ["--junit-xml", str(junit)]):
        result = tbgen("test", str(broken), *args)
        assert_ran(result, 1)
        assert re.search(r"FAIL\s+unit: add_sub: .*\n.*OUTPUT1", result.stdout), result.stdout
        assert "0 passed, 1 failed  (unit tests only: no server started)" in result.stdout
    assert "starting tritonserver" not in result.stdout
    assert not (broken / "build" / "tbgen" / "server.log").exists()
    [failure] = ET.parse(junit).getroot().iter("failure")
    assert "OUTPUT1" in failure.get("message")
    skipped = tbgen("test", str(broken), "--no-unit", "--quiet")
    assert_ran(skipped, 1)  # the smoke suite ran, and found the wrong outputs
    assert "unit:" not in skipped.stdout and "server log:" in skipped.stdout


def test_nothing_answering_at_the_url_is_a_failure(tmp_path):
    project = new_project(tmp_path, "python-backend")
    result = tbgen("test", str(project), "--url", "127.0.0.1:9")
    assert_ran(result, 1)
    assert "No Triton server answers at 127.0.0.1:9" in result.stderr
    assert not (project / "build").exists()  # nothing built, nothing started


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--url", "h:1", "--docker"], "--docker"),
        (["--url", "h:1", "--docker", "--image", "x", "--packaged"], "--docker, --image, --packaged"),
        (["--url", "h:1", "--sanitize", "address"], "--sanitize"),
        (["--url", "h:1", "--instance-kind", "cpu"], "--instance-kind"),
        (["--url", "h:1", "--server", "/bin/true"], "--server"),
        (["--url", "h:1", "--unit"], "--unit"),
        (["--url", "nowhere"], "HOST:PORT"),
        (["--unit", "--fuzz", "3"], "--fuzz"),
        (["--unit", "--docker"], "--docker"),
    ],
)
def test_options_that_cannot_combine_are_usage_errors(tmp_path, monkeypatch, args, named):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["test", *args])
    assert result.exit_code == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert named in said and "Traceback" not in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--model-control-mode", "sometimes"], "explicit, poll or none"),
        (["--model", "add_sub", "--model-control-mode", "none"], "Drop --model-control-mode"),
    ],
)
def test_serve_refuses_a_bad_model_control_mode(project, args, named):
    result = CliRunner().invoke(app, ["serve", str(project), *args])
    assert result.exit_code == 2, result.stdout + result.stderr
    assert named in result.stderr
