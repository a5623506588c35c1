"""Refuse answers that a batching strategy cannot serve (plain cookiecutter gets them checked here too)."""

import sys

{%- if cookiecutter.signature.inputs|default([]) %}
INPUTS = {{ cookiecutter.signature.inputs|map(attribute='name')|list|tojson }}
{%- else %}
INPUTS = {{ [cookiecutter.input0_name, cookiecutter.input1_name]|tojson }}
{%- endif %}
# The batching strategy (batching/<model>/): Triton refuses one beside sequence batching, and it decides the
# batches of a model that batches.
STRATEGY = "{{ cookiecutter.batch_strategy }}"
SEQUENCE = "{{ cookiecutter.sequence }}"
MAX_BATCH_SIZE = {{ cookiecutter.max_batch_size|int }}
BATCH_INPUT = {{ cookiecutter.batch_input|tojson }}

problems = []
if STRATEGY != "none":
    if SEQUENCE != "none":
        problems.append(f"batch_strategy={STRATEGY}: Triton refuses a batching strategy beside sequence batching "
                        f"(got sequence={SEQUENCE})")
    if MAX_BATCH_SIZE < 1:
        problems.append(f"batch_strategy={STRATEGY} decides the dynamic batches of a model that batches: "
                        "set max_batch_size to 1 or more")
    if BATCH_INPUT and BATCH_INPUT not in INPUTS:
        problems.append(f"batch_input {BATCH_INPUT!r} must name one of the model's inputs ({', '.join(INPUTS)})")
for problem in problems:
    print(f"ERROR: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
