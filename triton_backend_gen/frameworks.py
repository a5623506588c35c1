"""The inference libraries a cpp-backend project can wrap (``--framework``), as facts; nothing here runs.

A framework is, in a generated project: a ``cmake/libraries/<name>.cmake`` that finds and links it, a
``FrameworkModel`` in src/ (the template piece ``framework_<name>.cc.j2``) that loads the model file and runs
a batch, and ``export_model.py``, which writes an example model computing what reference.py computes. Adding
one means adding those three pieces and an entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

from triton_backend_gen.errors import AnswerError
from triton_backend_gen.signature import Signature

NONE = "none"


@dataclass(frozen=True)
class Framework:
    name: str  # the `framework` answer
    title: str
    model_file: (
        str  # the default file in <model>/<version>/ (config.pbtxt's default_model_filename overrides)
    )
    python_module: str  # what export_model.py imports
    python_package: str  # how to get a Python that has it
    dev_packages: tuple[str, ...]  # Debian/Ubuntu packages with the C++ headers and libraries
    datatypes: tuple[str, ...]  # the tensor datatypes it takes and returns
    optional_inputs: bool  # whether a model input may be left out


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "libtorch",
            "LibTorch (TorchScript)",
            "model.pt",
            "torch",
            "Debian's python3-torch (the same version as libtorch-dev), or pip install torch==<libtorch's "
            "version>",
            ("libtorch-dev",),
            ("BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16", "FP32", "FP64"),
            optional_inputs=True,
        ),
        Framework(
            "opencv-dnn",
            "OpenCV DNN (ONNX)",
            "model.onnx",
            "onnx",
            "pip install 'onnx<1.18' (a newer onnx needs numpy 2, which Triton 2.51's python stub cannot "
            "use)",
            ("libopencv-dnn-dev",),
            ("FP32",),
            optional_inputs=False,
        ),
    )
}
CHOICES = (NONE, *FRAMEWORKS)


def framework(name: str) -> Framework | None:
    """The framework ``name`` (None for "none")."""
    return FRAMEWORKS.get(name)


def check_signature(name: str, signature: Signature, *, own: bool, batching: bool) -> None:
    """AnswerError when ``name`` cannot serve ``signature`` (a datatype it has no tensor type for, an optional
    input it cannot leave out), naming the tensor and the fix. ``own``: the user's signature, not the add/sub
    example's."""
    chosen = FRAMEWORKS.get(name)
    if chosen is None:
        return
    _check_datatypes(chosen, signature)
    optional = [t.name for t in signature.inputs if t.optional]
    if optional and not chosen.optional_inputs:
        raise AnswerError(
            f"{chosen.title} models take every input: {', '.join(optional)} cannot be optional.",
            "Drop :optional from those inputs.",
        )
    if name == "opencv-dnn" and own:
        _check_opencv_example(signature, batching)


def _check_datatypes(chosen: Framework, signature: Signature) -> None:
    """AnswerError for the first tensor whose datatype ``chosen`` has no tensor type for."""
    for tensor in (*signature.inputs, *signature.outputs):
        if tensor.datatype not in chosen.datatypes:
            raise AnswerError(
                f"{chosen.title} has no tensor type for {tensor.datatype} (tensor {tensor.name}); it takes "
                f"{', '.join(chosen.datatypes)}.",
                f"Declare {tensor.name} with one of those datatypes, e.g. --set "
                f"dtype={chosen.datatypes[-1]}, or drop --set framework=... and write the computation in "
                "Compute().",
            )


def _check_opencv_example(signature: Signature, batching: bool) -> None:
    """AnswerError unless the OpenCV DNN example model can be exported for the user's own ``signature``: it
    needs a batch dimension and tensors of one fixed dimension each."""
    # What OpenCV 4.6 imports of the placeholder graph (Abs, Sign, ReduceSum, Expand) correctly.
    shaped = [
        t.name for t in (*signature.inputs, *signature.outputs) if len(t.backend_dims) != 1 or -1 in t.dims
    ]
    if not batching or shaped:
        raise AnswerError(
            "The OpenCV DNN example model for a signature of your own needs a batch dimension "
            "(max_batch_size > 0) and tensors of one fixed dimension each"
            + (f"; {', '.join(shaped)} {'is' if len(shaped) == 1 else 'are'} not." if shaped else "."),
            "Declare e.g. --input X:FP32:16 --output Y:FP32:4 with --set max_batch_size=8, or use "
            "--framework libtorch (any shape), or keep the add/sub example and drop in your own model.onnx.",
        )
