"""Load and validate Triton model configurations (``config.pbtxt``).

A config is parsed with the real ``ModelConfig`` schema (tritonclient's ``model_config_pb2`` and protobuf's
text format), then checked for what Triton would refuse at load time (severity ``error``) and for what
users regret later (severity ``warning``). Every finding names the field, says how to fix it and carries
the line of the offending field when it can be found in the text.

protobuf and tritonclient are imported when first used (triton_backend_gen.lazy), so importing this package
(and running ``tbgen --help``) stays cheap.

Layout: ``expectations`` (what the project expects of a model; a check reports findings.Finding), ``parsing``
(reading and parsing a config, explaining parse errors), ``locate`` (line numbers of fields in the text),
``checks`` (the semantic checks, one module per theme), ``tree`` (every config of a project or model
repository, with what the project expects).
"""

from triton_backend_gen.model_config.checks import check_config
from triton_backend_gen.model_config.expectations import CONFIG_FILE, Expectations
from triton_backend_gen.model_config.parsing import load_model_config
from triton_backend_gen.model_config.tree import find_configs, release_rule_findings, validate_tree

__all__ = [
    "CONFIG_FILE",
    "Expectations",
    "check_config",
    "find_configs",
    "load_model_config",
    "release_rule_findings",
    "validate_tree",
]
