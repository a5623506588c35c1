{#- cpp-backend's reference.py: the BLS router's (pattern=bls) here, every other
    model's in reference.py.j2. -#}
{%- if cookiecutter.pattern == 'bls' -%}
{%- import "signature.j2" as sig with context -%}
"""numpy reference of model "{{ cookiecutter.model_name }}", a BLS router: what the served model must answer.

Each request names a model in its {{ cookiecutter.selector }} input ({{ '[batch, 1]: the first row names the model of the\nwhole request' if cookiecutter.max_batch_size|int > 0 else '[1]' }}) and is answered with what that model answers for the other inputs. So compute()
hands the inputs to the named model's own reference, references/<model>.py (loaded from there on first
use: edit a callee's reference and this one follows), and make_inputs() makes a request for one of
CALLEES, chosen by the seed.

tests/ and `tbgen test` send make_inputs() to the server and compare its outputs with compute(), within
TOLERANCE for floating-point outputs. When you change the routing (Route in src/compute.cc), change
compute() here to match.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np

SELECTOR = "{{ cookiecutter.selector }}"
CALLEES = {{ cookiecutter.callees|split_names|pytuple }}  # the models make_inputs names, in turn by seed
MAX_BATCH_SIZE = {{ cookiecutter.max_batch_size|int }}
# name: (datatype, dims without the batch dimension (-1 = any size), optional), as config.pbtxt declares them
INPUTS = {
    SELECTOR: ("BYTES", (1,), False),
{%- for t in sig.inputs %}
    "{{ t.name }}": ("{{ t.datatype }}", {{ t.dims|pytuple }}, {{ t.optional }}),
{%- endfor %}
}
OUTPUTS = {
{%- for t in sig.outputs %}
    "{{ t.name }}": ("{{ t.datatype }}", {{ t.dims|pytuple }}),
{%- endfor %}
}
{%- if sig.add_sub %}
INPUT0, INPUT1 = "{{ sig.inputs[0].name }}", "{{ sig.inputs[1].name }}"
OUTPUT0, OUTPUT1 = "{{ sig.outputs[0].name }}", "{{ sig.outputs[1].name }}"
{%- endif %}
TOLERANCE = {{ tolerance(sig.outputs) }}
REFERENCES = Path(__file__).resolve().parent / "references"


@cache
def callee_reference(model: str) -> ModuleType:
    """references/<model>.py, the reference of the model that ``model`` names."""
    path = REFERENCES / f"{model}.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: model {model!r} has no reference to compute its answers")
    spec = importlib.util.spec_from_file_location(f"_{{ cookiecutter.backend_name }}_callee_{model}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs(batch_size: int | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for one request: CALLEES[seed % len(CALLEES)] in every row of the selector, and
    that model's make_inputs for the rest."""
    model = CALLEES[seed % len(CALLEES)]
    shape = (1,) if batch_size is None else (batch_size, 1)
    selector = np.full(shape, model.encode(), dtype=np.object_)
    return {SELECTOR: selector, **callee_reference(model).make_inputs(batch_size, seed)}


def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The expected outputs for ``inputs``: what the model named by the selector's first element computes."""
    first = np.asarray(inputs[SELECTOR]).flat[0]
    model = first.decode() if isinstance(first, bytes) else str(first)
    return callee_reference(model).compute({name: value for name, value in inputs.items() if name != SELECTOR})
{% else -%}
{% include "reference.py.j2" %}
{% endif -%}
