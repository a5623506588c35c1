"""Plain `cookiecutter templates/<name> --no-input` renders exactly what `tbgen new --no-input` renders."""

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATES, template_files

from triton_backend_gen.scaffold import read_record

TEMPLATE_NAMES = sorted(p.name for p in TEMPLATES.iterdir() if (p / "cookiecutter.json").is_file())


def tree(root: Path) -> dict[str, bytes]:
    """The project's files; tbgen's generation record (.tbgen/, which plain cookiecutter does not write)
    aside."""
    return {name: (root / name).read_bytes() for name in sorted(template_files(root))}


def run_cookiecutter(template: str, out: Path, *extra: str) -> Path:
    env = {**os.environ, "HOME": str(out)}  # keep cookiecutter's replay files out of the real home
    subprocess.run(
        [
            sys.executable,
            "-m",
            "cookiecutter",
            str(TEMPLATES / template),
            "--no-input",
            "-o",
            str(out),
            *extra,
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    return out / "my-backend"


def run_tbgen_new(template: str, out: Path, *extra: str) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_backend_gen",
            "new",
            str(out / "my-backend"),
            "-t",
            template,
            "--no-input",
            *extra,
        ],
        check=True,
        capture_output=True,
        # cookiecutter.json's defaults are the newest release's: compare with tbgen's own default, not the
        # $TBGEN_TRITON_VERSION tests/conftest.py sets for offline builds
        env={k: v for k, v in os.environ.items() if k != "TBGEN_TRITON_VERSION"},
    )
    return out / "my-backend"


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_defaults_render_identically(template, tmp_path):
    plain = run_cookiecutter(template, tmp_path / "plain")
    ours = run_tbgen_new(template, tmp_path / "tbgen")
    assert tree(plain) == tree(ours)
    # and the trees are not trivially equal: both hold a whole project
    assert {"tbgen.toml", "README.md", "reference.py", "Dockerfile"} <= set(tree(ours))
    assert filecmp.cmp(plain / "tbgen.toml", ours / "tbgen.toml", shallow=False)
    # the record holds exactly what was rendered
    assert {path: file.data for path, file in read_record(ours).files.items()} == tree(plain)


@pytest.mark.parametrize(
    ("template", "answers"),
    [
        ("cpp-backend", {"dtype": "INT64", "max_batch_size": "0", "dims": "2,3"}),
        ("python-backend", {"dtype": "FP16", "batching": "vectorized"}),
        ("decoupled-backend", {"language": "python"}),
    ],
)
def test_same_answers_render_identically(template, answers, tmp_path):
    plain = run_cookiecutter(template, tmp_path / "plain", *(f"{k}={v}" for k, v in answers.items()))
    ours = run_tbgen_new(template, tmp_path / "tbgen", *(f"--set={k}={v}" for k, v in answers.items()))
    assert tree(plain) == tree(ours)


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_a_signature_renders_identically(template, tmp_path):
    """The signature is a cookiecutter dict variable: a user config's default_context gives plain cookiecutter
    what --input/--output give tbgen."""
    tensors = {
        "inputs": [
            {"name": "TEXT", "datatype": "BYTES", "dims": [-1]},
            {"name": "LANG", "datatype": "BYTES", "dims": [1], "optional": True},
        ],
        "outputs": [{"name": "LENGTH", "datatype": "INT32", "dims": [1]}],
        "config": "",
    }
    user_config = tmp_path / "cookiecutter.yaml"
    user_config.write_text(
        json.dumps({"default_context": {"signature": tensors, "model_name": "my-backend"}})
    )
    plain = run_cookiecutter(template, tmp_path / "plain", "--config-file", str(user_config))
    ours = run_tbgen_new(
        template,
        tmp_path / "tbgen",
        "--input",
        "TEXT:BYTES:-1",
        "--input",
        "LANG:BYTES:1:optional",
        "--output",
        "LENGTH:INT32:1",
    )
    assert tree(plain) == tree(ours)
    assert 'name: "LANG"' in (ours / "model_repository" / "my-backend" / "config.pbtxt").read_text()
