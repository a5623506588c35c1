import pytest

from triton_backend_gen.errors import AnswerError
from triton_backend_gen.scaffold import naming
from triton_backend_gen.signature import check_tensor_name


@pytest.mark.parametrize("name", ["my-backend", "a", "Backend_2", "x-y_z9"])
def test_valid_project_names(name):
    assert naming.check_project_name(name) == name


@pytest.mark.parametrize("name", ["", "9lives", "-x", "_x", "my backend", "a/b", "ünï", "a.b"])
def test_invalid_project_names_name_the_rule(name):
    with pytest.raises(AnswerError) as err:
        naming.check_project_name(name)
    assert "starting with a letter" in err.value.message
    assert "my-backend" in err.value.hint


@pytest.mark.parametrize("name", ["my_backend", "addsub", "b2", "a" * 64])
def test_valid_backend_names(name):
    assert naming.check_backend_name(name) == name


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("My_backend", "lowercase identifier"),
        ("my-backend", "lowercase identifier"),
        ("2fast", "lowercase identifier"),
        ("_x", "lowercase identifier"),
        ("a" * 65, "longer than 64"),
        ("namespace", "C++ keyword"),
        ("class", "C++ keyword"),
        ("python", "already used by a Triton backend"),
        ("onnxruntime", "already used by a Triton backend"),
        ("vllm", "already used by a Triton backend"),
        ("identity", "already used by a Triton backend"),
        ("repeat", "already used by a Triton backend"),
        ("square", "already used by a Triton backend"),
    ],
)
def test_invalid_backend_names(name, fragment):
    with pytest.raises(AnswerError) as err:
        naming.check_backend_name(name)
    assert fragment in err.value.message
    assert "--backend-name" in err.value.hint


@pytest.mark.parametrize("name", ["add_sub", "model.v2", "1st-model"])
def test_valid_model_names(name):
    assert naming.check_model_name(name) == name


@pytest.mark.parametrize("name", ["", "..", "a/b", "-x", "a b"])
def test_invalid_model_names(name):
    with pytest.raises(AnswerError):
        naming.check_model_name(name)


@pytest.mark.parametrize("name", ["INPUT0", "_x", "out_1"])
def test_valid_tensor_names(name):
    assert check_tensor_name(name) == name


@pytest.mark.parametrize("name", ["0IN", "a-b", "", "a b"])
def test_invalid_tensor_names(name):
    with pytest.raises(AnswerError):
        check_tensor_name(name)
