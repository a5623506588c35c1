"""tbgen: scaffold, build, test and benchmark custom backends for NVIDIA Triton Inference Server."""

__version__ = "0.1.0"
