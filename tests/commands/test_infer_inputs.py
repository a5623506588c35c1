"""`tbgen infer` builds every input of any signature: given ones in their declared datatype (BF16 and BYTES
included), the others from reference.make_inputs, optional ones only when it makes them."""

import numpy as np
import pytest

from triton_backend_gen.commands.infer import build_inputs
from triton_backend_gen.errors import UsageError

METADATA = {
    "name": "m",
    "inputs": [
        {"name": "TEXT", "datatype": "BYTES"},
        {"name": "W", "datatype": "BF16"},
        {"name": "LANG", "datatype": "BYTES"},
    ],
}
CONFIG = {"max_batch_size": 0, "input": [{"name": "TEXT"}, {"name": "W"}, {"name": "LANG", "optional": True}]}


class Reference:
    @staticmethod
    def make_inputs(batch_size, seed=0):
        assert batch_size is None
        return {"TEXT": np.array([b"made"], dtype=object), "W": np.ones(2, np.float32)}


def test_given_inputs_take_their_declared_datatypes():
    inputs = build_inputs(METADATA, CONFIG, {"TEXT": ["h\u00e9"], "W": [1.5, 2]}, None)
    assert inputs["TEXT"].dtype == np.object_ and inputs["TEXT"].tolist() == ["h\u00e9"]
    assert inputs["W"].dtype == np.float32 and inputs["W"].tolist() == [1.5, 2.0]
    assert "LANG" not in inputs


def test_missing_inputs_come_from_the_reference_and_optional_ones_may_stay_missing():
    inputs = build_inputs(METADATA, CONFIG, {"W": [3]}, Reference())
    assert inputs["TEXT"].tolist() == [b"made"] and inputs["W"].tolist() == [3.0]
    assert "LANG" not in inputs


def test_a_required_input_without_a_value_is_a_usage_error():
    with pytest.raises(UsageError, match="No value for input TEXT"):
        build_inputs(METADATA, CONFIG, {"W": [3]}, None)
