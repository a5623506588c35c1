"""Refuse answers that pattern=bls or a batching strategy cannot serve (plain cookiecutter gets them checked here
too)."""

import re
import sys

PATTERN = "{{ cookiecutter.pattern }}"
FRAMEWORK = "{{ cookiecutter.framework }}"
SELECTOR = {{ cookiecutter.selector|tojson }}
CALLEES = {{ cookiecutter.callees|tojson }}
MODEL = {{ cookiecutter.model_name|tojson }}
{%- if cookiecutter.signature.inputs|default([]) %}
INPUTS = {{ cookiecutter.signature.inputs|map(attribute='name')|list|tojson }}
TENSORS = INPUTS + {{ cookiecutter.signature.outputs|map(attribute='name')|list|tojson }}
{%- else %}
INPUTS = {{ [cookiecutter.input0_name, cookiecutter.input1_name]|tojson }}
TENSORS = INPUTS + {{ [cookiecutter.output0_name, cookiecutter.output1_name]|tojson }}
{%- endif %}
# The batching strategy (batching/<model>/): Triton refuses one beside sequence batching, and it decides the
# batches of a model that batches.
STRATEGY = "{{ cookiecutter.batch_strategy }}"
SEQUENCE = "{{ cookiecutter.sequence }}"
MAX_BATCH_SIZE = {{ cookiecutter.max_batch_size|int }}
BATCH_INPUT = {{ cookiecutter.batch_input|tojson }}

problems = []
if PATTERN == "bls":
    names = [name.strip() for name in CALLEES.split(",") if name.strip()]
    if FRAMEWORK != "none":
        problems.append(f"pattern=bls routes requests to other models and wraps no framework (got framework={FRAMEWORK})")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", SELECTOR) or SELECTOR in TENSORS:
        problems.append(f"selector {SELECTOR!r} must be a tensor name (letters, digits, _) of its own")
    if not names or any(not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name) for name in names):
        problems.append(f"callees must be model names separated by commas (got {CALLEES!r})")
    if MODEL in names:
        problems.append(f"model {MODEL!r} cannot call itself: it is among the callees")
    if {{ cookiecutter.custom_metrics|default(false) }}:
        problems.append("custom_metrics are published by the backend's own executor; the BLS router answers in its "
                        "callees' callbacks and has none (drop --set custom_metrics=yes, or use pattern=none)")
if STRATEGY != "none":
    if SEQUENCE != "none":
        problems.append(f"batch_strategy={STRATEGY}: Triton refuses a batching strategy beside sequence batching "
                        f"(got sequence={SEQUENCE})")
    if MAX_BATCH_SIZE < 1:
        problems.append(f"batch_strategy={STRATEGY} decides the dynamic batches of a model that batches: "
                        "set max_batch_size to 1 or more")
    if PATTERN != "none":
        problems.append(f"batch_strategy={STRATEGY}: a BLS router forwards each request; its callees batch")
    if BATCH_INPUT and BATCH_INPUT not in INPUTS:
        problems.append(f"batch_input {BATCH_INPUT!r} must name one of the model's inputs ({', '.join(INPUTS)})")
for problem in problems:
    print(f"ERROR: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
