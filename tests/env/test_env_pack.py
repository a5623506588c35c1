"""`tbgen env pack` for real: a python-backend model importing a PyPI package the server's Python lacks
(inflection, pure Python) fails to load without its environment, with the fix named; packed, it passes `tbgen
test` on the embedded server, and packed inside the image it passes `tbgen test --docker` and `tbgen package
--test`. An environment that does not fit the server is refused before the server starts. What it packs
unpacks as the python backend of 26.06 and later unpacks it (libarchive's secure extraction)."""

import contextlib
import importlib.util
import io
import logging
import tarfile
from pathlib import Path

import libarchive
import pytest
from conftest import new_project, replace_once, run_tbgen
from libarchive import extract

from triton_backend_gen import versions
from triton_backend_gen.commands.doctor import check_model_imports
from triton_backend_gen.model_config import Expectations, check_config
from triton_backend_gen.project import load_project

pytestmark = pytest.mark.slow

PACKAGE = "inflection"


@pytest.fixture
def project(tmp_path) -> Path:
    if importlib.util.find_spec(PACKAGE) is not None:
        pytest.skip(
            f"{PACKAGE} is installed in tbgen's Python, so the server's stub would find it without an env"
        )
    if importlib.util.find_spec("venv_pack") is None:
        pytest.skip("venv-pack is not installed (pip install 'triton-backend-gen[deploy]')")
    project = new_project(tmp_path, "python-backend")
    model = project / "model_repository" / "add_sub"
    replace_once(
        model / "1" / "compute.py", "import numpy as np\n", f"import {PACKAGE}\nimport numpy as np\n"
    )
    replace_once(
        model / "1" / "compute.py",
        "    return {OUTPUT0: in0 + in1,",
        f"    assert {PACKAGE}.underscore('AddSub') == 'add_sub'\n    return {{OUTPUT0: in0 + in1,",
    )
    (model / "requirements.txt").write_text(f"{PACKAGE}==0.5.1\n")
    return project


def config_of(project: Path) -> str:
    return (project / "model_repository" / "add_sub" / "config.pbtxt").read_text()


def unpack_as_python_backend(tarball: Path, into: Path, caplog) -> None:
    """Unpack ``tarball`` into ``into`` with libarchive, as python_backend r26.06's ExtractTarFile does (its
    four write options, data and all); every member is there afterwards, as the tarball has it, and
    libarchive neither failed nor warned (the backend fails the load on either)."""
    flags = (
        extract.EXTRACT_TIME
        | extract.EXTRACT_SECURE_NODOTDOT
        | extract.EXTRACT_SECURE_NOABSOLUTEPATHS
        | extract.EXTRACT_SECURE_SYMLINKS
    )
    into.mkdir()
    with caplog.at_level(logging.WARNING, logger="libarchive"), contextlib.chdir(into):
        libarchive.extract_file(str(tarball), flags)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
    for member in members:
        unpacked = into / member.name
        assert unpacked.is_symlink() if member.issym() else unpacked.exists(), member.name
        if member.isfile():
            assert unpacked.stat().st_size == member.size, member.name
    assert (into / "pyvenv.cfg").read_text().startswith("home")


def test_without_its_env_the_model_fails_naming_env_pack_and_with_it_passes(project, tmp_path, caplog):
    failed = run_tbgen("test", cwd=project)
    assert failed.returncode == 1
    assert f"No module named '{PACKAGE}'" in failed.stderr and "tbgen env pack" in failed.stderr
    [row] = check_model_imports(load_project(project))
    assert row.status == "warn" and PACKAGE in row.found and "requirements.txt" in row.fix

    packed = run_tbgen("env", "pack", cwd=project)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    assert "Python 3." in packed.stdout and "Wrote EXECUTION_ENV_PATH" in packed.stdout
    assert '"$$TRITON_MODEL_DIRECTORY/python-env.tar.gz"' in config_of(project)
    model = project / "model_repository" / "add_sub"
    unpack_as_python_backend(model / "python-env.tar.gz", tmp_path / "unpacked", caplog)
    assert not list(model.glob(".tbgen-env*"))  # nothing half-written left beside it
    secure_release = Expectations(release=versions.resolve(versions.FEATURES["secure_env_extraction"].since))
    assert check_config(model / "config.pbtxt", secure_release) == []
    [row] = check_model_imports(load_project(project))
    assert row.status == "ok"

    tested = run_tbgen("test", cwd=project)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Using Python execution env" in (project / "build" / "tbgen" / "server.log").read_text()

    again = run_tbgen("env", "pack", cwd=project)  # the parameter is there: config.pbtxt is left alone
    assert again.returncode == 0 and "Wrote EXECUTION_ENV_PATH" not in again.stdout


def test_an_environment_of_another_python_is_refused_before_the_server_starts(project):
    assert run_tbgen("env", "pack", cwd=project).returncode == 0
    tarball = project / "model_repository" / "add_sub" / "python-env.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:  # what a Python 3.8 machine would have packed
        data = b"home = /usr/bin\nversion = 3.8.10\n"
        info = tarfile.TarInfo("pyvenv.cfg")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    log = project / "build" / "tbgen" / "server.log"
    log.unlink(missing_ok=True)
    refused = run_tbgen("test", cwd=project)
    assert refused.returncode == 1
    assert "Python 3.8 environment" in refused.stderr and "tbgen env pack --model add_sub" in refused.stderr
    assert not log.exists()  # no server was started


def with_pyvenv_cfg(tarball: Path, text: str) -> None:
    """Rewrite ``tarball`` with its pyvenv.cfg replaced by ``text`` (everything else as it was)."""
    original = tarball.with_suffix(".orig")
    tarball.rename(original)
    with tarfile.open(original) as source, tarfile.open(tarball, "w:gz") as target:
        for member in source:
            if member.name == "pyvenv.cfg":
                member.size = len(text.encode())
                target.addfile(member, io.BytesIO(text.encode()))
            else:
                target.addfile(member, source.extractfile(member) if member.isfile() else None)
    original.unlink()


def test_packed_in_the_image_it_passes_in_a_container_and_in_the_packaged_image(
    project, standin_image, docker_client
):
    # An environment of the image's Python whose base interpreter is nowhere in the image: refused
    local = run_tbgen("env", "pack", cwd=project)
    assert local.returncode == 0, local.stderr
    probe = ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    python = docker_client.containers.run(standin_image, probe, remove=True).decode().strip()
    tarball = project / "model_repository" / "add_sub" / "python-env.tar.gz"
    with_pyvenv_cfg(tarball, f"home = /opt/tbgen-no-python/bin\nversion = {python}.1\n")
    refused = run_tbgen("test", "--docker", "--image", standin_image, cwd=project)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (
        f"base interpreter /opt/tbgen-no-python/bin/python{python} does not exist on image" in refused.stderr
    )
    assert f"tbgen env pack --docker --image {standin_image}" in refused.stderr

    packed = run_tbgen("env", "pack", "--docker", "--image", standin_image, cwd=project)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    assert f"for {standin_image}" in packed.stdout
    tested = run_tbgen("test", "--docker", "--image", standin_image, cwd=project)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    shipped = run_tbgen("package", "--base-image", standin_image, "--test", cwd=project)
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
