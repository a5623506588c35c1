"""The recommendation written into config.pbtxt: only the fields that changed are rewritten, in place; the
user's comments and everything else stay; what was not there is appended, what the recommendation drops is
removed; the result parses to the recommended configuration; --apply keeps the old file beside it."""

from __future__ import annotations

from triton_backend_gen.model_config.parsing import parse_text
from triton_backend_gen.tune.config_file import apply_config, config_diff, tuned_text
from triton_backend_gen.tune.space import OFF, Batching, Settings, configure, settings_of

CONFIG = """\
# My model: keep this comment.
name: "m"
backend: "python"
max_batch_size: 8  # clients send up to 8 rows
input [
  {
    name: "IN"   # a bracket in a string: "]" must not end the list
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
# the batcher
dynamic_batching { }
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
parameters { key: "note" value: { string_value: "a { brace" } }
"""


def test_only_the_changed_fields_are_rewritten_and_the_rest_kept():
    before = parse_text(CONFIG)
    settings = Settings(2, 16, Batching(True, 500, True))
    text = tuned_text(CONFIG, before, configure(before, settings), "instances 2")
    assert settings_of(parse_text(text)) == settings
    assert parse_text(text).input == before.input and parse_text(text).parameters == before.parameters
    for kept in ("# My model: keep this comment.", 'name: "IN"   # a bracket', "# the batcher", "a { brace"):
        assert kept in text
    assert text.count("instance_group") == 1 and "count: 2" in text
    assert text.splitlines()[1] == "# Tuned by `tbgen tune`: instances 2"
    # The fields keep their places: instance_group still after dynamic_batching, parameters last.
    assert text.index("dynamic_batching") < text.index("instance_group") < text.index("parameters")


def test_dynamic_batching_off_removes_its_block_and_on_adds_one():
    before = parse_text(CONFIG)
    off = tuned_text(CONFIG, before, configure(before, Settings(1, 8, OFF)), "batching off")
    assert "dynamic_batching" not in off and not parse_text(off).HasField("dynamic_batching")
    assert "# the batcher" in off  # a comment above it is the user's: kept
    without = parse_text(off)
    on = tuned_text(off, without, configure(without, Settings(1, 8, Batching(True, 100))), "batching on")
    assert parse_text(on).dynamic_batching.max_queue_delay_microseconds == 100


def test_apply_keeps_the_old_file_under_a_free_name_and_the_diff_shows_the_change(tmp_path):
    path = tmp_path / "config.pbtxt"
    path.write_text(CONFIG)
    before = parse_text(CONFIG)
    text = tuned_text(CONFIG, before, configure(before, Settings(2, 8, Batching(True, 0))), "instances 2")
    diff = config_diff(path, text)
    assert "-    count: 1" in diff and "+  count: 2" in diff and "max_batch_size" not in diff
    first = apply_config(path, text)
    second = apply_config(path, text)
    assert first.name == "config.pbtxt.before-tune" and first.read_text() == CONFIG
    assert second.name == "config.pbtxt.before-tune.2" and second.read_text() == text
    assert path.read_text() == text
    assert not list(tmp_path.glob("*.partial"))


def test_fields_sharing_a_line_stay_and_the_result_is_always_the_recommendation():
    original = (
        'backend: "python" max_batch_size: 8  # two fields on a line\n'
        "dynamic_batching { } instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        'parameters < key: "k" value: < string_value: "v" > >'  # angle brackets, no final newline
    )
    before = parse_text(original)
    after = configure(before, Settings(2, 16, Batching(True, 500)))
    text = tuned_text(original, before, after, "instances 2, max_batch_size 16, batching 500us")
    assert parse_text(text) == after
    assert 'backend: "python"' in text and 'string_value: "v"' in text
