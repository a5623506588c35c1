{%- set c = cookiecutter -%}
{%- set mbs = c.max_batch_size|int -%}
{%- set np_type = {'FP32': 'float32', 'FP16': 'float16', 'INT32': 'int32', 'INT64': 'int64'}[c.dtype] -%}
"""Numpy reference of model "{{ c.model_name }}": what the served model must answer.

The tests (and `tbgen test`) send make_inputs() to the server and compare its outputs with compute(),
within TOLERANCE for floating-point outputs. When you change compute() in the model, change it here too.
"""

from __future__ import annotations

import numpy as np

INPUT0 = "{{ c.input0_name }}"
INPUT1 = "{{ c.input1_name }}"
OUTPUT0 = "{{ c.output0_name }}"
OUTPUT1 = "{{ c.output1_name }}"

DTYPE = np.{{ np_type }}
DIMS = ({{ c.dims|string|replace(' ', '')|replace(',', ', ') }},)  # without the batch dimension; -1 = any size
MAX_BATCH_SIZE = {{ mbs }}
VARIABLE_DIM_SIZE = 3  # the size make_inputs() gives a -1 dimension

# np.testing.assert_allclose arguments for floating-point outputs (0 for integers: exact).
{%- if c.dtype == 'FP16' %}
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}
{%- elif c.dtype == 'FP32' %}
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}
{%- else %}
TOLERANCE = {"rtol": 0, "atol": 0}
{%- endif %}


def make_inputs(batch_size: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for one request; batch_size None when the model does not batch."""
    shape = tuple(VARIABLE_DIM_SIZE if dim == -1 else dim for dim in DIMS)
    if batch_size is not None:
        shape = (batch_size, *shape)
    rng = np.random.default_rng(seed)
    if np.issubdtype(DTYPE, np.integer):
        values = [rng.integers(-1000, 1000, size=shape) for _ in range(2)]
    else:
        values = [rng.uniform(-100.0, 100.0, size=shape) for _ in range(2)]
    return {INPUT0: values[0].astype(DTYPE), INPUT1: values[1].astype(DTYPE)}


def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs the model must return for ``inputs``."""
    in0, in1 = inputs[INPUT0], inputs[INPUT1]
    return {OUTPUT0: in0 + in1, OUTPUT1: in0 - in1}
