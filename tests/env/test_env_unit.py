"""The decisions of `tbgen env pack` and of the checks before a server runs a packed environment."""

import io
import os
import tarfile
from pathlib import Path

import pytest

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.model_config.execution_env import (
    env_problems,
    model_imports,
    read_packed_env,
    unsatisfied_imports,
    with_env_parameter,
)
from triton_backend_gen.toolchain.pyenv import pack_script, pip_settings

VALUE = "$$TRITON_MODEL_DIRECTORY/python-env.tar.gz"


def packed(tmp_path: Path, pyvenv: str, *members: str) -> Path:
    """A tarball laid out as venv-pack writes one, with ``pyvenv`` as its pyvenv.cfg."""
    path = tmp_path / "env.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (("pyvenv.cfg", pyvenv.encode()), *((m, b"") for m in members)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_parameter_is_added_once_and_replaced_in_place():
    text = 'name: "m"\nbackend: "python"\n'
    added = with_env_parameter(text, VALUE)
    assert added.startswith(text.rstrip("\n")) and f'string_value: "{VALUE}"' in added
    assert with_env_parameter(added, VALUE) == added
    other = added.replace(VALUE, "/opt/envs/old.tar.gz")
    assert with_env_parameter(other, VALUE) == added
    with pytest.raises(ConfigError):
        with_env_parameter(
            text + 'parameters [{ key: "EXECUTION_ENV_PATH", value: { string_value: "x" }}]', VALUE
        )


def test_a_packed_env_is_read_and_judged(tmp_path):
    tarball = packed(
        tmp_path,
        "home = /usr/bin\nversion = 3.11.2\n",
        "lib/python3.11/site-packages/numpy/__init__.py",
        "lib/python3.11/site-packages/inflection.py",
        "lib/python3.11/site-packages/inflection-0.5.1.dist-info/METADATA",
    )
    env = read_packed_env(tarball)
    assert (env.python, env.interpreter) == ("3.11", "/usr/bin/python3.11")
    assert env.modules == {"numpy", "inflection"}
    assert env_problems(env, "3.11", True, "this machine") == []
    [wrong] = env_problems(env, "3.12", True, "image X")
    assert "Python 3.11 environment" in wrong and "runs Python 3.12" in wrong
    [missing] = env_problems(env, "3.11", False, "image X")
    assert "/usr/bin/python3.11 does not exist on image X" in missing
    no_numpy = read_packed_env(packed(tmp_path, "home = /usr/bin\nversion_info = 3.12.3\n"))
    assert no_numpy.python == "3.12" and "numpy is not in it" in env_problems(no_numpy, "3.12", True, "x")[0]


def test_a_conda_pack_tarball_is_read_and_anything_else_refused(tmp_path):
    conda = tmp_path / "conda.tar.gz"
    with tarfile.open(conda, "w:gz") as tar:
        for name in (
            "conda-meta/python-3.10.14-h955ad1f_1.json",
            "lib/python3.10/site-packages/numpy/__init__.py",
        ):
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    env = read_packed_env(conda)
    assert (env.python, env.interpreter, env.modules) == ("3.10", "", {"numpy"})
    assert env_problems(env, "3.10", False, "image X") == []  # self-contained: no base interpreter needed
    path = tmp_path / "env.tar.gz"
    with tarfile.open(path, "w:gz"):
        pass
    with pytest.raises(ConfigError) as err:
        read_packed_env(path)
    assert "not a packed Python environment" in err.value.message


def test_imports_the_environment_does_not_satisfy(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "import json, numpy as np\nfrom inflection import underscore\nimport triton_python_backend_utils "
        "as pb\nfrom . import helpers\nimport tokenizer_utils\nimport requests.adapters\n"
    )
    imports = model_imports(model)
    assert imports == {
        "json",
        "numpy",
        "inflection",
        "triton_python_backend_utils",
        "tokenizer_utils",
        "requests",
    }
    assert unsatisfied_imports(imports, {"numpy", "inflection"}, {"tokenizer_utils"}) == ["requests"]


def test_the_pack_script_adds_numpy_unless_named_and_keeps_tbgen_out(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("inflection==0.5.1\n")
    script = pack_script("python3", requirements, tmp_path / "out.tar.gz", tmp_path / "w", tmp_path / "tools")
    assert "-m venv --without-pip" in script and "'numpy<2'" in script and f"-r {requirements}" in script
    assert f"PYTHONPATH={tmp_path / 'tools'}" in script and "-m venv_pack" in script
    requirements.write_text("numpy==1.26.4\ninflection\n")
    assert "numpy<2" not in pack_script(
        "python3", requirements, tmp_path / "o", tmp_path / "w", tmp_path / "t"
    )


def test_pip_settings_reach_the_container(tmp_path, monkeypatch):
    index = tmp_path / "pypi" / "simple"
    index.mkdir(parents=True)
    for variable in [v for v in os.environ if v.startswith("PIP_")]:
        monkeypatch.delenv(variable)  # pip's environment settings win over its config files: none here
    variables, paths = pip_settings(
        [
            f"global.extra-index-url='file://{index} https://mirror.invalid/simple'",
            f"global.find-links='{tmp_path}'",
            "global.timeout='60'",
            "not a setting",
        ]
    )
    assert variables["PIP_EXTRA_INDEX_URL"].startswith("file://") and variables["PIP_TIMEOUT"] == "60"
    assert paths == [tmp_path / "pypi", tmp_path]  # a local index's files sit beside its simple/ pages
    monkeypatch.setenv("PIP_TIMEOUT", "90")
    assert pip_settings(["global.timeout='60'"])[0]["PIP_TIMEOUT"] == "90"


@pytest.mark.parametrize("template", ["python-backend", "decoupled-backend", "cpp-backend"])
def test_a_packed_environment_is_ignored_by_git_and_kept_in_the_image_context(render_template, template):
    """python-env.tar.gz is a build product: git ignores it (wherever the model is), Docker's build context
    keeps it (the image's models need it)."""
    import subprocess

    from docker.utils.build import exclude_paths

    project = render_template(template)
    packed_env = next(project.glob("model_repository/*/config.pbtxt")).parent / "python-env.tar.gz"
    packed_env.write_bytes(b"")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    ignored = subprocess.run(["git", "-C", str(project), "check-ignore", "-q", str(packed_env)])
    assert ignored.returncode == 0, "git does not ignore the packed environment"
    patterns = [
        line
        for line in (project / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    context = exclude_paths(str(project), patterns)
    assert str(packed_env.relative_to(project)) in context


def test_an_import_of_the_users_compute_py_is_checked_too(render_template):
    """The user's compute.py, beside the generated model.py, imports from the model's environment too."""
    import importlib.util

    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime.execution_envs import import_findings

    root = render_template("python-backend")
    compute = root / "model_repository" / "add_sub" / "1" / "compute.py"
    compute.write_text("import tbgen_no_such_module  # mine\n" + compute.read_text())
    (finding,) = import_findings(load_project(root), lambda name: importlib.util.find_spec(name) is not None)
    assert finding.missing == ["tbgen_no_such_module"]
