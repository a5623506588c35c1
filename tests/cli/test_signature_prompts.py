"""On a terminal, `tbgen new` asks for the model's tensors one per line; a bad line is explained and asked
again, an empty first input keeps the template's example."""

from __future__ import annotations

import pytest
from rich.prompt import Prompt

from triton_backend_gen import signature
from triton_backend_gen.cli import scaffolding as cli
from triton_backend_gen.scaffold import get_template, resolve_answers


def scripted(monkeypatch, lines: list[str]) -> list[str]:
    asked: list[str] = []
    answers = iter(lines)

    def ask(prompt, *args, **kwargs):
        asked.append(str(prompt))
        return next(answers)

    monkeypatch.setattr(Prompt, "ask", ask)
    return asked


def test_tensors_are_asked_in_a_loop(monkeypatch, capsys):
    asked = scripted(
        monkeypatch,
        [
            "TEXT:BYTES:1",
            "LANG:BYTE:1",
            "LANG:BYTES:1:optional",
            "",
            "LENGTH:INT32:1:optional",
            "LENGTH:INT32:1",
            "",
        ],
    )
    option = get_template("cpp-backend").option("signature")
    answer = cli.RichPrompter().ask(option, signature.EMPTY)
    assert signature.from_context(answer) == signature.from_flags(
        ["TEXT:BYTES:1", "LANG:BYTES:1:optional"], ["LENGTH:INT32:1"]
    )
    shown = capsys.readouterr().out
    assert "Unknown datatype 'BYTE'" in shown and "outputs cannot be optional" in shown
    assert asked[0].startswith("Input 1") and asked[4].startswith("Output 1")


def test_no_input_keeps_the_example(monkeypatch):
    scripted(monkeypatch, [""])
    assert (
        cli.RichPrompter().ask(get_template("cpp-backend").option("signature"), signature.EMPTY)
        == signature.EMPTY
    )


@pytest.mark.parametrize("template", ["cpp-backend", "python-backend"])
def test_a_signature_skips_the_examples_questions(monkeypatch, template):
    """With tensors of its own, the add/sub example's dtype, dims and tensor names are not asked."""

    class Prompter:
        def __init__(self):
            self.asked: list[str] = []

        def ask(self, option, default):
            self.asked.append(option.key)
            if option.key == "signature":
                return signature.from_flags(["A:FP32:1"], ["B:FP32:1"]).context()
            return default

        def show_error(self, error):  # pragma: no cover - no answer here is invalid
            raise AssertionError(error)

    prompter = Prompter()
    answers = resolve_answers(get_template(template), {"project_name": "p"}, prompter)
    assert answers["signature"]["inputs"][0]["name"] == "A"
    assert not {"dtype", "dims", "input0_name", "output1_name"} & set(prompter.asked)
    assert "max_batch_size" in prompter.asked
