"""Whatever text a user types, `tbgen new` answers with a project (exit 0) or a clean message (exit 2).

Property tests (hypothesis) throw arbitrary text at `--set` values and keys, project paths, `--backend-name` /
`--model-name` and answers files (TOML and JSON with arbitrary keys and values, and files that are not TOML or
JSON at all): Rich markup ("[/x]", "[bold]"), backslashes, Jinja, unicode, newlines and other control
characters (no NUL: no command line can carry one). Each run must exit 0 or 2, never show a traceback or let
an exception escape, and on exit 2 leave the working directory exactly as it was: no project directory, no
hidden sibling the project was being rendered in, no parent directory created for it. Runs in-process with
typer's CliRunner, with a bounded, derandomized number of examples so CI is fast and repeatable.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import tomllib
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from triton_backend_gen.cli import app
from triton_backend_gen.scaffold import list_templates

TEMPLATES = tuple(t.name for t in list_templates())
OPTION_KEYS = sorted({o.key for t in list_templates() for o in t.options})
# Keys a user might also type: the answers file's template, unknown ones, markup and blanks.
KEYS = (*OPTION_KEYS, "template", "colour", "[bold]", "[/x]", " ", "dims ")

FUZZ = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

MARKUP = st.sampled_from(
    [
        "[/x]",
        "[bold]",
        "[/]",
        "[red]x[/red]",
        "[/bold red]",
        "\\",
        "\\[",
        "[",
        "]",
        "[link=file:///]x[/link]",
        ":smile:",
        "{{ cookiecutter.project_name }}",
        "{% raw %}",
        "{#",
        "$(id)",
        "%s",
        "\x1b[31m",
        "\r\n",
        "\t",
        "ü",
        "名前",
        "\u202e",
        "\ufeff",
        "16",
        "-1",
        "2,3",
        "FP16",
        "KIND_GPU",
        "yes",
        "r24.10",
        "80;90a",
    ]
)
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=24)
USER_TEXT = st.one_of(TEXT, MARKUP, st.lists(st.one_of(TEXT, MARKUP), max_size=4).map("".join))
NAME = st.from_regex(
    r"[A-Za-z][A-Za-z0-9_-]{0,15}", fullmatch=True
)  # valid project names, so some runs succeed

runner = CliRunner()


def snapshot(root: Path) -> set[str]:
    """Every path under ``root``, hidden ones included."""
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def run_new(*args: str, files: dict[str, str] | None = None, path: str = "p") -> None:
    """`tbgen new --no-input ARGS -- PATH` in a fresh directory, checking the properties every run must
    have."""
    with tempfile.TemporaryDirectory(prefix="tbgen-user-text-") as scratch, contextlib.chdir(scratch):
        root = Path(scratch)
        for name, text in (files or {}).items():
            (root / name).write_text(text, encoding="utf-8")
        before = snapshot(root)
        result = runner.invoke(app, ["new", "--no-input", *args, "--", path], env={"COLUMNS": "200"})
        shown = f"tbgen new {' '.join(map(repr, [*args, path]))}\n{result.output}"
        assert result.exception is None or isinstance(result.exception, SystemExit), shown + "".join(
            traceback.format_exception(result.exception)
        )
        assert "Traceback" not in result.output, shown
        assert result.exit_code in (0, 2), shown
        event(f"exit {result.exit_code}")  # --hypothesis-show-statistics: how often each outcome was reached
        if result.exit_code == 2:
            assert result.output.strip(), "exit 2 without a message"
            assert snapshot(root) == before, f"{shown}\nleft behind: {sorted(snapshot(root) - before)}"
        else:
            assert "Created" in result.output, shown
            assert (root / path / "tbgen.toml").is_file(), shown
            assert not [p for p in snapshot(root) if ".tbgen-" in p], shown  # no staging directory left


def set_args(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"--set={key}={value}" for key, value in pairs]


# --- --set ------------------------------------------------------------------------------------------------
def test_markup_in_a_set_value_is_a_clean_usage_error():
    """The case that once crashed Rich's printer: the error repeats the value, markup included."""
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        result = runner.invoke(
            app,
            ["new", "p", "--template", "python-backend", "--no-input", "--set", "dims=[/x]"],
            env={"COLUMNS": "200"},
        )
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "dims must be" in result.output and "'[/x]'" in result.output
        assert "Traceback" not in result.output
        assert list(Path(scratch).iterdir()) == []


@FUZZ
@given(
    template=st.sampled_from(TEMPLATES),
    pairs=st.lists(st.tuples(st.sampled_from(KEYS), USER_TEXT), min_size=1, max_size=3),
)
@example(template="python-backend", pairs=[("dims", "[/x]")])
@example(template="cpp-backend", pairs=[("model_name", "[bold]x")])
@example(template="cpp-backend", pairs=[("backend_name", "[/]")])
@example(template="cpp-backend", pairs=[("dtype", "\\")])
@example(template="cpp-backend", pairs=[("max_batch_size", "9" * 40)])
@example(template="cpp-backend", pairs=[("instance_count", "99999999999")])
@example(template="cpp-backend", pairs=[("dims", "1," + "9" * 30)])
@example(template="cpp-backend", pairs=[("cuda_architectures", "²;80")])
@example(template="python-backend", pairs=[("project_name", "other")])
@example(template="python-backend", pairs=[("triton_version", "\x1b[31m24.10")])
@example(template="decoupled-backend", pairs=[("[bold]", "1")])
@example(template="python-backend", pairs=[("dims", "2,3"), ("max_batch_size", "0")])  # a valid one
def test_set_values(template, pairs):
    run_new("--template", template, *set_args(pairs))


@FUZZ
@given(template=st.sampled_from(TEMPLATES), items=st.lists(USER_TEXT, min_size=1, max_size=3))
@example(template="python-backend", items=["[/x]"])
@example(template="python-backend", items=["=[bold]"])
def test_set_items_of_any_shape(template, items):
    """Items that may lack '=' or a key."""
    run_new("--template", template, *[f"--set={item}" for item in items])


# --- paths and names ----------------------------------------------------------------------------------------
def relative_inside(path: str) -> bool:
    """Paths that stay inside the working directory (so the test never writes elsewhere)."""
    normal = os.path.normpath(path) if path else "."
    return (
        not os.path.isabs(path)
        and normal != ".."
        and not normal.startswith("../")
        and not path.startswith("~")
    )


PATHS = st.one_of(
    USER_TEXT,
    NAME,
    st.lists(st.one_of(USER_TEXT, NAME), min_size=1, max_size=3).map("/".join),
    st.builds(lambda name: name * 40, NAME),  # names longer than a file name may be
).filter(relative_inside)


@settings(FUZZ, max_examples=40)  # many of these render a project (0.3 s each)
@given(template=st.sampled_from(TEMPLATES), path=PATHS)
@example(template="python-backend", path="[/x]")
@example(template="python-backend", path="x/[/x]/p")
@example(template="python-backend", path="a" * 300)
@example(template="python-backend", path="a" * 300 + "/p")
@example(template="python-backend", path="d/" + "a" * 130)
@example(template="python-backend", path="new")  # its backend name would be a C++ keyword
@example(template="python-backend", path="")
@example(template="python-backend", path="p\n")
def test_project_paths(template, path):
    run_new("--template", template, path=path)


def test_a_file_in_the_way_of_the_project_directory_is_a_usage_error():
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        Path("f").write_text("mine\n")
        result = runner.invoke(
            app, ["new", "--no-input", "-t", "python-backend", "f/p"], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 2 and "not a directory" in " ".join(result.output.split()), result.output
        assert sorted(p.name for p in Path(scratch).iterdir()) == ["f"]


@FUZZ
@given(
    template=st.sampled_from(TEMPLATES),
    backend=st.one_of(USER_TEXT, NAME),
    model=st.one_of(USER_TEXT, NAME),
    path=NAME,
)
@example(template="cpp-backend", backend="[/x]", model="[bold]", path="p")
@example(template="cpp-backend", backend="x" * 65, model="m", path="p")
@example(template="python-backend", backend="ok_name", model="..", path="p")
@example(template="decoupled-backend", backend="python", model="a\\b", path="p")
def test_backend_and_model_names(template, backend, model, path):
    run_new("--template", template, f"--backend-name={backend}", f"--model-name={model}", path=path)


# --- answers files ------------------------------------------------------------------------------------------
def toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c >= " " and c != "\x7f" else f"\\u{ord(c):04x}" for c in escaped) + '"'


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # finite floats only: repr is valid TOML
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(data: dict) -> str:
    """A TOML document of ``data`` (top-level keys as key = value lines; tables inline)."""
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in data.items())


SCALARS = st.one_of(
    USER_TEXT,
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["16", "FP16", "24.10", "KIND_CPU", "cpp", "vectorized", "true", "8"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(USER_TEXT, inner, max_size=3)),
    max_leaves=6,
)
ANSWERS = st.dictionaries(st.one_of(st.sampled_from(KEYS), USER_TEXT), VALUES, max_size=4)
DOCUMENTS = st.one_of(
    ANSWERS,
    st.fixed_dictionaries(
        {"answers": st.one_of(ANSWERS, VALUES)},
        optional={"tbgen": st.one_of(st.fixed_dictionaries({"template": VALUES}), VALUES)},
    ),
)


@FUZZ
@given(data=DOCUMENTS, fmt=st.sampled_from(["toml", "json"]), template=st.sampled_from((None, *TEMPLATES)))
@example(data={"answers": 5}, fmt="json", template=None)
@example(data={"answers": "ab"}, fmt="json", template="python-backend")
@example(data={"answers": {}, "tbgen": "x"}, fmt="json", template=None)
@example(
    data={"answers": {"dims": "[/x]"}, "tbgen": {"template": "python-backend"}}, fmt="toml", template=None
)
@example(data={"template": ["[bold]"]}, fmt="json", template=None)
@example(data={"project_name": "zz"}, fmt="toml", template="python-backend")
@example(data={"dims": [2, 3], "max_batch_size": 4}, fmt="json", template="python-backend")  # a valid one
def test_answers_files(data, fmt, template):
    text = json.dumps(data) if fmt == "json" else toml_document(data)
    if fmt == "toml":
        assert tomllib.loads(text) == data  # the file says what the test meant
    args = ["--answers", f"answers.{fmt}"] + (["--template", template] if template else [])
    run_new(*args, files={f"answers.{fmt}": text})


@FUZZ
@given(text=USER_TEXT, fmt=st.sampled_from(["toml", "json", "txt"]))
@example(text="[answers]\ndims = '[/x]'\n", fmt="toml")
@example(text="{", fmt="json")
@example(text="answers = 3\ntbgen = 4\n", fmt="toml")
def test_answers_files_that_are_not_answers(text, fmt):
    run_new("--template", "python-backend", "--answers", f"answers.{fmt}", files={f"answers.{fmt}": text})


@pytest.mark.parametrize("content", [b"\xff\xfe\x00junk", b'dims = "\xc3\x28"'])
def test_answers_files_that_are_not_text(content):
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        Path("answers.toml").write_bytes(content)
        result = runner.invoke(
            app, ["new", "--no-input", "--answers", "answers.toml", "p"], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 2 and "Cannot read answers" in result.output, result.output
        assert sorted(p.name for p in Path(scratch).iterdir()) == ["answers.toml"]
