"""The template registry and the contract each cookiecutter.json keeps (docs/templates.md)."""

import json

import pytest
from conftest import TEMPLATES

from triton_backend_gen import versions
from triton_backend_gen.errors import UsageError
from triton_backend_gen.scaffold.templates import get_template, list_templates

NAMES = ["cpp-backend", "decoupled-backend", "python-backend"]
COMMON = ["project_name", "backend_name", "model_name", "triton_version"]


@pytest.mark.parametrize("name", NAMES)
def test_cookiecutter_json_keeps_the_contract(name):
    spec = json.loads((TEMPLATES / name / "cookiecutter.json").read_text())
    assert list(spec)[:4] == COMMON
    assert spec["_tbgen_template"] == name
    assert spec["_tbgen_description"]
    visible = [k for k in spec if not k.startswith("_")]
    assert set(spec["__prompts__"]) == set(visible), "every variable has a prompt"
    # the defaults that come from the release matrix are the newest release's
    assert spec["triton_version"] == versions.newest().container
    if "cuda_architectures" in spec:
        assert spec["cuda_architectures"] == ";".join(versions.newest().cuda_architectures)


def test_registry_reads_options_in_file_order_with_types_and_choices():
    cpp = get_template("cpp-backend")
    assert [o.key for o in cpp.options][:4] == COMMON
    dtype = cpp.option("dtype")
    assert dtype.choices[:2] == ("FP32", "FP16") and len(dtype.choices) == 14 and dtype.default == "FP32"
    assert cpp.option("signature").kind is dict
    assert cpp.option("gpu").kind is bool and cpp.option("max_batch_size").kind is int
    assert cpp.option("dims").kind is str
    assert cpp.option("dtype").help == "Tensor data type"
    assert cpp.version and cpp.description
    assert [t.name for t in list_templates()] == NAMES


def test_unknown_template_lists_the_known_ones():
    with pytest.raises(UsageError) as err:
        get_template("rust-backend")
    assert err.value.exit_code == 2
    for name in NAMES:
        assert name in err.value.hint
