"""The backend directory assembled for a run of the embedded server."""

from __future__ import annotations

import filecmp
import os
import sys
from pathlib import Path

import pytest
import runtime_support
from runtime_support import render

from triton_backend_gen.discovery import STUB_NAME
from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import assemble_backend_dir

embedded_install = runtime_support.embedded_install  # the fixture

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_python_project(embedded_install, tmp_path):
    project = load_project(render("python-backend", tmp_path / "py"))
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", project)

    python_dir = layout.backend_dir / "python"
    assert not python_dir.is_symlink()
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        assert filecmp.cmp(python_dir / name, embedded_install.backends_dir / "python" / name, shallow=False)
    assert filecmp.cmp(python_dir / STUB_NAME, embedded_install.python_stubs[HERE], shallow=False)
    assert os.access(python_dir / STUB_NAME, os.X_OK)
    assert layout.python_version == HERE and layout.warnings == ()

    lib = layout.library_path[0] / "libtritonserver.so"
    assert lib.resolve() == embedded_install.libtritonserver.resolve()
    assert layout.library_path[1:] == embedded_install.library_dirs
    assert layout.path_prefix == (Path(sys.executable).parent,)
    # the stock python backend serves this project: nothing of its own is linked in
    assert sorted(p.name for p in layout.backend_dir.iterdir()) == sorted(
        p.name for p in embedded_install.backends_dir.iterdir() if p.is_dir()
    )


def test_environment_puts_the_layout_first(embedded_install, tmp_path):
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", None)
    env = layout.environment({"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/somewhere"})
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).parent), "/usr/bin"]
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [*map(str, layout.library_path), "/somewhere"]


def test_python_based_backend_is_linked_under_its_name(embedded_install, tmp_path):
    project = load_project(render("python-backend", tmp_path / "pbb", python_based_backend=True))
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", project)
    linked = layout.backend_dir / project.backend
    assert linked.is_symlink() and linked.resolve() == (project.root / "backends" / project.backend).resolve()
    assert (linked / "model.py").is_file()


def test_unbuilt_cpp_backend_names_the_missing_library_and_the_fix(embedded_install, tmp_path):
    project = load_project(render("cpp-backend", tmp_path / "cpp"))
    with pytest.raises(ServerError) as raised:
        assemble_backend_dir(embedded_install, tmp_path / "run", project)
    expected = (
        project.root / "build" / "install" / "backends" / project.backend / f"libtriton_{project.backend}.so"
    )
    assert str(expected) in raised.value.message
    assert "tbgen build" in raised.value.hint


def test_built_cpp_backend_is_linked(embedded_install, tmp_path):
    project = load_project(render("cpp-backend", tmp_path / "cpp"))
    installed = project.root / "build" / "install" / "backends" / project.backend
    installed.mkdir(parents=True)
    (installed / f"libtriton_{project.backend}.so").write_bytes(b"")  # assembling only links it
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", project)
    assert (layout.backend_dir / project.backend).resolve() == installed.resolve()


def test_assembling_again_replaces_the_previous_tree(embedded_install, tmp_path):
    first = load_project(render("python-backend", tmp_path / "a", python_based_backend=True))
    assemble_backend_dir(embedded_install, tmp_path / "run", first)
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", None)
    assert not (layout.backend_dir / first.backend).exists()
    assert (layout.backend_dir / "python" / STUB_NAME).is_file()


def test_a_python_without_a_matching_stub_is_a_warning(embedded_install, tmp_path):
    fake_python = tmp_path / "bin" / "python"
    fake_python.parent.mkdir()
    fake_python.write_text("#!/bin/sh\necho 3.99\n")
    fake_python.chmod(0o755)
    layout = assemble_backend_dir(embedded_install, tmp_path / "run", None, python=fake_python)
    assert layout.python_version is None
    assert len(layout.warnings) == 1 and "3.99" in layout.warnings[0]
    assert layout.path_prefix == (fake_python.parent,)
