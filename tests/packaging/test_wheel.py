"""The wheel ships the templates: built, installed into a fresh venv, and `tbgen new` run from there."""

import subprocess
import sys
import tomllib
import venv

import pytest
from conftest import REPO_ROOT


@pytest.mark.slow
def test_installed_wheel_renders_a_project(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(REPO_ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("triton_backend_gen-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True
    )
    assert install.returncode == 0, install.stderr[-2000:]

    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [str(env_dir / "bin" / "tbgen"), "new", "my-backend", "-t", "python-backend", "--no-input"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    meta = tomllib.loads((work / "my-backend" / "tbgen.toml").read_text())
    assert meta["tbgen"]["template"] == "python-backend"
    # pip compiled the installed templates' .py files; their bytecode must not reach the project
    assert not list((work / "my-backend").rglob("__pycache__"))
    assert list((env_dir / "lib").rglob("templates/*/hooks/__pycache__")), (
        "pip compiled nothing: the check is vacuous"
    )
    # the templates came from the installed wheel, not from this checkout
    where = subprocess.run(
        [
            str(py),
            "-c",
            "from triton_backend_gen.scaffold.templates import templates_dir; print(templates_dir())",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(env_dir)), where
    listed = subprocess.run(
        [str(env_dir / "bin" / "tbgen"), "templates", "list"], capture_output=True, text=True
    )
    assert listed.returncode == 0 and "decoupled-backend" in listed.stdout
