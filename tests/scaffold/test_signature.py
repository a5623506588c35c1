"""The tensor signature: flags, answers files, tbgen.toml and imported configs give the same typed answers,
bad ones exit 2 with nothing written, and the rendered config.pbtxt declares exactly the signature."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from conftest import project_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2
from typer.testing import CliRunner

from triton_backend_gen import signature
from triton_backend_gen.cli import app
from triton_backend_gen.errors import AnswerError, UsageError
from triton_backend_gen.model_config import load_model_config, validate_tree
from triton_backend_gen.model_config.importing import import_config
from triton_backend_gen.scaffold import read_answers_file, render_new_project

CORPUS = Path(__file__).resolve().parent.parent / "model_config" / "corpus" / "valid"
TEMPLATES = ("cpp-backend", "python-backend", "decoupled-backend")
MIXED = [
    "--input",
    "TEXT:BYTES:1",
    "--input",
    "LANG:BYTES:1:optional",
    "--input",
    "IMG:FP16:3,-1",
    "--input",
    "K:INT32:1",
    "--output",
    "TOKENS:INT64:-1",
    "--output",
    "LABEL:BYTES:1",
    "--output",
    "SCORE:FP32:4",
]
runner = CliRunner()


def tensors_of(config) -> list[tuple]:
    """What config.pbtxt says of each tensor, in order."""
    return [
        (
            t.name,
            t.data_type,
            list(t.dims),
            getattr(t, "optional", False),
            list(t.reshape.shape) if t.HasField("reshape") else None,
            getattr(t, "label_filename", ""),
        )
        for t in (*config.input, *config.output)
    ]


# ---- The grammar -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TEXT:BYTES:1", signature.Tensor("TEXT", "BYTES", (1,))),
        ("IMG:fp16:3,224,224", signature.Tensor("IMG", "FP16", (3, 224, 224))),
        ("LANG:STRING:-1:optional", signature.Tensor("LANG", "BYTES", (-1,), optional=True)),
        (" X : TYPE_BF16 : [2, -1] ", signature.Tensor("X", "BF16", (2, -1))),
    ],
)
def test_flags_read_as_tensors(text, expected):
    assert signature.parse_tensor(text) == expected
    assert signature.parse_tensor(expected.flag()) == expected


@pytest.mark.parametrize(
    ("text", "output", "fragment"),
    [
        ("TEXT:BYTES", False, "does not read as NAME:DTYPE:DIMS"),
        ("TEXT:BYTES:1:maybe", False, "does not read as"),
        ("TEXT:BYTE:1", False, "Unknown datatype 'BYTE'"),
        ("TEXT:BYTES:0", False, "dims must be"),
        ("TEXT:BYTES:-2", False, "dims must be"),
        ("TEXT:BYTES:", False, "dims must be"),
        ("1TEXT:BYTES:1", False, "Invalid tensor name"),
        ("OUT:FP32:1:optional", True, "outputs cannot be optional"),
    ],
)
def test_bad_flags_name_the_rule(text, output, fragment):
    with pytest.raises(AnswerError) as err:
        signature.parse_tensor(text, output=output)
    assert fragment in err.value.message
    assert err.value.hint


def test_inputs_and_outputs_come_together():
    assert signature.from_flags([], []) is None
    for inputs, outputs in ((["A:FP32:1"], []), ([], ["B:FP32:1"])):
        with pytest.raises(AnswerError, match="needs both inputs and outputs"):
            signature.from_flags(inputs, outputs)


@pytest.mark.parametrize(
    ("flags", "kwargs", "fragment"),
    [
        ((["A:FP32:1"], ["A:FP32:1"]), {}, "A is used twice"),
        ((["A:FP32:1:optional"], ["B:FP32:1"]), {}, "at least one must be required"),
        ((["START:INT32:1"], ["B:FP32:1"]), {"sequence": True}, "control inputs"),
        ((["A:BF16:1"], ["B:FP32:1"]), {"bf16": False}, "cannot serve BF16"),
    ],
)
def test_signature_rules(flags, kwargs, fragment):
    with pytest.raises(AnswerError) as err:
        signature.validate(signature.from_flags(*flags), **kwargs)
    assert fragment in err.value.message


def test_control_input_names_are_fine_without_sequence_batching():
    assert signature.validate(signature.from_flags(["START:INT32:1"], ["END:INT32:1"]))


def test_tables_round_trip_through_the_cookiecutter_variable():
    given = signature.from_flags(
        [v for f, v in zip(MIXED[::2], MIXED[1::2], strict=True) if f == "--input"],
        [v for f, v in zip(MIXED[::2], MIXED[1::2], strict=True) if f == "--output"],
    )
    assert signature.from_context(given.context()) == given
    assert signature.from_context(signature.EMPTY) is None


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"name": "A", "datatype": "FP32"}, "lacks dims"),
        ({"name": "A", "datatype": "FP32", "dims": [1], "colour": "red"}, "unknown keys colour"),
        ({"name": "A", "datatype": "FP32", "dims": [1], "optional": "yes"}, "optional must be true or false"),
        ("A:FP32:1", "must be a table"),
    ],
)
def test_bad_tables_name_the_key(table, fragment):
    with pytest.raises(AnswerError) as err:
        signature.from_tables([table], [{"name": "B", "datatype": "FP32", "dims": [1]}], "models[0]")
    assert fragment in err.value.message


# ---- tbgen new -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("template", TEMPLATES)
def test_flags_render_a_config_with_every_tensor(tmp_path, template):
    result = runner.invoke(app, ["new", str(tmp_path / "txt"), "--template", template, "--no-input", *MIXED])
    assert result.exit_code == 0, result.output
    project = tmp_path / "txt"
    config = load_model_config(project / "model_repository" / "txt" / "config.pbtxt")
    assert [(t.name, t.data_type, list(t.dims), t.optional) for t in config.input] == [
        ("TEXT", 13, [1], False),
        ("LANG", 13, [1], True),
        ("IMG", 10, [3, -1], False),
        ("K", 8, [1], False),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("TOKENS", 9, [-1]),
        ("LABEL", 13, [1]),
        ("SCORE", 11, [4]),
    ]
    assert config.model_transaction_policy.decoupled == (template == "decoupled-backend")
    assert [
        f
        for f in validate_tree(project / "model_repository", project_of(project / "model_repository"))
        if f.severity == "error"
    ] == []
    # tbgen.toml records the signature, and a new project from it is the same project.
    recorded = tomllib.loads((project / "tbgen.toml").read_text())["models"][0]
    assert [t["name"] for t in recorded["inputs"]] == ["TEXT", "LANG", "IMG", "K"]
    answers = read_answers_file(project / "tbgen.toml")
    assert answers.pop("template") == template
    again = render_new_project(template, tmp_path / "again" / "txt", answers)
    for file in ("model_repository/txt/config.pbtxt", "reference.py"):
        assert (again / file).read_text() == (project / file).read_text(), file


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--input", "TEXT:BYTES:1"], "--input was given without --output"),
        (["--output", "X:FP32:1"], "--output was given without --input"),
        (["--input", "X:FP32:1", "--output", "X:FP32:1"], "X is used twice"),
        (["--input", "X:FP32:0", "--output", "Y:FP32:1"], "dims must be"),
        (["--input", "X:FLOAT:1", "--output", "Y:FP32:1"], "Unknown datatype"),
        (["--input", "X:FP32:1:optional", "--output", "Y:FP32:1"], "at least one must be required"),
        (["-t", "python-backend", "--input", "X:BF16:1", "--output", "Y:FP32:1"], "cannot serve BF16"),
        (
            ["-t", "python-backend", "--set", "native=yes", "--input", "X:FP32:1", "--output", "Y:FP32:1"],
            "native is an add/sub example",
        ),
        (
            [
                "--from-config",
                str(CORPUS / "optional_input.pbtxt"),
                "--input",
                "X:FP32:1",
                "--output",
                "Y:FP32:1",
            ],
            "--input/--output cannot be added",
        ),
        (["--from-config", str(CORPUS / "ensemble_bytes.pbtxt")], "is an ensemble"),
        (["--from-config", str(CORPUS / "decoupled_repeat.pbtxt")], "--template decoupled-backend"),
        (
            ["-t", "decoupled-backend", "--from-config", str(CORPUS / "decoupled_batching.pbtxt")],
            "serves max_batch_size 0",
        ),
        (
            ["-t", "python-backend", "--from-config", str(CORPUS / "bf16_and_uint64.pbtxt")],
            "cannot serve BF16",
        ),
        (["--from-config", "no/such/config.pbtxt"], "no such file"),
        (["--set", "signature=x"], "cannot be set with --set"),
        (
            ["-t", "python-backend", "--set", "native=yes", "--set", "dtype=BYTES"],
            "native (the pybind11 add/sub)",
        ),
    ],
)
def test_bad_signatures_exit_2_and_write_nothing(tmp_path, args, fragment):
    result = runner.invoke(app, ["new", str(tmp_path / "p"), "--no-input", *args])
    assert result.exit_code == 2, result.output
    assert fragment in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_an_answers_file_gives_the_signature_in_models_tables(tmp_path):
    answers = tmp_path / "answers.toml"
    answers.write_text(
        'template = "cpp-backend"\nmax_batch_size = 4\n[[models]]\nname = "ranker"\n'
        '[[models.inputs]]\nname = "Q"\ndatatype = "BYTES"\ndims = [-1]\n'
        '[[models.outputs]]\nname = "SCORE"\ndatatype = "FP64"\ndims = [1]\n'
    )
    result = runner.invoke(app, ["new", str(tmp_path / "p"), "--no-input", "--answers", str(answers)])
    assert result.exit_code == 0, result.output
    config = load_model_config(tmp_path / "p" / "model_repository" / "ranker" / "config.pbtxt")
    assert config.max_batch_size == 4
    assert tensors_of(config) == [("Q", 13, [-1], False, None, ""), ("SCORE", 12, [1], False, None, "")]


def test_an_answers_file_with_two_models_is_refused(tmp_path):
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"models": [{"name": "a"}, {"name": "b"}]}))
    with pytest.raises(UsageError, match="must hold one model"):
        read_answers_file(answers)


def test_the_example_answers_still_define_add_sub(tmp_path):
    project = render_new_project(
        "cpp-backend",
        tmp_path / "p",
        {"dtype": "INT64", "dims": "2,3", "input0_name": "A", "output1_name": "D"},
    )
    config = load_model_config(project / "model_repository" / "add_sub" / "config.pbtxt")
    assert [(t.name, t.data_type, list(t.dims)) for t in (*config.input, *config.output)] == [
        ("A", 9, [2, 3]),
        ("INPUT1", 9, [2, 3]),
        ("OUTPUT0", 9, [2, 3]),
        ("D", 9, [2, 3]),
    ]
    assert "inputs" not in tomllib.loads((project / "tbgen.toml").read_text())["models"][0]


# ---- --from-config ---------------------------------------------------------------------------------------

IMPORTABLE = sorted(
    p for p in CORPUS.glob("*.pbtxt") if not any(word in p.stem for word in ("ensemble", "decoupled"))
)


@pytest.mark.parametrize("source", IMPORTABLE, ids=lambda p: p.stem)
def test_an_imported_config_is_served_with_its_exact_tensors(tmp_path, source):
    """Every importable config of the corpus: the generated config.pbtxt declares the same tensors (reshape,
    optional and label files kept), batching and instance groups, and validates."""
    template = "cpp-backend"
    imported = import_config(source, template)
    project = render_new_project(template, tmp_path / "p", {}, imported=imported)
    original = load_model_config(source)
    generated = load_model_config(project / "model_repository" / imported.name / "config.pbtxt")
    assert tensors_of(generated) == tensors_of(original)
    assert generated.max_batch_size == original.max_batch_size
    assert generated.dynamic_batching == original.dynamic_batching
    if original.instance_group:
        assert list(generated.instance_group) == list(original.instance_group)
    assert generated.backend == "p"
    assert [
        f
        for f in validate_tree(project / "model_repository", project_of(project / "model_repository"))
        if f.severity == "error"
    ] == []


def test_the_model_is_named_by_its_config_else_its_directory(tmp_path):
    model_dir = tmp_path / "detector"
    model_dir.mkdir()
    text = (CORPUS / "optional_input.pbtxt").read_text().replace('name: "optional_input"', "")
    (model_dir / "any-name.txt").write_text(text)
    assert import_config(model_dir / "any-name.txt", "cpp-backend").name == "detector"
    assert import_config(CORPUS / "optional_input.pbtxt", "cpp-backend").name == "optional_input"


def test_label_files_are_copied_or_written_as_placeholders(tmp_path):
    source = tmp_path / "classifier"
    source.mkdir()
    config = (
        'name: "classifier"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "IMG" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]\n'
        'output [ { name: "PROBS" data_type: TYPE_FP32 dims: [ 5 ] label_filename: "labels.txt" },\n'
        '         { name: "TOP" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "top.txt" } ]\n'
    )
    (source / "config.pbtxt").write_text(config)
    (source / "labels.txt").write_text("cat\ndog\nbird\nfish\nfrog\n")
    result = runner.invoke(
        app, ["new", str(tmp_path / "p"), "--no-input", "--from-config", str(source / "config.pbtxt")]
    )
    assert result.exit_code == 0, result.output
    model = tmp_path / "p" / "model_repository" / "classifier"
    assert (model / "labels.txt").read_text() == "cat\ndog\nbird\nfish\nfrog\n"
    assert (model / "top.txt").read_text().splitlines() == ["class_0", "class_1", "class_2"]
    assert "top.txt was not beside the config" in " ".join(result.output.split())


def test_what_a_backend_cannot_honour_is_left_out_and_said(tmp_path):
    result = runner.invoke(
        app,
        ["new", str(tmp_path / "p"), "--no-input", "--from-config", str(CORPUS / "batch_input_ragged.pbtxt")],
    )
    assert result.exit_code == 0, result.output
    assert "left out batch_input" in " ".join(result.output.split())
    generated = load_model_config(tmp_path / "p" / "model_repository" / "batch_input_ragged" / "config.pbtxt")
    assert not generated.batch_input


# ---- Any signature renders ------------------------------------------------------------------------------

_names = st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True)
_tensor = st.tuples(
    _names,
    st.sampled_from(sorted(signature.DATATYPES)),
    st.lists(st.sampled_from([-1, 1, 2, 7]), min_size=1, max_size=3),
    st.booleans(),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(_tensor, min_size=1, max_size=4, unique_by=lambda t: t[0]),
    st.lists(_tensor, min_size=1, max_size=3, unique_by=lambda t: t[0]),
    st.sampled_from(TEMPLATES),
)
def test_any_valid_signature_renders_a_config_that_declares_it(tmp_path_factory, inputs, outputs, template):
    inputs = [(f"I{n}", d, dims, opt) for n, d, dims, opt in inputs]
    outputs = [(f"O{n}", d, dims, False) for n, d, dims, _ in outputs]
    if all(opt for *_, opt in inputs):
        inputs[0] = (*inputs[0][:3], False)
    flags = [
        f"{n}:{d}:{','.join(map(str, dims))}" + (":optional" if opt else "") for n, d, dims, opt in inputs
    ]
    given_sig = signature.from_flags(
        flags, [f"{n}:{d}:{','.join(map(str, dims))}" for n, d, dims, _ in outputs]
    )
    target = tmp_path_factory.mktemp("sig") / "p"
    if template == "python-backend" and any(
        t.datatype == "BF16" for t in (*given_sig.inputs, *given_sig.outputs)
    ):
        with pytest.raises(AnswerError):
            render_new_project(template, target, {"signature": given_sig.context()})
        return
    project = render_new_project(template, target, {"signature": given_sig.context()})
    config = load_model_config(project / "model_repository" / "p" / "config.pbtxt")
    wire = {v.config: k for k, v in signature.DATATYPES.items()}
    declared = [
        signature.Tensor(
            t.name,
            wire[model_config_pb2.DataType.Name(t.data_type)],
            tuple(t.dims),
            bool(getattr(t, "optional", False)),
        )
        for t in (*config.input, *config.output)
    ]
    assert declared == [*given_sig.inputs, *given_sig.outputs]
    shutil.rmtree(target)


def test_an_imported_bf16_signature_is_refused_only_where_bf16_cannot_be_served(tmp_path):
    """BF16 is the python backend's limit: decoupled-backend's C++ serves it, as cpp-backend does."""
    source = CORPUS / "bf16_and_uint64.pbtxt"
    text = source.read_text().replace("max_batch_size: 8", "max_batch_size: 0")
    (tmp_path / "bf16.pbtxt").write_text(text)
    imported = import_config(tmp_path / "bf16.pbtxt", "decoupled-backend")
    project = render_new_project("decoupled-backend", tmp_path / "p", {}, imported=imported)
    assert "TYPE_BF16" in (project / "model_repository" / imported.name / "config.pbtxt").read_text()
    with pytest.raises(AnswerError, match="cannot serve BF16"):
        render_new_project("decoupled-backend", tmp_path / "q", {"language": "python"}, imported=imported)
