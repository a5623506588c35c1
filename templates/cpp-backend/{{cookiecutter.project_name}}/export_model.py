{#- cpp-backend's export_model.py, kept with a framework: writes the example
    model, with the framework's export_<framework>.py.j2. -#}
{%- set torch = cookiecutter.framework == 'libtorch' -%}
{%- set file = 'model.pt' if torch else 'model.onnx' -%}
"""Writes the example model that the backend serves:
model_repository/{{ cookiecutter.model_name }}/1/{{ file }}, {{ 'a TorchScript module' if torch else 'an ONNX graph for OpenCV DNN' }} computing what
reference.py computes.

    python3 export_model.py [--force]

{{ "It needs torch of libtorch's version (Debian/Ubuntu: python3-torch, beside\nlibtorch-dev)" if torch else "It needs onnx (pip install 'onnx<1.18')" }}; `tbgen new` ran it once. Your own model
replaces {{ file }}: it must take the inputs of config.pbtxt in their order
and return its outputs in theirs; then change reference.py to compute what it
computes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
{{ "from typing import Optional, Tuple\n\nimport torch" if torch else "\nimport onnx\nfrom onnx import TensorProto, helper" }}

MODEL_FILE = Path(__file__).resolve().parent / "model_repository" / "{{ cookiecutter.model_name }}" / "1" / "{{ file }}"
{%- include "export_libtorch.py.j2" if torch else "export_opencv-dnn.py.j2" %}

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
