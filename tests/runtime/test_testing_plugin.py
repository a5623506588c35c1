"""tbgen's pytest plugin: `pytest` inside generated projects runs their tests against a real server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import runtime_support
from runtime_support import render

from triton_backend_gen.project import BackendKind, load_project
from triton_backend_gen.runtime import start_server

embedded_install = runtime_support.embedded_install  # the fixture


def test_tbgen_project_renders_a_template(tbgen_project):
    root = tbgen_project("decoupled-backend", project_name="echo-it", language="python")
    project = load_project(root)
    assert (project.name, project.template, project.kind) == (
        "echo-it",
        "decoupled-backend",
        BackendKind.PYTHON,
    )
    assert (root / "tests" / "conftest.py").is_file()


def run_project_tests(root: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def assert_all_passed(result: subprocess.CompletedProcess) -> None:
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("template", "answers"),
    [
        ("python-backend", {}),
        ("python-backend", {"python_based_backend": True}),
        ("decoupled-backend", {"language": "python"}),
    ],
    ids=["python-backend", "python-based-backend", "decoupled-python"],
)
def test_generated_project_tests_pass_against_the_server_the_plugin_starts(
    embedded_install, tmp_path, template, answers
):
    root = render(template, tmp_path / "proj", **answers)
    result = run_project_tests(root)
    assert_all_passed(result)
    log = root / "build" / "tbgen" / "server.log"
    assert log.is_file() and str(root / "model_repository") in log.read_text()


@pytest.mark.slow
def test_generated_project_tests_use_the_server_given_by_url(embedded_install, tmp_path):
    root = render("python-backend", tmp_path / "proj")
    repository = tmp_path / "repository"
    shutil.copytree(root / "model_repository", repository)
    with start_server(repository) as server:
        result = run_project_tests(root, TRITON_HTTP_URL=server.http_url, TRITON_GRPC_URL=server.grpc_url)
    assert_all_passed(result)
    assert not (root / "build").exists(), "the plugin started a server of its own"


def test_without_a_project_or_url_the_fixture_skips_saying_why(tmp_path):
    (tmp_path / "test_needs_server.py").write_text(
        "def test_it(triton_server):\n    raise AssertionError('must not run')\n"
    )
    result = run_project_tests(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "no tbgen project (tbgen.toml)" in result.stdout and "TRITON_HTTP_URL" in result.stdout
