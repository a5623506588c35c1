{%- set np_dtype = {'FP32': 'float32', 'FP16': 'float16', 'INT32': 'int32', 'INT64': 'int64'}[cookiecutter.dtype] -%}
"""Numpy reference of the example computation of model "{{ cookiecutter.model_name }}".

tests/ and `tbgen test` compare the backend's responses with ``compute(make_inputs(...))``. When you
change the computation in src/{{ cookiecutter.backend_name }}.cc, change ``compute`` to match.
"""

from __future__ import annotations

import numpy as np

INPUT0, INPUT1 = "{{ cookiecutter.input0_name }}", "{{ cookiecutter.input1_name }}"
OUTPUT0, OUTPUT1 = "{{ cookiecutter.output0_name }}", "{{ cookiecutter.output1_name }}"
DTYPE = np.{{ np_dtype }}
TRITON_DTYPE = "{{ cookiecutter.dtype }}"
DIMS = ({{ cookiecutter.dims.split(',') | map('trim') | join(', ') }},)  # without the batch dimension
MAX_BATCH_SIZE = {{ cookiecutter.max_batch_size }}
VARIABLE_DIM_SIZE = 4  # the size make_inputs gives a -1 dim

{% if cookiecutter.dtype == 'FP16' -%}
# The backend computes in float and rounds once to half; allow about two half-precision ulps.
TOLERANCE = {"rtol": 2e-3, "atol": 1e-3}
{%- elif cookiecutter.dtype == 'FP32' -%}
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}
{%- else -%}
TOLERANCE = {"rtol": 0, "atol": 0}
{%- endif %}


def input_shape(batch_size: int | None) -> tuple[int, ...]:
    """The shape of each input of one request (``batch_size`` None when the model does not batch)."""
    dims = tuple(VARIABLE_DIM_SIZE if d == -1 else d for d in DIMS)
    return dims if batch_size is None else (batch_size, *dims)


def make_inputs(batch_size: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for one request."""
    rng = np.random.default_rng(seed)
    shape = input_shape(batch_size)
{%- if cookiecutter.dtype in ['FP32', 'FP16'] %}
    return {name: rng.uniform(-10.0, 10.0, shape).astype(DTYPE) for name in (INPUT0, INPUT1)}
{%- else %}
    return {name: rng.integers(-1000, 1000, shape, dtype=DTYPE) for name in (INPUT0, INPUT1)}
{%- endif %}


def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The expected outputs for ``inputs``."""
    a, b = inputs[INPUT0], inputs[INPUT1]
    return {OUTPUT0: (a + b).astype(DTYPE), OUTPUT1: (a - b).astype(DTYPE)}
