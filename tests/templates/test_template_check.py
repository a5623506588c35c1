"""`tbgen templates check`: the whole matrix is clean, and each kind of defect in a rendered project is caught."""

import math

import pytest

from triton_backend_gen.scaffold import get_template
from triton_backend_gen.template_check import (
    check_rendered_project,
    check_templates,
    option_matrix,
)


def test_matrix_is_the_product_of_choices_and_booleans_plus_an_edge_variant():
    cpp = get_template("cpp-backend")
    variants = list(option_matrix(cpp))
    axes = [o for o in cpp.options if o.choices or o.kind is bool]
    assert {o.key for o in axes} == {"dtype", "gpu", "dynamic_batching"}
    assert len(variants) == math.prod(len(o.choices) or 2 for o in axes) + 1
    assert variants[-1] == {"max_batch_size": 0, "dims": "-1"}
    decoupled = list(option_matrix(get_template("decoupled-backend")))
    assert decoupled == [{"language": "cpp"}, {"language": "python"}]


@pytest.mark.slow
def test_every_template_variant_is_clean():
    report = check_templates()
    assert report.failures == []
    expected = sum(len(list(option_matrix(get_template(n)))) for n in ("cpp-backend", "python-backend", "decoupled-backend"))
    assert report.variants == expected
    assert report.files > report.variants * 10


@pytest.fixture
def rendered(render_template):
    return render_template("cpp-backend", gpu=True)


def test_a_clean_project_has_no_problems(rendered):
    assert check_rendered_project(rendered, get_template("cpp-backend")) == []


def test_unrendered_jinja_in_cpp_is_caught(rendered):
    kernels = rendered / "src" / "kernels.cu"
    kernels.write_text(kernels.read_text() + "\n// {{ cookiecutter.dtype }}\n")
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert any("src/kernels.cu" in p and "unrendered Jinja" in p for p in problems)


def test_python_that_does_not_compile_is_caught(rendered):
    (rendered / "reference.py").write_text("def broken(:\n")
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert any(p.startswith("reference.py does not compile") for p in problems)


def test_an_invalid_config_is_caught(rendered):
    config = next(rendered.glob("model_repository/*/config.pbtxt"))
    config.write_text(config.read_text().replace("max_batch_size", "max_batch_sise", 1))
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert any("config.pbtxt" in p for p in problems)


def test_a_project_file_naming_another_template_is_caught(rendered):
    toml = rendered / "tbgen.toml"
    toml.write_text(toml.read_text().replace('template = "cpp-backend"', 'template = "python-backend"'))
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert "tbgen.toml names template 'python-backend'" in problems
