{%- import "signature.j2" as sig with context -%}
{%- set torch = cookiecutter.framework == 'libtorch' -%}
{%- set file = 'model.pt' if torch else 'model.onnx' -%}
{%- set batching = cookiecutter.max_batch_size|int > 0 -%}
{%- set keywords = ['False', 'None', 'True', 'and', 'as', 'assert', 'async', 'await', 'break', 'class', 'continue',
    'def', 'del', 'elif', 'else', 'except', 'finally', 'for', 'from', 'global', 'if', 'import', 'in', 'is',
    'lambda', 'nonlocal', 'not', 'or', 'pass', 'raise', 'return', 'try', 'while', 'with', 'yield'] -%}
{%- macro arg(t) -%}{{ t.name ~ '_' if t.name in keywords else t.name }}{%- endmacro -%}
{%- set torch_types = {'BOOL': 'torch.bool', 'UINT8': 'torch.uint8', 'INT8': 'torch.int8', 'INT16': 'torch.int16',
    'INT32': 'torch.int32', 'INT64': 'torch.int64', 'FP16': 'torch.float16', 'BF16': 'torch.bfloat16',
    'FP32': 'torch.float32', 'FP64': 'torch.float64'} -%}
"""Writes the example model that the backend serves:
model_repository/{{ cookiecutter.model_name }}/1/{{ file }}, {{ 'a TorchScript module' if torch else 'an ONNX graph for OpenCV DNN' }} computing what
reference.py computes.

    python3 export_model.py [--force]

{%- if torch %}

It needs torch of libtorch's version (Debian/Ubuntu: python3-torch, beside
libtorch-dev); `tbgen new` ran it once.
{%- else %}

It needs onnx (pip install 'onnx<1.18'); `tbgen new` ran it once.
{%- endif %} Your own model
replaces {{ file }}: it must take the inputs of config.pbtxt in their order
and return its outputs in theirs; then change reference.py to compute what it
computes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
{%- if torch %}
from typing import Optional, Tuple

import torch
{%- else %}

import onnx
from onnx import TensorProto, helper
{%- endif %}

MODEL_FILE = Path(__file__).resolve().parent / "model_repository" / "{{ cookiecutter.model_name }}" / "1" / "{{ file }}"
{%- if torch %}


class Example(torch.nn.Module):
{%- if sig.add_sub %}
{%- set a, b = arg(sig.inputs[0]), arg(sig.inputs[1]) %}
    """{{ sig.outputs[0].name }} = {{ sig.inputs[0].name }} + {{ sig.inputs[1].name }}, {{ sig.outputs[1].name }} = {{ sig.inputs[0].name }} - {{ sig.inputs[1].name }}{{ ' (BOOL: both exclusive or)' if sig.inputs[0].datatype == 'BOOL' else '' }}."""

    def forward(self, {{ a }}: torch.Tensor, {{ b }}: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
{%- if sig.inputs[0].datatype == 'BOOL' %}
        return {{ a }} ^ {{ b }}, {{ a }} ^ {{ b }}
{%- else %}
        return {{ a }} + {{ b }}, {{ a }} - {{ b }}
{%- endif %}
{%- else %}
    """The placeholder of reference.py: per row, n = the number of non-zero input elements; every element of
    every output is n (a -1 in an output's dims has size 1)."""

    def forward(self, {% for t in sig.inputs %}{{ arg(t) }}: {{ 'Optional[torch.Tensor]' if t.optional else 'torch.Tensor' }}{{ ', ' if not loop.last }}{% endfor %}){% if sig.outputs|length > 1 %} -> Tuple[{% for t in sig.outputs %}torch.Tensor{{ ', ' if not loop.last }}{% endfor %}]{% else %} -> torch.Tensor{% endif %}:
{%- set first = sig.inputs|rejectattr('optional')|first %}
{%- if batching %}
        n = torch.zeros({{ arg(first) }}.shape[0], dtype=torch.int64)
{%- else %}
        n = torch.zeros((), dtype=torch.int64)
{%- endif %}
{%- for t in sig.inputs %}
{%- set count = '(' ~ arg(t) ~ ' != 0).reshape(' ~ arg(t) ~ '.shape[0], -1).sum(1)' if batching else '(' ~ arg(t) ~ ' != 0).sum()' %}
{%- if t.optional %}
        if {{ arg(t) }} is not None:
            n = n + {{ count }}
{%- else %}
        n = n + {{ count }}
{%- endif %}
{%- endfor %}
{%- set outs = [] %}
{%- for t in sig.outputs %}
{%- set dims = t.backend_dims|map('string')|map('replace', '-1', '1')|list %}
{%- set shape = dims|map('string')|join(', ') %}
{%- set ones = (['1'] * dims|length)|join(', ') %}
{%- if batching %}
{%- set value = 'n.reshape(-1' ~ (', ' ~ ones if ones else '') ~ ').expand(-1' ~ (', ' ~ shape if shape else '') ~ ')' %}
{%- else %}
{%- set value = 'n.reshape([' ~ ones ~ ']).expand([' ~ shape ~ '])' %}
{%- endif %}
{%- if t.datatype == 'BOOL' %}
{%- set _ = outs.append('(' ~ value ~ ' != 0)') %}
{%- else %}
{%- set _ = outs.append(value ~ '.to(' ~ torch_types[t.datatype] ~ ')') %}
{%- endif %}
{%- endfor %}
{%- if outs|length == 1 %}
        return {{ outs[0] }}.contiguous()
{%- else %}
        return (
{%- for value in outs %}
            {{ value }}.contiguous(),
{%- endfor %}
        )
{%- endif %}
{%- endif %}


def write(path: Path) -> None:
    torch.jit.script(Example()).save(str(path))
{%- else %}


def tensor(name: str, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def write(path: Path) -> None:
{%- if sig.add_sub %}
    """{{ sig.outputs[0].name }} = {{ sig.inputs[0].name }} + {{ sig.inputs[1].name }}, {{ sig.outputs[1].name }} = {{ sig.inputs[0].name }} - {{ sig.inputs[1].name }}."""
    nodes = [
        helper.make_node("Add", ["{{ sig.inputs[0].name }}", "{{ sig.inputs[1].name }}"], ["{{ sig.outputs[0].name }}"]),
        helper.make_node("Sub", ["{{ sig.inputs[0].name }}", "{{ sig.inputs[1].name }}"], ["{{ sig.outputs[1].name }}"]),
    ]
    initializers = []
{%- else %}
    """The placeholder of reference.py: per row, n = the number of non-zero input elements; every element of
    every output is n (a -1 in an output's dims has size 1)."""
    nodes, initializers = [], []
{%- for t in sig.inputs %}
    # n{{ loop.index0 }}: the non-zero elements of each row of {{ t.name }}, as a [rows, 1] column
    nodes += [
        helper.make_node("Abs", ["{{ t.name }}"], ["{{ t.name }}_abs"]),
        helper.make_node("Sign", ["{{ t.name }}_abs"], ["{{ t.name }}_nonzero"]),
        helper.make_node("Flatten", ["{{ t.name }}_nonzero"], ["{{ t.name }}_rows"], axis=1),
        helper.make_node("ReduceSum", ["{{ t.name }}_rows"], ["n{{ loop.index0 }}"], axes=[1], keepdims=1),
    ]
{%- endfor %}
{%- for t in sig.inputs[1:] %}
    nodes.append(helper.make_node("Add", ["n{{ loop.index - 1 }}", "n{{ loop.index }}"], ["n{{ loop.index }}_total"]))
{%- endfor %}
{%- set n = 'n' ~ (sig.inputs|length - 1) ~ ('_total' if sig.inputs|length > 1 else '') %}
{%- for t in sig.outputs %}
{%- set dims = t.backend_dims|map('string')|map('replace', '-1', '1')|list %}
    # {{ t.name }}: n broadcast to [rows{{ ', ' if dims }}{{ dims|join(', ') }}]
    initializers += [
        helper.make_tensor("{{ t.name }}_column", TensorProto.INT64, [{{ dims|length + 1 }}], [-1{% for d in dims %}, 1{% endfor %}]),
        helper.make_tensor("{{ t.name }}_shape", TensorProto.INT64, [{{ dims|length + 1 }}], [1{% for d in dims %}, {{ d }}{% endfor %}]),
    ]
    nodes += [
        helper.make_node("Reshape", ["{{ n }}", "{{ t.name }}_column"], ["{{ t.name }}_n"]),
        helper.make_node("Expand", ["{{ t.name }}_n", "{{ t.name }}_shape"], ["{{ t.name }}"]),
    ]
{%- endfor %}
{%- endif %}
{%- set batch = ['"batch"'] if batching else [] %}
    graph = helper.make_graph(
        nodes, "{{ cookiecutter.model_name }}",
        [
{%- for t in sig.inputs %}
            tensor("{{ t.name }}", [{{ (batch + t.backend_dims|map('string')|map('replace', '-1', '"d' ~ loop.index0 ~ '"')|list)|join(', ') }}]),
{%- endfor %}
        ],
        [
{%- for t in sig.outputs %}
            tensor("{{ t.name }}", [{{ (batch + t.backend_dims|map('string')|map('replace', '-1', '"o' ~ loop.index0 ~ '"')|list)|join(', ') }}]),
{%- endfor %}
        ],
        initializers,
    )
    # Opset 12 keeps ReduceSum's axes an attribute, which OpenCV 4.6 reads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
{%- endif %}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help=f"replace an existing {MODEL_FILE.name}")
    args = parser.parse_args()
    if MODEL_FILE.exists() and not args.force:
        print(f"{MODEL_FILE} exists; left as it is (--force replaces it)")
        return 0
    MODEL_FILE.parent.mkdir(parents=True, exist_ok=True)
    partial = MODEL_FILE.with_name(MODEL_FILE.name + ".partial")
    write(partial)
    partial.replace(MODEL_FILE)
    print(f"wrote {MODEL_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
