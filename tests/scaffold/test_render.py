"""Atomic generation: nothing half-written, nothing of the user's overwritten or deleted."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from triton_backend_gen.errors import ScaffoldError, UsageError
from triton_backend_gen.scaffold import render_new_project
from triton_backend_gen.scaffold.render import render_project
from triton_backend_gen.scaffold.templates import _read_template


def make_template(root: Path, hook: str = "") -> Path:
    """A tiny cookiecutter template with two files (and an optional post-generation hook)."""
    (root / "{{cookiecutter.project_name}}" / "src").mkdir(parents=True)
    (root / "cookiecutter.json").write_text(json.dumps({"project_name": "p", "greeting": "hello"}))
    (root / "{{cookiecutter.project_name}}" / "README.md").write_text("{{ cookiecutter.greeting }}\n")
    (root / "{{cookiecutter.project_name}}" / "src" / "main.txt").write_text("main\n")
    if hook:
        (root / "hooks").mkdir()
        (root / "hooks" / "post_gen_project.py").write_text(hook)
    return root


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tbgen-" in p.name)


def test_renders_into_a_new_directory(tmp_path):
    spec = _read_template(make_template(tmp_path / "tpl"))
    out = render_project(spec, {"project_name": "proj", "greeting": "hi"}, tmp_path / "proj")
    assert (out / "README.md").read_text() == "hi\n"
    assert (out / "src" / "main.txt").is_file()
    assert leftovers(tmp_path) == []


def test_an_empty_existing_directory_is_used(tmp_path):
    spec = _read_template(make_template(tmp_path / "tpl"))
    (tmp_path / "proj").mkdir()
    render_project(spec, {"project_name": "proj", "greeting": "hi"}, tmp_path / "proj")
    assert (tmp_path / "proj" / "README.md").is_file()


def test_a_non_empty_target_is_refused_without_force(tmp_path):
    spec = _read_template(make_template(tmp_path / "tpl"))
    target = tmp_path / "proj"
    target.mkdir()
    (target / "README.md").write_text("mine\n")
    with pytest.raises(UsageError) as err:
        render_project(spec, {"project_name": "proj", "greeting": "hi"}, target)
    assert "--force" in err.value.hint
    assert (target / "README.md").read_text() == "mine\n"
    assert sorted(p.name for p in target.iterdir()) == ["README.md"]
    assert leftovers(tmp_path) == []


def test_force_overwrites_template_files_and_keeps_the_users_own(tmp_path):
    spec = _read_template(make_template(tmp_path / "tpl"))
    target = tmp_path / "proj"
    (target / "src").mkdir(parents=True)
    (target / "README.md").write_text("old\n")
    (target / "notes.txt").write_text("my notes\n")
    (target / "src" / "extra.cc").write_text("// mine\n")
    render_project(spec, {"project_name": "proj", "greeting": "new"}, target, force=True)
    assert (target / "README.md").read_text() == "new\n"
    assert (target / "notes.txt").read_text() == "my notes\n"
    assert (target / "src" / "extra.cc").read_text() == "// mine\n"
    assert (target / "src" / "main.txt").read_text() == "main\n"
    assert leftovers(tmp_path) == []


def test_a_failing_template_leaves_nothing(tmp_path):
    spec = _read_template(make_template(tmp_path / "tpl", hook="import sys\nsys.exit(3)\n"))
    with pytest.raises(ScaffoldError) as err:
        render_project(spec, {"project_name": "proj", "greeting": "hi"}, tmp_path / "proj")
    assert "failed to render" in err.value.message
    assert not (tmp_path / "proj").exists()
    assert leftovers(tmp_path) == []


def test_bad_answers_write_nothing(tmp_path):
    with pytest.raises(UsageError):
        render_new_project("cpp-backend", tmp_path / "proj", {"dims": "0"})
    assert list(tmp_path.iterdir()) == []


def test_sigint_mid_render_leaves_no_partial_project(tmp_path):
    """A real SIGINT while cookiecutter is rendering (its post-generation hook is running)."""
    marker = tmp_path / "hook-started"
    hook = f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(30)\n"
    template_dir = make_template(tmp_path / "tpl", hook=hook)
    out = tmp_path / "out"
    out.mkdir()
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from triton_backend_gen.scaffold.render import render_project
        from triton_backend_gen.scaffold.templates import _read_template
        spec = _read_template(Path({str(template_dir)!r}))
        render_project(spec, {{"project_name": "proj", "greeting": "hi"}}, Path({str(out / "proj")!r}))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the hook never started"
            assert proc.poll() is None, "the render ended before it could be interrupted"
            time.sleep(0.05)
        assert leftovers(out), "rendering should be happening in a staging directory"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
        assert proc.wait(timeout=30) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not (out / "proj").exists()
    assert leftovers(out) == []


def test_sigint_during_the_move_is_delivered_after_it(tmp_path, monkeypatch):
    """The move into place completes even if Ctrl-C arrives during it; the interrupt is raised afterwards."""
    import triton_backend_gen.scaffold.render as render

    spec = _read_template(make_template(tmp_path / "tpl"))
    real_rename = os.rename

    def rename_with_interrupt(src, dst):
        os.kill(os.getpid(), signal.SIGINT)
        real_rename(src, dst)

    monkeypatch.setattr(render.os, "rename", rename_with_interrupt)
    with pytest.raises(KeyboardInterrupt):
        render_project(spec, {"project_name": "proj", "greeting": "hi"}, tmp_path / "proj")
    assert (tmp_path / "proj" / "README.md").read_text() == "hi\n"
    assert (tmp_path / "proj" / "src" / "main.txt").is_file()
    assert leftovers(tmp_path) == []
