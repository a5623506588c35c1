"""Remove the files that the chosen options do not use (an explicit list per option)."""

import shutil
from pathlib import Path

# Files that exist only for the CUDA kernels (`gpu` answered true, no framework, no pattern).
GPU_ONLY_FILES = ["src/kernels.cu", "src/kernels.h"]
# Files of each framework (`framework` answered libtorch or opencv-dnn).
FRAMEWORK_FILES = {
    "libtorch": ["cmake/libraries/torch.cmake", "export_model.py"],
    "opencv-dnn": ["cmake/libraries/opencv_dnn.cmake", "export_model.py"],
}
FRAMEWORK = "{{ cookiecutter.framework }}"
PATTERN = "{{ cookiecutter.pattern }}"
# The model's batching strategy (batch_strategy single, volume, tokens or custom): batching/.
BATCH_STRATEGY = "{{ cookiecutter.batch_strategy }}"
BATCHING_DIR = "batching"

# The unit tests of src/compute.cc (tests/unit/): a framework's PreProcess/PostProcess and a BLS router's
# Route run only around the models they call, in a server.
UNIT_TEST_DIR = "tests/unit"

if FRAMEWORK != "none" or PATTERN != "none":
    shutil.rmtree(UNIT_TEST_DIR)
if BATCH_STRATEGY == "none":
    shutil.rmtree(BATCHING_DIR)
if not {{ cookiecutter.gpu }} or FRAMEWORK != "none" or PATTERN != "none":
    for relative in GPU_ONLY_FILES:
        Path(relative).unlink()
kept = set(FRAMEWORK_FILES.get(FRAMEWORK, []))
for relative in sorted({f for files in FRAMEWORK_FILES.values() for f in files} - kept):
    Path(relative).unlink()
libraries = Path("cmake/libraries")
if not any(libraries.iterdir()):
    libraries.rmdir()  # `tbgen add library` creates it again
