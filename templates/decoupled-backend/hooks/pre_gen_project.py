"""Refuse answers the decoupled template cannot serve (plain cookiecutter gets them checked here too)."""

import sys

LANGUAGE = "{{ cookiecutter.language }}"
SEQUENCE = "{{ cookiecutter.sequence }}"
IMPLICIT_STATE = {{ cookiecutter.implicit_state|default(false) }}
MAX_BATCH_SIZE = int("{{ cookiecutter.max_batch_size }}")
OWN_SIGNATURE = {{ 'True' if cookiecutter.signature.inputs|default([]) else 'False' }}

problems = []
if SEQUENCE == "none" and not OWN_SIGNATURE and MAX_BATCH_SIZE != 0:
    problems.append(f"the repeat example streams one request at a time: max_batch_size must be 0 (got {MAX_BATCH_SIZE})")
if SEQUENCE == "none" and IMPLICIT_STATE:
    problems.append("implicit_state keeps a sequence's state: it needs sequence=direct or oldest")
if IMPLICIT_STATE and LANGUAGE == "python":
    problems.append("the python backend has no implicit state: drop implicit_state or use language=cpp")
if SEQUENCE == "oldest" and MAX_BATCH_SIZE < 1:
    problems.append("the oldest strategy batches requests of several sequences: it needs max_batch_size >= 1")
for problem in problems:
    print(f"ERROR: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
