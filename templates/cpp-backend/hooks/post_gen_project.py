"""Remove the files that the chosen options do not use (an explicit list per option)."""

from pathlib import Path

# Files that exist only for the CUDA build (`gpu` answered true).
GPU_ONLY_FILES = ["src/kernels.cu", "src/kernels.h"]

if not {{ cookiecutter.gpu }}:
    for relative in GPU_ONLY_FILES:
        Path(relative).unlink()
