"""`tbgen doctor`: each check against the real toolchain, and against a PATH that lacks it."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from triton_backend_gen import versions
from triton_backend_gen.cli import app
from triton_backend_gen.commands import doctor
from triton_backend_gen.project import load_project
from triton_backend_gen.toolchain import build, cmake

OLD = versions.resolve("24.10")  # asks CMake >= 3.18
NEW = versions.resolve("25.10")  # asks CMake >= 3.31.8


def fake_tool(directory: Path, name: str, output: str) -> Path:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\necho '{output}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


@pytest.fixture
def empty_path(tmp_path, monkeypatch) -> Path:
    """A PATH with nothing on it, no tools beside the interpreter, no CUDA install and an empty source
    cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-venv" / "python"))
    for variable in ("CXX", "CUDA_HOME", "CUDA_PATH", "CMAKE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(build, "CUDA_ROOTS", ())
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")  # no engine answers there
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path / "cache"))
    return bin_dir


def by_name(diagnoses: list[doctor.Diagnosis]) -> dict[str, doctor.Diagnosis]:
    return {d.name: d for d in diagnoses}


def test_missing_tools_fail_or_warn_with_their_fix(empty_path):
    found = by_name(doctor.diagnose(triton_version=OLD.container))
    assert found["cmake"].status == doctor.FAIL and found["cmake"].fix == "pip install 'cmake>=3.18'"
    assert found["C++17 compiler"].status == doctor.FAIL and "g++" in found["C++17 compiler"].fix
    assert found["ninja"].status == doctor.WARN and found["ninja"].fix == "pip install ninja"
    assert found["git"].status == doctor.WARN and "tbgen update" in found["git"].found
    assert found["nvcc (for --gpu)"].status == doctor.WARN and "CUDA toolkit" in found["nvcc (for --gpu)"].fix
    sources = found["Triton sources r24.10"]
    assert sources.status == doctor.WARN and sources.fix == "`tbgen deps fetch --triton-version 24.10`"
    assert found["docker"].status == doctor.WARN and "docker.io" in found["docker"].fix
    failed = {d.name for d in found.values() if d.failed}
    assert {"cmake", "C++17 compiler"} <= failed
    assert failed <= {"cmake", "C++17 compiler"} | {name for name in found if name.startswith("tritonserver")}


def test_cmake_is_checked_against_the_release_minimum(empty_path):
    fake_tool(empty_path, "cmake", "cmake version 3.25.1")
    old_enough = doctor.check_cmake(OLD)
    assert old_enough.status == doctor.OK and "3.25.1" in old_enough.found
    too_old = doctor.check_cmake(NEW)
    assert too_old.status == doctor.FAIL and too_old.failed
    assert ">= 3.31.8" in too_old.found and too_old.fix == "pip install 'cmake>=3.31.8'"


def test_a_compiler_without_cxx17_fails(empty_path, monkeypatch):
    tool = empty_path / "old-cxx"
    tool.write_text("#!/bin/sh\necho 'error: unrecognized option -std=c++17' >&2\nexit 1\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CXX", "old-cxx")
    result = doctor.check_compiler()
    assert result.status == doctor.FAIL and "-std=c++17" in result.found


def test_nvcc_version_gives_the_architectures(empty_path):
    fake_tool(empty_path, "nvcc", "Cuda compilation tools, release 12.8, V12.8.93")
    result = doctor.check_nvcc()
    assert result.status == doctor.OK and result.found.startswith("12.8 at ")
    assert ";".join(versions.cuda_architectures_for("12.8.93")) in result.found
    fake_tool(empty_path, "nvcc", "Cuda compilation tools, release 11.8, V11.8.89")
    assert doctor.check_nvcc().status == doctor.WARN  # older than any release tbgen builds CUDA for


def test_no_server_fails_with_the_fix(empty_path, tmp_path):
    # An explicit server that is not one fails the check; the embedded wheel (if installed) is still listed.
    rows = doctor.check_servers(tmp_path / "not-a-server", OLD)
    explicit = rows[0]
    assert explicit.name == "tritonserver (--server)" and explicit.status == doctor.FAIL and explicit.failed


def test_a_server_of_another_release_warns():
    from triton_backend_gen.discovery import find_tritonserver
    from triton_backend_gen.errors import ServerError

    try:
        server = find_tritonserver()
    except ServerError as err:
        pytest.skip(f"no tritonserver here: {err.message}")
    other = next(r for r in versions.RELEASES if r != server.release)
    first = doctor.check_servers(None, other)[0]
    assert first.status == doctor.WARN and other.image in first.fix and not first.failed
    same = doctor.check_servers(None, server.release)[0] if server.release else None
    assert same is None or same.status == doctor.OK


def test_real_toolchain_is_ok(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no project here
    found = by_name(doctor.diagnose(triton_version=OLD.container))
    if shutil.which(cmake.cmake_executable()) is None:
        pytest.skip("no cmake on this machine")
    assert found["cmake"].status == doctor.OK
    assert found["C++17 compiler"].status == doctor.OK
    assert (found["ninja"].status == doctor.OK) == (cmake.tool_on_path("ninja") is not None)
    assert (found["rapidjson"].status == doctor.OK) == any(
        (prefix / doctor.RAPIDJSON_HEADER).is_file() for prefix in doctor.RAPIDJSON_PREFIXES
    )
    nvcc = shutil.which("nvcc")
    if nvcc:
        release = re.search(
            r"V(\d+\.\d+\.\d+)",
            subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout,
        ).group(1)
        assert found["nvcc (for --gpu)"].status == doctor.OK
        assert ";".join(versions.cuda_architectures_for(release)) in found["nvcc (for --gpu)"].found


def test_doctor_command_exits_1_without_cmake(empty_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["doctor", "--triton-version", "25.10"], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    assert "pip install 'cmake>=3.31.8'" in result.output
    assert "tbgen deps fetch --triton-version 25.10" in result.output
    assert "Missing what tbgen requires" in result.output and "cmake" in result.output


def test_doctor_takes_the_release_of_the_project_in_the_current_directory(tmp_path, monkeypatch):
    from triton_backend_gen.scaffold import render_new_project

    project = render_new_project("python-backend", tmp_path / "proj", {"triton_version": "24.10"})
    monkeypatch.chdir(project)
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path / "cache"))
    found = by_name(doctor.diagnose(project=load_project(project)))
    assert "Triton sources r24.10" in found
    assert found["project"].status == doctor.OK and "python-backend" in found["project"].found
    result = CliRunner().invoke(app, ["doctor"], env={"COLUMNS": "250"})  # the CLI reads the project here
    assert "Triton sources r24.10" in result.output and "python-backend" in result.output
