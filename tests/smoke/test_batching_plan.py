"""The decisions behind the "batching strategy" check (smoke.batching), the answers that refuse a strategy,
and the config rules `tbgen validate` applies to a strategy's parameters; the check itself runs against real
servers in tests/templates/test_batching_strategies.py."""

from __future__ import annotations

import types

import numpy as np
import pytest
from conftest import run_tbgen

from triton_backend_gen.errors import AnswerError
from triton_backend_gen.model_config import Expectations, check_config
from triton_backend_gen.scaffold.answers import resolve_answers
from triton_backend_gen.scaffold.templates import get_template
from triton_backend_gen.smoke.batching import (
    BatchSoFar,
    RequestSize,
    batch_sizes_to_send,
    plan_batches,
    request_size,
    strategy_rule,
)
from triton_backend_gen.smoke.model import ModelSpec, TensorSpec

NO_REFERENCE = types.SimpleNamespace()


def sizes(*batches: int, item_bytes: int = 128, item_elements: int = 16) -> list[RequestSize]:
    return [RequestSize(b, b * item_bytes, b * item_elements) for b in batches]


def test_single_runs_every_request_alone():
    rule = strategy_rule("single", {}, NO_REFERENCE)
    assert plan_batches(sizes(1, 1, 2, 1, 8), 8, rule) == [1, 1, 2, 1, 8]


def test_volume_closes_a_batch_at_the_request_that_would_pass_the_budget():
    rule = strategy_rule("volume", {"MAX_BATCH_VOLUME_BYTES": "512"}, NO_REFERENCE)  # 4 items of 128 B
    # [1,1,2] fills 512 B; [1] then 8 would pass max_batch_size; 8 (1 KiB) runs alone; [1,2,1].
    assert plan_batches(sizes(1, 1, 2, 1, 8, 1, 2, 1), 8, rule) == [4, 1, 8, 4]


def test_tokens_counts_the_elements_of_one_input():
    rule = strategy_rule("tokens", {"MAX_BATCH_ELEMENTS": "10"}, NO_REFERENCE)
    requests = [RequestSize(1, 0, n) for n in (7, 3, 1, 9, 2)]
    assert plan_batches(requests, 8, rule) == [2, 2, 1]


def test_custom_is_judged_by_the_reference_mirror():
    reference = types.SimpleNamespace(
        include_request=lambda batch, request, parameters: (
            batch.requests < int(parameters["MAX_BATCH_REQUESTS"])
        )
    )
    rule = strategy_rule("custom", {"MAX_BATCH_REQUESTS": "2"}, reference)
    assert plan_batches(sizes(1, 1, 1, 1, 1), 8, rule) == [2, 2, 1]
    with pytest.raises(AssertionError, match="include_request"):
        strategy_rule("custom", {}, NO_REFERENCE)


def test_a_missing_limit_is_named():
    with pytest.raises(AssertionError, match="MAX_BATCH_ELEMENTS"):
        strategy_rule("tokens", {}, NO_REFERENCE)


def test_the_batch_so_far_sums_what_it_holds():
    batch = BatchSoFar().plus(RequestSize(2, 10, 4)).plus(RequestSize(1, 5, 2))
    assert batch == BatchSoFar(requests=2, batch_size=3, bytes=15, elements=6)


def test_request_sizes_count_bytes_as_triton_does():
    spec = ModelSpec(
        "m",
        8,
        False,
        True,
        (TensorSpec("TEXT", "BYTES", (-1,)), TensorSpec("X", "FP16", (3,)), TensorSpec("B", "BF16", (2,))),
        (TensorSpec("Y", "FP32", (1,)),),
    )
    inputs = {
        "TEXT": np.array([[b"ab", b""], [b"xyz", b"q"]], dtype=np.object_),
        "X": np.zeros((2, 3), np.float16),
        "B": np.zeros((2, 2), np.float32),  # BF16 travels as float32 arrays, 2 bytes on the wire
    }
    # BYTES: 4-byte length before each element; FP16 2 bytes; BF16 2 bytes.
    assert request_size(spec, inputs, "TEXT") == RequestSize(2, (4 * 4 + 6) + 12 + 8, 4)
    assert request_size(spec, inputs, "X").elements == 6
    assert (
        request_size(spec, inputs, "LANG").elements == 0
    )  # an optional input left out counts none, as in C++


def test_the_checks_requests_stay_within_max_batch_size():
    assert batch_sizes_to_send(1) == [1] * 8
    assert max(batch_sizes_to_send(8)) == 8 and len(batch_sizes_to_send(8)) == 8


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"batch_strategy": "volume", "sequence": "direct"}, "sequence batching"),
        ({"batch_strategy": "single", "max_batch_size": 0}, "max_batch_size 0"),
        ({"batch_strategy": "tokens", "dynamic_batching": False}, "dynamic_batching is off"),
        ({"batch_strategy": "tokens", "batch_input": "NOPE"}, "the model's inputs are INPUT0, INPUT1"),
        ({"batch_strategy": "volume", "batch_input": "INPUT0"}, "volume counts none"),
        ({"batch_limit": 64}, "batch_strategy is none"),
    ],
)
def test_answers_refuse_a_strategy_the_model_cannot_take(given, words):
    for template in ("cpp-backend", "python-backend"):
        with pytest.raises(AnswerError, match=words):
            resolve_answers(get_template(template), given)


REQUESTS = '{ key: "MAX_BATCH_REQUESTS" value { string_value: "2" } }'
CONFIG = """
name: "m"
backend: "python"
max_batch_size: 8
input [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] }} ]
output [ {{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{extra}
"""


@pytest.mark.parametrize(
    ("extra", "strategy", "words"),
    [
        ('dynamic_batching { }\nparameters { key: "MAX_BATCH_VOLUME_BYTES" value { string_value: "abc" } }',
         "volume", "must be a positive integer"),
        ('dynamic_batching { }\nparameters { key: "MAX_BATCH_ELEMENTS" value { string_value: "0" } }',
         "tokens", "must be a positive integer"),
        ("dynamic_batching { }", "tokens", "reads the parameter MAX_BATCH_ELEMENTS"),
        ('dynamic_batching { }\nparameters { key: "MAX_BATCH_ELEMENTS" value { string_value: "9" } }\n'
         'parameters { key: "BATCH_ELEMENTS_INPUT" value { string_value: "TEXTS" } }', "tokens", "no input"),
        (f"parameters {REQUESTS}", "custom", "no dynamic_batching"),
        (f"sequence_batching {{ }}\nparameters {REQUESTS}", "custom", "beside a sequence batcher"),
    ],
)  # fmt: skip
def test_validate_knows_the_strategy_parameters(tmp_path, extra, strategy, words):
    config = tmp_path / "m" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text(CONFIG.format(extra=extra))
    errors = [f.message for f in check_config(config, Expectations(batch_strategy=strategy)) if f.failed]
    assert any(words in message for message in errors), errors


def test_validate_judges_the_parameters_only_of_a_model_tbgen_gave_a_strategy(tmp_path):
    config = tmp_path / "m" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text(
        CONFIG.format(extra='parameters { key: "MAX_BATCH_ELEMENTS" value { string_value: " 2" } }')
    )
    assert not [f for f in check_config(config, Expectations()) if "MAX_BATCH_ELEMENTS" in f.message]
    judged = [f.message for f in check_config(config, Expectations(batch_strategy="tokens")) if f.failed]
    assert any('MAX_BATCH_ELEMENTS " 2" must be a positive integer' in m for m in judged), judged


def test_validate_passes_a_wired_strategy(tmp_path):
    config = tmp_path / "m" / "config.pbtxt"
    (config.parent / "1").mkdir(parents=True)
    (config.parent / "1" / "model.py").write_text("")
    limit = 'parameters { key: "MAX_BATCH_ELEMENTS" value { string_value: "18446744073709551615" } }'
    named = 'parameters { key: "BATCH_ELEMENTS_INPUT" value { string_value: "TEXT" } }'
    config.write_text(CONFIG.format(extra=f"dynamic_batching {{ }}\n{limit}\n{named}"))
    assert not [f for f in check_config(config, Expectations(batch_strategy="tokens")) if f.failed]


@pytest.mark.parametrize("template", ["cpp-backend", "python-backend"])
def test_tbgen_new_refuses_a_sequence_model_with_a_strategy(tmp_path, template):
    result = run_tbgen(
        "new", str(tmp_path / "p"), "-t", template, "--no-input", "--set", "sequence=direct", "--set",
        "batch_strategy=volume",
    )  # fmt: skip
    assert result.returncode == 2 and "sequence batching" in result.stderr, result.stderr
    assert not (tmp_path / "p").exists()
