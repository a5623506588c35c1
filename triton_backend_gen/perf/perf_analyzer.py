"""Drive Triton's perf_analyzer, the load generator Triton users already know, and read its CSV.

The ``tritonclient==2.51.0`` manylinux1 wheel ships a working perf_analyzer 2.51 beside the Python that has
tritonclient. It needs ``libb64.so.0d`` and ``libcudart.so.12`` names on the library path: the nvidia-pytriton
wheel bundles both files under hashed names, so tbgen links them under those names in a directory of its own.
Inputs go in as ``--input-data`` JSON (base64 of the raw tensor bytes, so every dtype is exact), made from the
project's ``reference.make_inputs``.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from triton_backend_gen.discovery import WHEEL_LIBS
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.smoke.clients import bfloat16_bytes

np = lazy_module("numpy")

EXECUTABLE = "perf_analyzer"
NEEDED_LIBRARIES = {"libb64.so.0d": "libb64-*.so.0d", "libcudart.so.12": "libcudart-*.so.12*"}


def find_perf_analyzer() -> Path | None:
    """perf_analyzer beside this Python (tritonclient's wheel puts it there), else on PATH."""
    beside = Path(sys.executable).parent / EXECUTABLE
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(EXECUTABLE)
    return Path(found) if found else None


def library_dir(dest: Path) -> Path | None:
    """``dest`` holding the two names perf_analyzer needs, linked to the nvidia-pytriton wheel's files; None
    when the wheel is not installed."""
    libs = next((Path(p) / WHEEL_LIBS for p in sys.path if (Path(p) / WHEEL_LIBS).is_dir()), None)
    if libs is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    for name, pattern in NEEDED_LIBRARIES.items():
        source = next(iter(sorted(libs.glob(pattern))), None)
        if source is None:
            return None
        link = dest / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(source)
    return dest


def input_data(inputs: Mapping[str, np.ndarray], datatypes: Mapping[str, str], batched: bool) -> dict:
    """perf_analyzer's --input-data JSON for one request's ``inputs`` (one sample, without the batch dim, when
    the model batches: perf_analyzer repeats it ``-b`` times). BYTES go as their strings (``content``), BF16
    as its 16-bit patterns, the rest as their raw bytes."""
    entry = {}
    for name, array in inputs.items():
        sample = np.ascontiguousarray(array[0] if batched else array)
        datatype = datatypes.get(name)
        if datatype == "BYTES" or sample.dtype == np.object_:
            strings = [v if isinstance(v, str) else bytes(v).decode("utf-8", "replace") for v in sample.flat]
            entry[name] = {"content": strings, "shape": list(sample.shape)}
            continue
        raw = bfloat16_bytes(sample) if datatype == "BF16" else sample.tobytes()
        entry[name] = {"b64": base64.b64encode(raw).decode(), "shape": list(sample.shape)}
    return {"data": [entry]}


# perf_analyzer's own message when the windows of a level never agreed within --stability-percentage.
UNSTABLE = "Failed to obtain stable measurement"


def command(
    executable: Path,
    model: str,
    url: str,
    protocol: str,
    concurrency: int,
    *,
    data_file: Path,
    csv_file: Path,
    batch_size: int,
    measurement_ms: int,
    streaming: bool,
    stability_percentage: int = 100,
    max_trials: int = 3,
) -> list[str]:
    """One perf_analyzer run at one concurrency level (three windows that agree within
    ``stability_percentage``, in at most ``max_trials`` windows)."""
    args = [
        str(executable),
        "-m",
        model,
        "-u",
        url,
        "-i",
        protocol,
        f"--concurrency-range={concurrency}:{concurrency}",
        f"--measurement-interval={measurement_ms}",
        f"--input-data={data_file}",
        "-f",
        str(csv_file),
        f"--stability-percentage={stability_percentage}",
        f"--max-trials={max_trials}",
    ]
    if batch_size > 1:
        args += ["-b", str(batch_size)]
    if streaming:
        args.append("--streaming")
    return args


def parse_csv(text: str) -> dict[str, float]:
    """The one row of perf_analyzer's CSV (-f) as {column: value}; times are in microseconds."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("perf_analyzer wrote no measurement")
    return {key.strip(): float(value) for key, value in rows[-1].items() if key and value not in (None, "")}


def write_input_data(
    inputs: Mapping[str, np.ndarray], datatypes: Mapping[str, str], batched: bool, path: Path
) -> Path:
    path.write_text(json.dumps(input_data(inputs, datatypes, batched)))
    return path
