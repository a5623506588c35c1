{%- import "signature.j2" as sig with context -%}
{%- if sig.add_sub -%}
"""numpy reference of the {{ cookiecutter.model_name }} model: the responses it must stream.

Used by the project's tests and by tbgen's smoke tests (see tbgen's docs/templates.md): for one request,
``responses(inputs)`` lists the responses in order, each ``{"OUT": [IN[i]], "IDX": [i]}``; the stream then
ends with an empty response flagged final.
"""

from __future__ import annotations

import numpy as np

# The outputs are integers: compared exactly.
TOLERANCE = {"rtol": 0, "atol": 0}

# Elements of IN in the example request, and the DELAY/WAIT it uses (milliseconds).
EXAMPLE_LENGTH = 4
EXAMPLE_DELAY_MS = 10
EXAMPLE_WAIT_MS = 5
MAX_DELAY_MS = 10000  # the longest DELAY (per element) and WAIT the model accepts


def make_inputs(batch_size: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for one request. The model has max_batch_size 0, so ``batch_size`` must be None."""
    if batch_size is not None:
        raise ValueError(f"{{ cookiecutter.model_name }} has max_batch_size 0: batch_size must be None, got {batch_size}")
    rng = np.random.default_rng(seed)
    return {
        "IN": rng.integers(-1000, 1000, size=EXAMPLE_LENGTH, dtype=np.int32),
        "DELAY": np.full(EXAMPLE_LENGTH, EXAMPLE_DELAY_MS, dtype=np.uint32),
        "WAIT": np.array([EXAMPLE_WAIT_MS], dtype=np.uint32),
    }


def no_response_inputs(batch_size: int | None = None) -> dict[str, np.ndarray]:
    """A request that streams no response (an empty IN): the model sends the final flag alone."""
    return {**make_inputs(batch_size), "IN": np.zeros(0, dtype=np.int32), "DELAY": np.zeros(0, dtype=np.uint32)}


def responses(inputs: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The non-final responses the model sends for ``inputs``, in order."""
    values = np.asarray(inputs["IN"], dtype=np.int32).reshape(-1)
    delays = np.asarray(inputs["DELAY"]).reshape(-1)
    if delays.size != values.size:
        raise ValueError(f"DELAY must have one element per element of IN ({values.size}), got {delays.size}")
    if (delays > MAX_DELAY_MS).any() or np.asarray(inputs["WAIT"]).max() > MAX_DELAY_MS:
        raise ValueError(f"DELAY and WAIT must be at most {MAX_DELAY_MS} ms: the model refuses the request")
    return [
        {"OUT": np.array([value], dtype=np.int32), "IDX": np.array([index], dtype=np.uint32)}
        for index, value in enumerate(values)
    ]
{%- else -%}
{% include "reference.py.j2" %}
{%- endif %}
