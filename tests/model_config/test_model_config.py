"""check_config, load_model_config, find_configs and validate_tree beyond the corpus: parse-error positions,
project expectations, model-directory rules, ensembles against the models they call, project trees."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import project_of

from triton_backend_gen.errors import ConfigError
from triton_backend_gen.findings import ERROR, WARNING, Finding
from triton_backend_gen.model_config import (
    Expectations,
    check_config,
    find_configs,
    load_model_config,
    validate_tree,
)

ADD_SUB = """\
name: "add_sub"
backend: "{backend}"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }}
]
instance_group [
  {{
    count: 1
    kind: {kind}
  }}
]
{extra}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def add_sub(tmp_path: Path, backend="my_backend", kind="KIND_CPU", extra="") -> Path:
    return write(tmp_path / "add_sub.pbtxt", ADD_SUB.format(backend=backend, kind=kind, extra=extra))


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]


def line_of(path: Path, needle: str) -> int:
    return next(n for n, text in enumerate(path.read_text().splitlines(), start=1) if needle in text)


# -- parsing


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        (
            'name: "m"\nbackend: "python"\n\nmax_batch: 4\n',
            4,
            1,
            'no field named "max_batch"; did you mean max_batch_size?',
        ),
        (
            'name: "m"\ninput [\n  {\n    name: "X"\n    data_type: FP32\n  }\n]\n',
            5,
            16,
            "did you mean TYPE_FP32?",
        ),
        ('name: "m"\ninput {\n  name: "X"\n  dims: [ 1, two ]\n}\n', 4, 14, "Couldn't parse integer"),
        (
            'name: "m"\nbackend: "python"\nmax_batch_size: 1\nmax_batch_size: 2\n',
            4,
            None,
            "set more than once",
        ),
    ],
)
def test_parse_errors_carry_line_and_column(tmp_path, text, line, column, fragment):
    path = write(tmp_path / "config.pbtxt", text)
    findings = check_config(path)
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.line, finding.severity) == (line, ERROR)
    assert fragment in finding.message
    if column is not None:
        assert f"column {column}:" in finding.message


def test_load_model_config_returns_the_proto(tmp_path):
    config = load_model_config(add_sub(tmp_path))
    assert config.name == "add_sub"
    assert config.max_batch_size == 8
    assert [t.name for t in config.input] == ["INPUT0", "INPUT1"]
    assert list(config.output[1].dims) == [16]


def test_load_model_config_raises_config_error_with_the_line(tmp_path):
    path = write(tmp_path / "config.pbtxt", 'name: "m"\nbackend: "python"\ndims: [ 1 ]\n')
    with pytest.raises(ConfigError) as err:
        load_model_config(path)
    assert f"{path}:3:" in err.value.message
    assert 'no field named "dims"' in err.value.message


def test_unreadable_config(tmp_path):
    missing = tmp_path / "nowhere" / "config.pbtxt"
    with pytest.raises(ConfigError):
        load_model_config(missing)
    (finding,) = check_config(missing)
    assert finding.severity == ERROR and finding.line is None
    assert "cannot read" in finding.message


def test_finding_text():
    assert (
        str(Finding(ERROR, "bad dims", path=Path("m/config.pbtxt"), line=7))
        == "m/config.pbtxt:7: error: bad dims"
    )
    assert (
        str(Finding(WARNING, "no version", path=Path("m/config.pbtxt")))
        == "m/config.pbtxt: warning: no version"
    )


def test_lines_in_repeated_blocks_and_angle_brackets(tmp_path):
    path = write(
        tmp_path / "m.pbtxt",
        """\
        name: "m"   # a comment with "name: \\"B\\"" in it
        backend: "python"
        max_batch_size: 2
        input { name: "A" data_type: TYPE_FP32 dims: 4 }
        input <
          name: 'B'
          data_type: TYPE_FP32
          dims: 0
        >
        output { name: "C" data_type: TYPE_FP32 dims: [ 4 ] }
        """,
    )
    (finding,) = check_config(path)
    assert finding.line == line_of(path, "dims: 0")
    assert 'input "B" has dims [ 0 ]' in finding.message


# -- what the project expects


def test_gpu_instance_in_a_project_without_gpu(tmp_path):
    path = add_sub(tmp_path, kind="KIND_GPU")
    assert check_config(path) == []  # nothing known about the project
    assert check_config(path, Expectations(gpu=True)) == []
    (finding,) = check_config(path, Expectations(gpu=False))
    assert finding.severity == ERROR
    assert finding.line == line_of(path, "kind: KIND_GPU")
    assert "built without GPU support" in finding.message and "--gpu" in finding.message


def test_gpus_listed_without_kind_in_a_project_without_gpu(tmp_path):
    path = add_sub(tmp_path, kind="KIND_AUTO\n    gpus: [ 0 ]")
    assert [f.message for f in check_config(path)] == []
    (finding,) = check_config(path, Expectations(gpu=False))
    assert "asks for GPUs" in finding.message


def test_gpu_instances_on_a_machine_without_gpu_are_predicted_to_fail(tmp_path):
    path = add_sub(tmp_path, kind="KIND_GPU")
    assert check_config(path, Expectations(gpus_visible=True)) == []
    (finding,) = check_config(path, Expectations(gpu=True, gpus_visible=False))
    assert finding.severity == WARNING  # the config may well be meant for a GPU machine
    assert finding.line == line_of(path, "kind: KIND_GPU")
    assert "no GPUs are available" in finding.message and "KIND_CPU" in finding.message
    assert check_config(add_sub(tmp_path), Expectations(gpus_visible=False)) == []


def test_gpus_visible_follows_cuda_visible_devices(monkeypatch):
    from triton_backend_gen.discovery import gpus_visible

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus_visible() is False
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    gpus = Path("/proc/driver/nvidia/gpus")
    listed = gpus.is_dir() and any(gpus.iterdir())
    assert gpus_visible() is (listed or any(Path("/dev").glob("nvidia[0-9]*")))


def test_decoupled_expected_but_missing(tmp_path):
    path = add_sub(tmp_path)
    (finding,) = check_config(path, Expectations(decoupled=True))
    assert finding.severity == ERROR
    assert "model_transaction_policy { decoupled: true }" in finding.message
    assert check_config(path, Expectations(decoupled=False)) == []


def test_decoupled_present_but_not_expected_is_a_warning(tmp_path):
    path = add_sub(tmp_path, extra="model_transaction_policy {\n  decoupled: true\n}")
    assert check_config(path, Expectations(decoupled=True)) == []
    (finding,) = check_config(path, Expectations(decoupled=False))
    assert finding.severity == WARNING
    assert finding.line == line_of(path, "decoupled: true")


def test_backend_must_match_the_project(tmp_path):
    path = add_sub(tmp_path, backend="other_backend")
    assert check_config(path, Expectations(backend="other_backend")) == []
    (finding,) = check_config(path, Expectations(backend="my_backend"))
    assert finding.severity == ERROR
    assert finding.line == line_of(path, 'backend: "other_backend"')
    assert 'backend: "my_backend"' in finding.message


def test_backend_derived_from_platform_or_model_file(tmp_path):
    onnx = write(tmp_path / "onnx.pbtxt", 'name: "onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n')
    (finding,) = check_config(onnx, Expectations(backend="my_backend"))
    assert 'backend "onnxruntime"' in finding.message

    model = tmp_path / "repo" / "py"
    config = write(
        model / "config.pbtxt", 'max_batch_size: 0\ninput { name: "X" data_type: TYPE_FP32 dims: 1 }\n'
    )
    write(model / "1" / "model.py", "")
    assert check_config(config, Expectations(backend="python")) == []  # Triton infers python from model.py
    (finding,) = check_config(config, Expectations(backend="my_backend"))
    assert 'backend "python" does not match' in finding.message


# -- the model's directory


def test_model_name_must_equal_its_directory(tmp_path):
    config = write(
        tmp_path / "repo" / "add_sub_v2" / "config.pbtxt",
        ADD_SUB.format(backend="b", kind="KIND_CPU", extra=""),
    )
    (config.parent / "1").mkdir()
    (finding,) = check_config(config)
    assert finding.line == 1
    assert 'name: "add_sub_v2"' in finding.message


def test_model_without_version_directory(tmp_path):
    config = write(
        tmp_path / "repo" / "add_sub" / "config.pbtxt", ADD_SUB.format(backend="b", kind="KIND_CPU", extra="")
    )
    (finding,) = check_config(config)
    assert finding.line is None and "no version directory" in finding.message
    (config.parent / "1").mkdir()
    assert check_config(config) == []


def test_python_model_needs_model_py(tmp_path):
    config = write(
        tmp_path / "repo" / "add_sub" / "config.pbtxt",
        ADD_SUB.format(backend="python", kind="KIND_CPU", extra=""),
    )
    (config.parent / "1").mkdir()
    (finding,) = check_config(config)
    assert "add_sub/1/" in finding.message and "model.py" in finding.message
    (config.parent / "1" / "model.py").write_text("")
    assert check_config(config) == []


ENSEMBLE = """\
name: "pipeline"
platform: "ensemble"
max_batch_size: {mbs}
input [
  {{ name: "A" data_type: {dtype} dims: [ 16 ] }},
  {{ name: "B" data_type: TYPE_FP32 dims: [ 16 ] }}
]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ {out_dim} ] }} ]
ensemble_scheduling {{
  step [
    {{
      model_name: "{model}"
      model_version: -1
      input_map {{ key: "INPUT0" value: "A" }}
      input_map {{ key: "{in1}" value: "B" }}
      output_map {{ key: "OUTPUT0" value: "SUM" }}
    }}
  ]
}}
"""


def ensemble_repo(tmp_path: Path, **values) -> Path:
    fields = {"mbs": 8, "dtype": "TYPE_FP32", "out_dim": 16, "model": "add_sub", "in1": "INPUT1", **values}
    repo = tmp_path / "repo"
    write(repo / "add_sub" / "config.pbtxt", ADD_SUB.format(backend="b", kind="KIND_CPU", extra=""))
    (repo / "add_sub" / "1").mkdir()
    config = write(repo / "pipeline" / "config.pbtxt", ENSEMBLE.format(**fields))
    (repo / "pipeline" / "1").mkdir()
    return config


def test_ensemble_consistent_with_its_step_model(tmp_path):
    assert check_config(ensemble_repo(tmp_path)) == []


@pytest.mark.parametrize(
    ("values", "needle", "fragment"),
    [
        ({"in1": "INPUT9"}, 'key: "INPUT9"', 'input_map key "INPUT9" is not an input of model "add_sub"'),
        (
            {"dtype": "TYPE_INT32"},
            None,
            'ensemble tensor "A" is TYPE_INT32 in ensemble "pipeline" but TYPE_FP32',
        ),
        ({"out_dim": 4}, 'key: "OUTPUT0"', 'ensemble tensor "SUM" has shape [ -1, 4 ]'),
        ({"mbs": 16}, "max_batch_size: 16", "ensemble max_batch_size 16 exceeds that of step 0"),
    ],
)
def test_ensemble_checked_against_its_step_model(tmp_path, values, needle, fragment):
    config = ensemble_repo(tmp_path, **values)
    matching = [f for f in errors(check_config(config)) if fragment in f.message]
    assert len(matching) == 1, [str(f) for f in check_config(config)]
    if needle:
        assert matching[0].line == line_of(config, needle)


def test_ensemble_must_map_required_inputs_but_not_optional_ones(tmp_path):
    config = ensemble_repo(tmp_path)
    step_model = config.parent.parent / "add_sub" / "config.pbtxt"
    step_model.write_text(
        step_model.read_text().replace(
            "dims: [ 16 ] }\n]", 'dims: [ 16 ] },\n  { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] }\n]', 1
        )
    )
    (finding,) = errors(check_config(config))
    assert 'input "EXTRA" of model "add_sub" is not mapped' in finding.message
    step_model.write_text(step_model.read_text().replace("dims: [ 1 ] }", "dims: [ 1 ] optional: true }"))
    assert check_config(config) == []


def test_ensemble_step_model_missing_from_the_repository(tmp_path):
    config = ensemble_repo(tmp_path, model="elsewhere")
    (finding,) = check_config(config)
    assert finding.severity == WARNING
    assert 'calls model "elsewhere", which is not in this model repository' in finding.message


# -- trees


def test_find_configs_sorted_skipping_hidden_and_build_trees(tmp_path):
    for model in ("zeta", "alpha", "mid/nested"):
        write(tmp_path / "model_repository" / model / "config.pbtxt", "")
    write(tmp_path / ".git" / "x" / "config.pbtxt", "")
    write(tmp_path / "build" / "CMakeCache.txt", "")
    write(tmp_path / "build" / "_deps" / "repo-backend-src" / "examples" / "m" / "config.pbtxt", "")
    found = find_configs(tmp_path)
    assert found == sorted(found)
    assert [p.parent.relative_to(tmp_path / "model_repository").as_posix() for p in found] == [
        "alpha",
        "mid/nested",
        "zeta",
    ]
    assert find_configs(found[0]) == [found[0]]


TBGEN_TOML = """\
[tbgen]
template = "{template}"
template_version = "0.1.0"

[project]
name = "my-backend"
backend = "my_backend"
language = "{language}"
triton_version = "24.10"
gpu = {gpu}
model_repository = "model_repository"

[[models]]
name = "add_sub"
decoupled = {decoupled}
{python_based}"""


def project(
    tmp_path: Path, *, template="cpp-backend", language="cpp", gpu=False, decoupled=False, python_based=False
) -> Path:
    root = tmp_path / "my-backend"
    write(
        root / "tbgen.toml",
        TBGEN_TOML.format(
            template=template,
            language=language,
            gpu=str(gpu).lower(),
            decoupled=str(decoupled).lower(),
            python_based='\n[python_based_backend]\ndir = "backends/my_backend"\n' if python_based else "",
        ),
    )
    return root


def add_model(root: Path, name="add_sub", **fields) -> Path:
    values = {"backend": "my_backend", "kind": "KIND_CPU", "extra": "", **fields}
    config = write(
        root / "model_repository" / name / "config.pbtxt",
        ADD_SUB.format(**values).replace('"add_sub"', f'"{name}"'),
    )
    (config.parent / "1").mkdir()
    return config


def test_validate_tree_clean_cpp_project(tmp_path):
    root = project(tmp_path)
    add_model(root)
    assert validate_tree(root, project_of(root)) == []
    assert (
        validate_tree(root / "model_repository", project_of(root / "model_repository")) == []
    )  # tbgen.toml is found above the path


def test_validate_tree_applies_the_project_expectations(tmp_path):
    root = project(tmp_path, gpu=False, decoupled=True)
    config = add_model(root, backend="someone_else", kind="KIND_GPU")
    messages = sorted(f.message for f in errors(validate_tree(root, project_of(root))))
    assert len(messages) == 3
    assert any("built without GPU support" in m for m in messages)
    assert any('does not match the project\'s backend "my_backend"' in m for m in messages)
    assert any("decoupled: true" in m for m in messages)
    assert all(f.path == config for f in validate_tree(root, project_of(root)))


def test_validate_tree_gpu_project_accepts_gpu_instances(tmp_path):
    root = project(tmp_path, gpu=True)
    add_model(root, kind="KIND_GPU")
    assert validate_tree(root, project_of(root)) == []
    (finding,) = validate_tree(root, project_of(root), gpus_visible=False)
    assert finding.severity == WARNING and "shows no GPU" in finding.message


def test_validate_tree_python_project_expects_the_python_backend(tmp_path):
    root = project(tmp_path, template="python-backend", language="python")
    config = add_model(root, backend="python")
    (config.parent / "1" / "model.py").write_text("")
    assert validate_tree(root, project_of(root)) == []
    config.write_text(config.read_text().replace('backend: "python"', 'backend: "my_backend"'))
    (finding,) = validate_tree(root, project_of(root))
    assert 'backend: "python"' in finding.message


def test_validate_tree_python_based_backend_expects_the_project_backend(tmp_path):
    root = project(tmp_path, template="python-backend", language="python", python_based=True)
    add_model(root, backend="my_backend")
    assert validate_tree(root, project_of(root)) == []


def test_validate_tree_checks_models_outside_tbgen_toml_without_expectations(tmp_path):
    root = project(tmp_path, gpu=False)
    add_model(root)
    extra = add_model(root, name="extra", backend="onnxruntime", kind="KIND_GPU")
    assert (
        validate_tree(root, project_of(root)) == []
    )  # "extra" is not the project's model: its GPU use is its own business
    extra.write_text(extra.read_text().replace("dims: [ 16 ]", "dims: [ ]", 1))
    (finding,) = validate_tree(root, project_of(root))
    assert finding.path == extra and "empty dims" in finding.message


def test_validate_tree_without_a_project(tmp_path):
    config = add_model(tmp_path, name="a")  # tmp_path/model_repository/a, no tbgen.toml anywhere
    assert validate_tree(tmp_path, project_of(tmp_path)) == []
    config.write_text(config.read_text().replace("kind: KIND_CPU", "kind: KIND_CPU\n    gpus: [ 0 ]"))
    (finding,) = validate_tree(tmp_path, project_of(tmp_path))
    assert "lists gpus" in finding.message


def test_expectations_apply_only_inside_the_project_model_repository(tmp_path):
    root = project(tmp_path, gpu=False)
    add_model(root)
    # A model of the same name elsewhere in the project (a test fixture, say) is not the project's model.
    fixture = write(
        root / "tests" / "fixtures" / "add_sub" / "config.pbtxt",
        ADD_SUB.format(backend="onnxruntime", kind="KIND_GPU", extra=""),
    )
    (fixture.parent / "1").mkdir()
    assert validate_tree(root, project_of(root)) == []


def test_check_config_on_a_relative_path(tmp_path, monkeypatch):
    config = add_model(tmp_path)
    monkeypatch.chdir(config.parent)
    assert check_config(Path("config.pbtxt")) == []
    assert validate_tree(Path(".")) == []
