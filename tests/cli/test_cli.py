"""The command line as users run it: a real `tbgen` process, its output and exit codes."""

import subprocess
import sys
import tomllib

import pytest

from triton_backend_gen import __version__, versions

HEAVY = ("cookiecutter", "docker", "tritonclient", "google.protobuf", "grpc", "numpy")


def tbgen(*args, cwd=None, input=None):
    return subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=input,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys\n"
        "from triton_backend_gen.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["new"],
        ["templates"],
        ["templates", "list"],
        ["templates", "check"],
        ["versions"],
        ["validate"],
        ["package"],
        ["clean"],
    ],
)
def test_every_command_has_help(command):
    result = tbgen(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout


def test_version():
    result = tbgen("--version")
    assert result.returncode == 0 and __version__ in result.stdout


def test_new_with_flags_as_in_the_issue(tmp_path):
    oldest = versions.resolve("24.10")
    result = tbgen(
        "new",
        "my-backend",
        "--template",
        "cpp-backend",
        "--no-input",
        "--set",
        "dtype=FP16",
        "--gpu",
        "--triton-version",
        "r24.10",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    meta = tomllib.loads((tmp_path / "my-backend" / "tbgen.toml").read_text())
    assert meta["project"]["backend"] == "my_backend"
    assert meta["project"]["triton_version"] == oldest.container
    assert meta["project"]["gpu"] is True
    assert meta["answers"]["dtype"] == "FP16"
    assert (tmp_path / "my-backend" / "src" / "kernels.cu").is_file()


def test_new_defaults_to_the_newest_release(tmp_path):
    result = tbgen("new", "p", "-t", "python-backend", "--no-input", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    meta = tomllib.loads((tmp_path / "p" / "tbgen.toml").read_text())
    assert meta["project"]["triton_version"] == versions.newest().container


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--set", "dims=0"], "dims must be"),
        (["--set", "max_batch_size=-3"], "max_batch_size must be 0 or more"),
        (["--triton-version", "19.01"], "Known releases"),
        (["--backend-name", "python"], "already used by a Triton backend"),
        (["--set", "nonsense"], "key=value"),
        (["--set", "colour=red"], "has no option 'colour'"),
        (["-t", "rust-backend"], "Unknown template"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, args, fragment):
    result = tbgen("new", "proj", "--no-input", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_invalid_project_name_exits_2(tmp_path):
    result = tbgen("new", "9lives", "--no-input", cwd=tmp_path)
    assert result.returncode == 2
    assert "starting with a letter" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_existing_project_needs_force(tmp_path):
    assert tbgen("new", "p", "-t", "python-backend", "--no-input", cwd=tmp_path).returncode == 0
    (tmp_path / "p" / "mine.txt").write_text("keep\n")
    again = tbgen("new", "p", "-t", "python-backend", "--no-input", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    # --force replaces what tbgen generated and nobody edited: here, a README for another release
    forced = tbgen(
        "new", "p", "-t", "python-backend", "--no-input", "--force", "--triton-version", "24.10", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr
    assert "24.10" in (tmp_path / "p" / "README.md").read_text()
    assert (tmp_path / "p" / "mine.txt").read_text() == "keep\n"


def test_force_never_reverts_an_edited_file_of_a_tbgen_project(tmp_path):
    assert (
        tbgen(
            "new", "p", "-t", "python-backend", "--no-input", "--triton-version", "24.10", cwd=tmp_path
        ).returncode
        == 0
    )
    model = tmp_path / "p" / "model_repository" / "add_sub" / "1" / "model.py"
    model.write_text(model.read_text() + "# my edit\n")
    before = {p: p.read_bytes() for p in (tmp_path / "p").rglob("*") if p.is_file()}
    forced = tbgen(
        "new",
        "p",
        "--answers",
        "p/tbgen.toml",
        "--triton-version",
        "26.02",
        "--no-input",
        "--force",
        cwd=tmp_path,
    )
    assert forced.returncode == 2
    assert "model_repository/add_sub/1/model.py" in forced.stderr and "tbgen update" in forced.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "p").rglob("*") if p.is_file()} == before


def test_answers_file_reproduces_a_project(tmp_path):
    first = tbgen(
        "new", "a", "-t", "cpp-backend", "--no-input", "--set", "dtype=INT32", "--set", "dims=4", cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    second = tbgen("new", "b", "--answers", "a/tbgen.toml", "--no-input", "--backend-name", "a", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    a = tomllib.loads((tmp_path / "a" / "tbgen.toml").read_text())
    b = tomllib.loads((tmp_path / "b" / "tbgen.toml").read_text())
    assert b["tbgen"]["template"] == "cpp-backend"
    assert {k: v for k, v in b["answers"].items() if k != "project_name"} == {
        k: v for k, v in a["answers"].items() if k != "project_name"
    }


def test_gpu_flag_outside_cpp_backend_is_a_usage_error(tmp_path):
    result = tbgen("new", "p", "-t", "python-backend", "--no-input", "--gpu", cwd=tmp_path)
    assert result.returncode == 2
    assert "gpu" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_templates_list_shows_options_and_defaults():
    result = tbgen("templates", "list")
    assert result.returncode == 0
    for expected in (
        "cpp-backend",
        "python-backend",
        "decoupled-backend",
        "dtype",
        "FP16",
        "batching",
        "language",
    ):
        assert expected in result.stdout


def test_versions_lists_every_release():
    result = tbgen("versions")
    assert result.returncode == 0
    for release in versions.RELEASES:
        assert release.container in result.stdout and release.server_version in result.stdout


def test_validate_a_rendered_project_and_a_broken_config(tmp_path):
    assert tbgen("new", "p", "-t", "cpp-backend", "--no-input", cwd=tmp_path).returncode == 0
    clean = tbgen("validate", "p", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout
    config = next((tmp_path / "p" / "model_repository").glob("*/config.pbtxt"))
    config.write_text(config.read_text() + "\nmax_batch_size: oops\n")
    broken = tbgen("validate", "p", cwd=tmp_path)
    assert broken.returncode == 1
    assert f"{config.name}:" in broken.stdout and "error" in broken.stdout


def test_validate_missing_path_is_a_usage_error(tmp_path):
    result = tbgen("validate", "nowhere", cwd=tmp_path)
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_interactive_new_on_a_terminal(tmp_path):
    """`tbgen new` prompts on a TTY; a bad answer is refused and asked again."""
    pexpect = pytest.importorskip("pexpect", reason="pexpect drives a real terminal for this test")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "triton_backend_gen", "new", "p", "-t", "python-backend"],
        cwd=str(tmp_path),
        encoding="utf-8",
        timeout=30,
        env={"COLUMNS": "200", "TERM": "dumb"},
    )
    # Keyed by the start of the question's last line; the dtype's (its choices wrap) is its default "(FP32".
    replies = {"Tensor dims": ["0", "4"], "(FP32": ["INT32"]}
    transcript = []
    while child.expect([r"\): $", pexpect.EOF]) == 0:
        question = child.before.strip().splitlines()[-1]
        transcript.append(question)
        queue = next((q for prefix, q in replies.items() if question.startswith(prefix)), None)
        child.sendline(queue.pop(0) if queue else "")
    child.close()
    assert child.exitstatus == 0, child.before
    meta = tomllib.loads((tmp_path / "p" / "tbgen.toml").read_text())
    assert meta["answers"]["dims"] == "4" and meta["answers"]["dtype"] == "INT32"
    assert sum(q.startswith("Tensor dims") for q in transcript) == 2  # asked again after the bad answer
    assert any(
        q.startswith("Input 1 (empty: the template's example") for q in transcript
    )  # the tensors, first
    assert any(
        q.startswith("Backend name") and q.endswith("(p") for q in transcript
    )  # default follows the project


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["test", "--image", "some/image:1"], "--image names the image for --docker"),
        (["serve", "--gpu"], "a local server sees this machine's GPUs already"),
        (["build", "--image", "some/image:1"], "--image names the image for --docker"),
        (["test", "--docker", "--packaged"], "--packaged tests an image made by `tbgen package`"),
        (["test", "--docker", "--sanitize", "address"], "cannot be combined with --docker"),
        (["clean"], "tbgen clean --containers"),
    ],
)
def test_docker_options_that_do_not_fit_exit_2(tmp_path, args, fragment):
    project = tmp_path / "proj"
    assert tbgen("new", str(project), "-t", "cpp-backend", "--no-input").returncode == 0
    result = tbgen(*args, *([str(project)] if args[0] != "clean" else []))
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in " ".join(result.stderr.split())


def test_tables_are_not_cut_when_output_is_not_a_terminal():
    result = subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", "versions"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )  # no COLUMNS, stdout a pipe
    assert result.returncode == 0
    newest = versions.newest()
    row = next(line for line in result.stdout.splitlines() if line.startswith(f"{newest.container}  "))
    assert ";".join(newest.cuda_architectures) in row and "…" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 200
