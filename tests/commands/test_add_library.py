"""`tbgen add library`: the file it writes into a real rendered project, what it refuses (exit 2, nothing
written), and that it never overwrites a file."""

from __future__ import annotations

import pytest
from conftest import new_project, run_tbgen

from triton_backend_gen.commands.add_library import add_library
from triton_backend_gen.errors import UsageError
from triton_backend_gen.project import load_project


@pytest.fixture(scope="module")
def cpp_project(tmp_path_factory):
    return new_project(tmp_path_factory.mktemp("add-library"), "cpp-backend")


def test_the_command_writes_the_file_and_names_the_next_step(cpp_project):
    result = run_tbgen("add", "library", "fmt", str(cpp_project), "--pkg-config", "fmt")
    assert result.returncode == 0, result.stderr
    written = cpp_project / "cmake" / "libraries" / "fmt.cmake"
    assert f"Wrote {written}" in result.stdout
    assert f"Next: `tbgen build {cpp_project}`" in result.stdout
    assert "pkg_check_modules(FMT REQUIRED IMPORTED_TARGET fmt)" in written.read_text()

    # Never over an existing file (an edited one above all): exit 2, naming it and the fix; the file is kept.
    written.write_text("# edited by hand\n")
    again = run_tbgen("add", "library", "fmt", str(cpp_project), "--find-package", "fmt")
    assert again.returncode == 2
    assert f"{written} exists already; tbgen never overwrites it." in again.stderr
    assert "delete it and run this again" in again.stderr
    assert written.read_text() == "# edited by hand\n"


def test_usage_errors_exit_2_and_write_nothing(cpp_project):
    for args, message in [
        (["mine"], "Say where mine comes from"),
        (["mine", "--pkg-config", "a", "--find-package", "b"], "are two sources for mine"),
        (["9x", "--pkg-config", "a"], "cannot name a library file"),
        (["mine", "--path", str(cpp_project / "nowhere")], "has no include/ or lib/"),
    ]:
        result = run_tbgen("add", "library", *args[:1], str(cpp_project), *args[1:])
        assert result.returncode == 2, args
        assert message in result.stderr and "hint:" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not (cpp_project / "cmake" / "libraries" / "mine.cmake").exists()


def test_a_python_project_is_refused(tmp_path):
    project = new_project(tmp_path, "python-backend")
    with pytest.raises(UsageError, match="python project: it has no C\\+\\+ backend"):
        add_library(load_project(project), "fmt", pkg_config="fmt")
    assert not (project / "cmake").exists()


def test_a_prefix_is_read_for_its_header_and_library(cpp_project, tmp_path):
    prefix = tmp_path / "opt-tiny"
    (prefix / "include" / "tiny").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "lib" / "libtiny.so.1").write_bytes(b"")
    added = add_library(load_project(cpp_project), "tiny", path=prefix)
    text = added.file.read_text()
    assert f'set(TINY_ROOT "{prefix}" CACHE PATH' in text
    assert "find_path(TINY_INCLUDE_DIR NAMES tiny" in text and "find_library(TINY_LIBRARY NAMES tiny" in text
