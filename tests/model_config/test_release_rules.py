"""The config rules a newer server enforces, by the project's release: an EXECUTION_ENV_PATH archive must
unpack under the python backend's secure extraction (26.06: libarchive's SECURE_NODOTDOT,
SECURE_NOABSOLUTEPATHS, SECURE_SYMLINKS), a TRITON_BATCH_STRATEGY_PATH must stay inside the model's directory
(26.06), and never sits beside a sequence batcher (every release).

The archives are crafted with tarfile and judged by the system's libarchive; the decisions are unit-tested,
then `tbgen validate` runs once per project release over a repository holding one model per rule."""

from __future__ import annotations

import io
import re
import tarfile
import textwrap
from pathlib import Path

import pytest
from conftest import run_tbgen

from triton_backend_gen import versions
from triton_backend_gen.commands.env import pack_checked
from triton_backend_gen.errors import BuildError
from triton_backend_gen.findings import NOTE
from triton_backend_gen.model_config import Expectations, check_config, release_rule_findings
from triton_backend_gen.model_config.checks.parameters import batch_strategy_problem
from triton_backend_gen.model_config.env_archive import describe_refusal, refused_entries, secure_flags
from triton_backend_gen.model_config.execution_env import read_packed_env
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold import render_new_project

SECURE = "secure_env_extraction"
CONFINED = "confined_batch_strategy_path"
# The first releases with and without both rules.
NEW = versions.resolve(versions.FEATURES[SECURE].since)
OLD = versions.resolve("24.10")
PYVENV = b"home = /usr/bin\nversion = 3.12.3\n"


def crafted(path: Path, *members: tuple) -> Path:
    """A gzip tarball of ``members``: ("file", name), ("dir", name), ("symlink", name, target) or
    ("hardlink", name, target); a pyvenv.cfg first, as venv-pack writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for kind, name, *target in (("file", "pyvenv.cfg"), *members):
            info = tarfile.TarInfo(name)
            data = PYVENV if name == "pyvenv.cfg" else b"x"
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[
                kind
            ]
            info.mode = 0o755
            info.linkname = target[0] if target else ""
            tar.addfile(info)
    return path


# One archive per rule: the entry libarchive refuses, and the words naming the rule.
ARCHIVES = {
    "dotdot": ((("file", "lib/../../escape.py"),), "lib/../../escape.py", 'has ".." in its path'),
    "absolute": ((("file", "/tmp/tbgen-escape.py"),), "/tmp/tbgen-escape.py", "is an absolute path"),
    "symlink": (
        (("symlink", "lib64", "/tmp"), ("file", "lib64/escape.py")),
        "lib64/escape.py",
        'would be written through the symlink "lib64" (-> /tmp) that the archive created',
    ),
}


# --- the decisions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/models/add_sub/1/libbatch.so", None),
        ("/srv/repo/add_sub/libbatch.so", None),
        ("/models/add_sub/./libbatch.so", None),
        ("libbatch.so", (False, "relative path")),
        ("add_sub/libbatch.so", (False, "relative path")),
        ("./add_sub/libbatch.so", (False, "relative path")),
        ("/models/add_sub/../other/libbatch.so", (False, '".."')),
        ("/models/add_sub/1/../libbatch.so", (False, '".."')),
        ("/opt/batching/libbatch.so", (False, 'no directory named "add_sub"')),
        ("/models/add_sub", (False, 'no directory named "add_sub"')),  # the directory itself
        ("/models/add_sub_v2/libbatch.so", (False, 'no directory named "add_sub"')),
        ("  ", (True, "is empty")),
        ("$$TRITON_MODEL_DIRECTORY/libbatch.so", (True, "does not replace")),
    ],
)
def test_where_a_batching_library_path_leads(value, expected):
    problem = batch_strategy_problem(value, "add_sub")
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and problem[0] == expected[0] and expected[1] in problem[1], problem


@pytest.mark.parametrize(
    ("entry", "message", "hardlink", "symlink", "words"),
    [
        ("../x", "Path contains '..'", None, None, 'has ".." in its path (SECURE_NODOTDOT)'),
        ("/x", "Path is absolute", None, None, "is an absolute path (SECURE_NOABSOLUTEPATHS)"),
        ("hl", "Path contains '..'", "../x", None, 'is a hard link to "../x", which has ".."'),
        ("hl", "Path is absolute", "/etc/passwd", None, 'hard link to "/etc/passwd", which is an absolute'),
        (
            "ln/x",
            "Cannot extract through symlink ln/x",
            None,
            ("ln", "/etc"),
            'would be written through the symlink "ln" (-> /etc) that the archive created (SECURE_SYMLINKS)',
        ),
        (
            "hl",
            "Cannot extract through symlink ln/p",
            "ln/p",
            ("ln", "/etc"),
            'hard link to "ln/p", which leads',
        ),
        ("x", "Something new", None, None, "is refused by libarchive: Something new"),
    ],
)
def test_libarchive_refusals_in_words(entry, message, hardlink, symlink, words):
    assert words in describe_refusal(entry, message, hardlink, symlink)


# --- libarchive itself -----------------------------------------------------------------------------------
def test_libarchive_refuses_what_python_backend_refuses(tmp_path):
    """Each crafted escape is refused, named by its entry; a venv's own links (lib64 -> lib, bin/python ->
    an absolute interpreter) and a symlink replaced by a file are not; nothing lands outside."""
    for name, (members, entry, words) in ARCHIVES.items():
        [refusal] = refused_entries(crafted(tmp_path / f"{name}.tar.gz", *members))
        assert refusal.entry == entry and words in refusal.rule, refusal
    hard = crafted(tmp_path / "hard.tar.gz", ("symlink", "etc", "/etc"), ("hardlink", "pw", "etc/passwd"))
    [refusal] = refused_entries(hard)
    assert (
        refusal.entry == "pw"
        and 'hard link to "etc/passwd", which leads through the symlink "etc"' in str(refusal)
    )
    fine = crafted(
        tmp_path / "venv.tar.gz",
        ("dir", "lib"),
        ("symlink", "lib64", "lib"),
        ("file", "lib/python3.12/site-packages/numpy/__init__.py"),
        ("symlink", "bin/python", "/usr/bin/python3.12"),
        ("symlink", "bin/tool", "/tmp"),
        ("file", "bin/tool"),  # the symlink itself is replaced, not written through
    )
    assert refused_entries(fine) == []
    assert not Path("/tmp/tbgen-escape.py").exists() and not Path("/tmp/escape.py").exists()
    assert secure_flags() == 0x0004 | 0x0200 | 0x10000 | 0x0100  # archive.h's values of the four options


def test_env_pack_keeps_only_an_archive_that_unpacks(tmp_path):
    """`tbgen env pack` checks its tarball before it replaces the model's: a refused one is not kept, and
    the previous one stays as it was."""
    output = tmp_path / "python-env.tar.gz"
    crafted(output, ("file", "lib/ok.py"))
    before = output.read_bytes()

    def bad_pack(into: Path):
        crafted(into, *ARCHIVES["symlink"][0])
        return read_packed_env(into)

    with pytest.raises(BuildError) as err:
        pack_checked(output, "add_sub", bad_pack)
    assert '"lib64/escape.py" would be written through the symlink "lib64"' in err.value.message
    assert output.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [output.name]

    def good_pack(into: Path):
        crafted(into, ("symlink", "lib64", "lib"), ("file", "lib/new.py"))
        return read_packed_env(into)

    env, unchecked = pack_checked(output, "add_sub", good_pack)
    assert env.path == output and unchecked == "" and output.read_bytes() != before
    assert [p.name for p in tmp_path.iterdir()] == [output.name]

    # a release that unpacks without the secure flags keeps it, saying what a newer one would refuse; the
    # scratch directory is the one given (the project's build directory), left empty
    scratch = tmp_path / "build"
    env, said = pack_checked(output, "add_sub", bad_pack, scratch=scratch, refuse=False)
    assert "would refuse it" in said and '"lib64/escape.py"' in said and output.read_bytes() != before
    assert list(scratch.iterdir()) == []


def test_outside_a_project_a_missing_archive_or_libarchive_is_a_note(tmp_path):
    config = tmp_path / "m" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text(
        'backend: "python"\nparameters { key: "EXECUTION_ENV_PATH" value: { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
    )
    (config.parent / "1").mkdir()
    (config.parent / "1" / "model.py").write_text("")
    [note] = check_config(config, Expectations(release=NEW))
    assert note.severity == NOTE and "is not there" in note.message
    crafted(config.parent / "env.tar.gz", *ARCHIVES["dotdot"][0])
    [error] = check_config(config, Expectations(release=NEW))
    assert error.failed and "venv-pack or conda-pack elsewhere" in error.message  # no project: no command

    # Without the system's libarchive the archive is not checked, and validate says so (no traceback).
    missing = run_tbgen(
        "validate", str(config.parent), env={"LIBARCHIVE": str(tmp_path / "libarchive.so.13")}
    )
    said = " ".join(missing.stdout.split())
    assert missing.returncode == 0, missing.stdout + missing.stderr
    assert "note: EXECUTION_ENV_PATH: env.tar.gz was not checked" in said
    assert "libarchive is not available here" in said and "Traceback" not in missing.stderr


# --- tbgen validate ----------------------------------------------------------------------------------------
def batch_config(name: str, value: str, extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        name: "{name}"
        backend: "my_backend"
        max_batch_size: 8
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        {extra}
        parameters {{ key: "TRITON_BATCH_STRATEGY_PATH" value: {{ string_value: "{value}" }} }}
        """
    )


# Per model: its TRITON_BATCH_STRATEGY_PATH and the words of the finding (None: no finding).
BATCH_PATHS = {
    "relative": ("libbatch.so", "is a relative path"),
    "dotdot": ("/models/dotdot/1/../../libbatch.so", 'has ".." in it'),
    "outside": ("/opt/batching/libbatch.so", 'no directory named "outside"'),
    "inside": ("/models/inside/1/libbatch.so", None),
}
# Refused by every release.
ALWAYS = {
    "variable": ("$$TRITON_MODEL_DIRECTORY/libbatch.so", "", "does not replace in this parameter"),
    "sequence": (
        "/models/sequence/libbatch.so",
        "sequence_batching { }",
        "cannot be used with sequence_batching",
    ),
}


def project_for(root: Path, release: versions.Release, always: bool) -> Path:
    """A python-backend project of ``release`` whose repository holds a model per archive rule (add_sub, the
    project's own model, with the symlink one) and per batching-library rule (those every release refuses
    when ``always``)."""
    project = render_new_project(
        "python-backend",
        root / f"p{release.container.replace('.', '_')}",
        {"triton_version": release.container},
    )
    repository = project / "model_repository"
    env = (
        '\nparameters { key: "EXECUTION_ENV_PATH" '
        'value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
    )
    add_sub = repository / "add_sub" / "config.pbtxt"
    add_sub.write_text(add_sub.read_text() + env)
    crafted(repository / "add_sub" / "env.tar.gz", *ARCHIVES["symlink"][0])
    for name in ("dotdot", "absolute"):
        model = repository / f"env_{name}"
        (model / "1").mkdir(parents=True)
        (model / "1" / "model.py").write_text("")
        (model / "config.pbtxt").write_text(f'name: "env_{name}"\nbackend: "python"\n{env}')
        crafted(model / "env.tar.gz", *ARCHIVES[name][0])
    cases = {k: (v, "", w) for k, (v, w) in BATCH_PATHS.items()} | (ALWAYS if always else {})
    for name, (value, extra, _) in cases.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(batch_config(name, value, extra))
    return project


def findings_by_model(stdout: str) -> dict[str, list[tuple[str, str]]]:
    """model -> [(severity, message)] from `tbgen validate`'s lines."""
    found: dict[str, list[tuple[str, str]]] = {}
    unwrapped = re.sub(r"\n  (?=\S)", " ", stdout)  # a long finding continues on indented lines
    for match in re.finditer(r"model_repository/(\w+)/config\.pbtxt:\d+: (\w+): (.*)", unwrapped):
        found.setdefault(match[1], []).append((match[2], match[3]))
    return found


def assert_batch_path_errors(found: dict[str, list[tuple[str, str]]]) -> None:
    """Each batching-library model of project_for(always=True) has its one error; the one inside has none."""
    for model, (_, words) in BATCH_PATHS.items():
        if words is None:
            assert model not in found
        else:
            [(severity, message)] = found[model]
            assert severity == "error" and words in message and "escapes model repository" in message
            assert f"install the library as {model}/batchstrategy.so" in message
    for model, (_, _, words) in ALWAYS.items():
        [(severity, message)] = found[model]
        assert severity == "error" and words in message


def test_validate_refuses_for_a_release_with_the_rules(tmp_path):
    project = project_for(tmp_path, NEW, always=True)
    result = run_tbgen("validate", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    found = findings_by_model(result.stdout)
    for model, (_, entry, words) in (
        ("add_sub", ARCHIVES["symlink"]),
        ("env_dotdot", ARCHIVES["dotdot"]),
        ("env_absolute", ARCHIVES["absolute"]),
    ):
        [(severity, message)] = found[model]
        assert severity == "error" and f"Triton {NEW.container} refuses to unpack env.tar.gz" in message
        assert f'the entry "{entry}" {words}' in message, message
    # the project's own model gets the runnable command
    assert found["add_sub"][0][1].endswith("pack it again: `tbgen env pack --model add_sub`")
    assert_batch_path_errors(found)

    # What `tbgen check` adds for the project's own models (it prints messages without their file).
    [finding] = release_rule_findings(load_project(project))
    assert finding.failed and finding.message.startswith("add_sub/config.pbtxt:")
    assert '"lib64/escape.py" would be written through the symlink "lib64"' in finding.message
    assert f"tbgen env pack {project} --model add_sub" in finding.message  # run from elsewhere: names it


def test_validate_warns_for_an_older_release(tmp_path):
    """24.10 unpacks and loads them all, so only warnings; the rules every release has still fail."""
    project = project_for(tmp_path, OLD, always=False)
    result = run_tbgen("validate", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    found = findings_by_model(result.stdout)
    since = versions.FEATURES[SECURE].since
    for model, (_, entry, _) in (("add_sub", ARCHIVES["symlink"]), ("env_dotdot", ARCHIVES["dotdot"])):
        [(severity, message)] = found[model]
        assert severity == "warning" and f"unpacks in Triton {OLD.container}, but" in message
        assert f"python backend of {since} and later refuses it" in message and f'"{entry}"' in message
    [(severity, message)] = found["relative"]
    assert (
        severity == "warning" and f"{versions.FEATURES[CONFINED].since} and later refuse the model" in message
    )

    sequence = project / "model_repository" / "sequence"
    (sequence / "1").mkdir(parents=True)
    (sequence / "config.pbtxt").write_text(batch_config("sequence", *ALWAYS["sequence"][:2]))
    refused = run_tbgen("validate", str(sequence), cwd=tmp_path)
    assert refused.returncode == 1 and "cannot be used with sequence_batching" in refused.stdout
