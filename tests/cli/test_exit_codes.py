"""Exit codes mean one thing: 0 success, 1 the checked thing failed, 2 the command could not be used as given.

Every command and subcommand is run with a usage error (outside a project, a bad value, an unreadable input
file, an unknown flag) in an empty directory: each exits 2 with an error message, no traceback, and writes
nothing. The table of cases must cover every command the CLI has, so a new command brings its case.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
import typer.main
from conftest import snapshot
from typer.testing import CliRunner

from triton_backend_gen.cli import app

# A usage error of each command, run in an empty directory that is no project.
CASES: dict[str, list[list[str]]] = {
    "new": [
        ["p", "--template", "no-such-template", "--no-input"],
        ["p", "--no-input", "--from-config", "bad.pbtxt"],
        ["p", "--no-input", "--input", "X:FP32:4"],
    ],
    "versions": [["--json"]],
    "validate": [[], ["no-such-path"]],
    "serve": [[], ["--image", "x"]],
    "test": [[], ["--fuzz", "-1"], ["--chaos", "--url", "127.0.0.1:8000"]],
    "dev": [[], ["--instance-kind", "tpu"]],
    "infer": [["m"], ["m", "--input", "X"]],
    "doctor": [["--triton-version", "99.99"]],
    "build": [[], ["--build-type", "Fast"]],
    "check": [[], ["--drift"]],
    "bench": [[], ["--duration", "soon"]],
    "tune": [[], ["--budget", "soon"]],
    "package": [[]],
    "update": [[], ["--triton-version", "99.99"]],
    "clean": [[]],
    "templates list": [["extra"]],
    "templates check": [["--template", "no-such-template"], ["--triton-version", "99.99"]],
    "deps fetch": [["--triton-version", "99.99"]],
    "deps add": [["--from", "no-such-dir"]],
    "deps list": [["extra"]],
    "add model": [["m"]],
    "add batcher": [["m", "--strategy", "volume"], ["m"]],
    "add library": [["jsoncpp", "--pkg-config", "jsoncpp"]],
    "remove model": [["m"]],
    "env pack": [[]],
    "deploy helm": [[]],
    "deploy manifests": [[]],
    "deploy check": [[]],
    "deploy local": [[]],
}


def command_paths() -> list[str]:
    """Every leaf command of the CLI, as its words ("deploy helm")."""
    paths = []

    def walk(node, prefix: str) -> None:
        for name, sub in node.commands.items():
            if hasattr(sub, "commands"):
                walk(sub, f"{prefix}{name} ")
            else:
                paths.append(f"{prefix}{name}")

    walk(typer.main.get_command(app), "")
    return sorted(paths)


def test_every_command_has_its_usage_errors():
    assert sorted(CASES) == command_paths()


@pytest.mark.parametrize("path", command_paths())
def test_a_usage_error_exits_2_with_a_message_and_writes_nothing(path, tmp_path, monkeypatch):
    (tmp_path / "bad.pbtxt").write_text('name: "m"\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path / "cache"))  # deps must not touch the real cache
    before = snapshot(tmp_path)
    runner = CliRunner()
    for args in [*CASES[path], ["--no-such-option"]]:
        result = runner.invoke(app, [*path.split(), *args])
        said = result.stdout + result.stderr
        assert result.exit_code == 2, f"tbgen {path} {' '.join(args)}: exit {result.exit_code}\n{said}"
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert "Traceback" not in said
        assert "error" in said.lower() or "usage" in said.lower(), said
        assert snapshot(tmp_path) == before and not (tmp_path / "cache").exists(), f"tbgen {path} wrote files"
    assert os.getcwd() == str(tmp_path)


def test_outside_a_project_each_project_command_says_so_with_its_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["test"])
    assert result.exit_code == 2
    assert "not inside a tbgen project" in result.stderr and "`tbgen new`" in result.stderr


def test_serve_outside_a_project_refuses_a_directory_without_models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes").mkdir()
    result = CliRunner().invoke(app, ["serve", str(tmp_path)])
    assert result.exit_code == 2 and "neither a tbgen project" in result.stderr
    assert Path(tmp_path / "notes").is_dir() and not any((tmp_path / "notes").iterdir())
