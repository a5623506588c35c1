import json
from pathlib import Path

import pytest
from conftest import run_tbgen

from triton_backend_gen import versions
from triton_backend_gen.errors import AnswerError, UnknownReleaseError, UsageError
from triton_backend_gen.scaffold.answers import (
    parse_dims,
    parse_set_options,
    read_answers_file,
    resolve_answers,
)
from triton_backend_gen.scaffold.templates import get_template, list_templates


@pytest.fixture
def cpp():
    return get_template("cpp-backend")


def test_tbgen_triton_version_sets_the_default_release_and_a_bad_one_names_the_variable(cpp, monkeypatch):
    monkeypatch.setenv("TBGEN_TRITON_VERSION", "r24.10")
    answers = resolve_answers(cpp, {"project_name": "p"})
    assert (answers["triton_version"], answers["cmake_minimum"]) == ("24.10", "3.18")
    assert resolve_answers(cpp, {"project_name": "p", "triton_version": "26.06"})["triton_version"] == "26.06"
    monkeypatch.setenv("TBGEN_TRITON_VERSION", "2.99.0")
    with pytest.raises(UsageError) as err:
        resolve_answers(cpp, {"project_name": "p"})
    assert "$TBGEN_TRITON_VERSION" in str(err.value) and "-DTRITON_CORE_REPO_TAG=r" in err.value.hint


def test_every_template_is_registered():
    assert [t.name for t in list_templates()] == ["cpp-backend", "decoupled-backend", "python-backend"]


def test_defaults_follow_the_project_name(cpp, monkeypatch):
    monkeypatch.delenv("TBGEN_TRITON_VERSION", raising=False)  # set by tests/conftest.py
    answers = resolve_answers(cpp, {"project_name": "My-Fast-Backend"})
    assert answers["backend_name"] == "my_fast_backend"
    assert answers["triton_version"] == versions.newest().container
    assert answers["dtype"] == "FP32"
    assert answers["max_batch_size"] == 8 and answers["gpu"] is False
    assert answers["instance_kind"] == "KIND_CPU"
    assert list(answers) == [o.key for o in cpp.options]


def test_set_strings_are_converted_to_the_options_types(cpp):
    given = parse_set_options(["model_name=add_sub", "dims=4", "max_batch_size=0", "gpu=yes", "dtype=fp16"])
    answers = resolve_answers(cpp, {"project_name": "p", **given})
    assert answers["max_batch_size"] == 0
    assert answers["gpu"] is True and answers["instance_kind"] == "KIND_GPU"
    assert answers["dims"] == "4" and answers["dtype"] == "FP16"


def test_triton_version_is_normalised_and_moves_the_cuda_architectures(cpp):
    oldest = versions.RELEASES[0]
    for spelling in (oldest.container, oldest.branch, oldest.server_version):
        answers = resolve_answers(cpp, {"project_name": "p", "triton_version": spelling, "gpu": True})
        assert answers["triton_version"] == oldest.container
        assert answers["cuda_architectures"] == ";".join(oldest.cuda_architectures)


def test_unknown_triton_version_lists_the_known_ones(cpp):
    with pytest.raises(UnknownReleaseError) as err:
        resolve_answers(cpp, {"project_name": "p", "triton_version": "19.01"})
    assert err.value.exit_code == 2
    assert "19.01" in err.value.message
    assert versions.RELEASES[0].container in err.value.hint and versions.newest().container in err.value.hint


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ({"dims": "0"}, "dims must be"),
        ({"dims": "a,b"}, "dims must be"),
        ({"dims": "-2"}, "dims must be"),
        ({"max_batch_size": "-1"}, "max_batch_size must be 0 or more"),
        ({"max_batch_size": "many"}, "max_batch_size must be an integer"),
        ({"instance_count": "0"}, "instance_count must be 1 or more"),
        ({"gpu": "maybe"}, "gpu must be a boolean"),
        (
            {"dtype": "FP8"},
            "dtype must be one of FP32, FP16, BF16, FP64, INT8, INT16, INT32, INT64, UINT8, UINT16, "
            "UINT32, UINT64, BOOL, BYTES; got 'FP8'",
        ),
        ({"instance_kind": "KIND_TPU"}, "instance_kind must be one of"),
        ({"instance_kind": "KIND_GPU", "gpu": False}, "KIND_GPU needs a GPU build"),
        ({"input1_name": "INPUT0"}, "Tensor names must be distinct"),
        ({"output0_name": "1bad"}, "Invalid tensor name"),
        ({"backend_name": "python"}, "already used by a Triton backend"),
        ({"model_name": "a/b"}, "Invalid model name"),
        ({"cuda_architectures": "sm_90"}, "cuda_architectures must be"),
        ({"colour": "blue"}, "has no option 'colour'"),
    ],
)
def test_bad_answers_name_the_rule_and_an_example(cpp, given, fragment):
    with pytest.raises(AnswerError) as err:
        resolve_answers(cpp, {"project_name": "p", **given})
    assert fragment in err.value.message
    assert err.value.hint  # every rule comes with an example or the fix
    assert err.value.exit_code == 2


@pytest.mark.parametrize(("raw", "normal"), [("16", "16"), ("2, 3", "2,3"), ("[4,-1]", "4,-1"), ("-1", "-1")])
def test_parse_dims(raw, normal):
    assert parse_dims(raw) == normal


def test_parse_set_options_rejects_missing_equals():
    with pytest.raises(UsageError) as err:
        parse_set_options(["dtype"])
    assert "key=value" in err.value.message


class ScriptedPrompter:
    """Answers prompts from a script and records what it was asked and shown."""

    def __init__(self, replies):
        self.replies = dict(replies)
        self.asked = []
        self.errors = []

    def ask(self, option, default):
        self.asked.append((option.key, default))
        queue = self.replies.get(option.key)
        return queue.pop(0) if queue else default

    def show_error(self, error):
        self.errors.append(error.message)


def test_prompter_asks_the_rest_and_reasks_after_a_bad_answer(cpp):
    prompter = ScriptedPrompter({"dims": ["0", "4,4"], "dtype": ["INT64"]})
    answers = resolve_answers(cpp, {"project_name": "p", "model_name": "m"}, prompter)
    asked = [key for key, _ in prompter.asked]
    assert "project_name" not in asked and "model_name" not in asked
    assert asked.count("dims") == 2
    assert answers["dims"] == "4,4" and answers["dtype"] == "INT64"
    assert len(prompter.errors) == 1 and "dims must be" in prompter.errors[0]
    # the backend name offered follows the project name given before it
    assert ("backend_name", "p") in prompter.asked


def test_answers_file_from_a_projects_tbgen_toml(tmp_path):
    toml = tmp_path / "tbgen.toml"
    toml.write_text(
        '[tbgen]\ntemplate = "python-backend"\n[answers]\nproject_name = "old"\ndtype = "INT32"\n'
    )
    assert read_answers_file(toml) == {"dtype": "INT32", "template": "python-backend"}
    js = tmp_path / "a.json"
    js.write_text(json.dumps({"dims": "4"}))
    assert read_answers_file(js) == {"dims": "4"}
    bad = tmp_path / "bad.toml"
    bad.write_text("dtype = ")
    with pytest.raises(UsageError):
        read_answers_file(bad)
    with pytest.raises(UsageError):
        read_answers_file(Path(tmp_path / "missing.toml"))


# --- sequence models ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "flags", "fragment"),
    [
        ("python-backend", ["--set", "sequence=direct", "--set", "dtype=BYTES"], "cannot be BYTES"),
        ("python-backend", ["--set", "sequence=direct", "--set", "dims=-1"], "needs fixed dims"),
        (
            "python-backend",
            ["--set", "sequence=oldest", "--set", "max_batch_size=0"],
            "needs max_batch_size >= 1",
        ),
        (
            "python-backend",
            ["--set", "sequence=direct", "--set", "implicit_state=yes"],
            "python backend does not support implicit state",
        ),
        ("python-backend", ["--set", "implicit_state=yes"], "needs sequence batching"),
        ("python-backend", ["--set", "sequence=direct", "--set", "native=yes"], "native is a stateless"),
        (
            "cpp-backend",
            ["--set", "sequence=direct", "--input", "X:FP32:4", "--output", "Y:INT32:4"],
            "needs X's datatype and dims",
        ),
        (
            "cpp-backend",
            ["--set", "sequence=direct", "--input", "CORRID:FP32:4", "--output", "Y:FP32:4"],
            "control inputs and implicit state take these names",
        ),
        ("cpp-backend", ["--set", "sequence=direct", "--gpu"], "no CUDA kernel"),
        (
            "cpp-backend",
            ["--set", "sequence=direct", "--pattern", "bls"],
            "cannot wrap a framework or compose",
        ),
    ],
)
def test_a_sequence_model_it_cannot_generate_exits_2_before_anything_is_written(
    tmp_path, template, flags, fragment
):
    project = tmp_path / "p"
    result = run_tbgen("new", str(project), "-t", template, "--no-input", *flags)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in " ".join(result.stderr.split()), result.stderr
    assert not project.exists()


def test_a_sequence_model_is_named_accumulate_and_records_its_options(tmp_path):
    project = tmp_path / "p"
    result = run_tbgen(
        "new",
        str(project),
        "-t",
        "python-backend",
        "--no-input",
        "--set",
        "sequence=oldest",
        "--set",
        "correlation_id=string",
        "--set",
        "custom_metrics=yes",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = (project / "model_repository" / "accumulate" / "config.pbtxt").read_text()
    assert "oldest {" in config and "dynamic_batching" not in config
    # The 24.10 python backend refuses a padded string CORRID input: model.py reads request.correlation_id().
    assert "CONTROL_SEQUENCE_CORRID" not in config and "CONTROL_SEQUENCE_START" in config
    toml = (project / "tbgen.toml").read_text()
    assert 'sequence = "oldest"' in toml and 'correlation_id = "string"' in toml
    from triton_backend_gen.project import load_project

    assert load_project(project).models[0].metrics == ("requests_process_latency_ns", "execution_batch_size")
