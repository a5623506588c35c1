"""Load and validate Triton model configurations (``config.pbtxt``).

A config is parsed with the real ``ModelConfig`` schema (tritonclient's ``model_config_pb2`` and protobuf's
text format), then checked for what Triton would refuse at load time (severity ``error``) and for what
users regret later (severity ``warning``). Every finding names the field, says how to fix it and carries
the line of the offending field when it can be found in the text.

protobuf and tritonclient are imported inside the functions that need them, so importing this package
(and running ``tbgen --help``) stays cheap.

Layout: ``findings`` (what a check reports), ``parsing`` (reading and parsing a config, explaining parse
errors), ``locate`` (line numbers of fields in the text), ``checks`` (the semantic checks, one module per
theme), ``tree`` (every config of a project or model repository, with what the project expects).
"""

from triton_backend_gen.model_config.checks import check_config
from triton_backend_gen.model_config.findings import CONFIG_FILE, ERROR, WARNING, Expectations, Finding
from triton_backend_gen.model_config.parsing import load_model_config
from triton_backend_gen.model_config.tree import find_configs, validate_tree

__all__ = [
    "CONFIG_FILE",
    "ERROR",
    "WARNING",
    "Expectations",
    "Finding",
    "check_config",
    "find_configs",
    "load_model_config",
    "validate_tree",
]
