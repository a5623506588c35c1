"""What the device is, how it is called, and what it provides: the facts both halves share."""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu-check"  # the entry point; the subcommands run in the device's Python

CARRY_NAME = ".gpu-check"
CARRY = REPO / CARRY_NAME
MANIFEST = "manifest.json"
LIMIT_BYTES = 64 * 2**20  # the working tree and the carried paths that travel, together
DEVICE_PYTHON = "3.12"  # /opt/torch/.venv/bin/python3 there (Ubuntu 24.04's 3.12.3)
DEVICE_GLIBC_MINOR = 39  # Ubuntu 24.04: wheels up to manylinux_2_39 run there
RUN_BUDGET_S = 450  # the run ends its steps by then and writes its report
DEVICE_TIMEOUT_S = 540  # the device call's limit: the budget, the report and a margin
DEVICE_COMMAND = "PYTHONUNBUFFERED=1 python3 scripts/gpu-check run"
DEVICE_CALL = f'run: command="{DEVICE_COMMAND}"  carry=["{CARRY_NAME}"]  timeout_s={DEVICE_TIMEOUT_S}'
USAGE = f"""\
Here (no GPU needed; pip reaches its configured index): .venv/bin/python scripts/gpu-check prepare
On a machine with a GPU, the `device` tool's call (the working tree and {CARRY_NAME}/ travel):
  {DEVICE_CALL}
The report comes back as $OUT/gpu-check.md, $OUT/gpu-check.json and $OUT/gpu-check-logs.tar.gz."""

# Packages of tbgen's runtime closure that the device's image has (its package list names them) and that are
# not carried: numpy is the torch image's 2.x (a 1.x wheel would shadow it and costs 18 MB), the others are
# compiled and large, and any recent version serves tbgen.
DEVICE_PROVIDES = {
    "numpy": "the device's torch image has numpy 2.x (tbgen's numpy<2 pin is for the python stub, which "
    "cpp-backend projects do not use); numpy 1.x would shadow it",
    "ml-dtypes": "the device's image has it (jax)",
    "aiohttp": "the device's image has it (tritonclient.http.aio only)",
    "aiosignal": "the device's image has it (aiohttp)",
    "aiohappyeyeballs": "the device's image has it (aiohttp)",
    "attrs": "the device's image has it (aiohttp)",
    "frozenlist": "the device's image has it (aiohttp)",
    "multidict": "the device's image has it (aiohttp)",
    "propcache": "the device's image has it (aiohttp)",
    "yarl": "the device's image has it (aiohttp)",
    "pyyaml": "the device's image has it",
    "pygments": "the device's image has it (rich)",
    "tzdata": "the device's image has it (arrow)",
}

# tbgen's runtime requirements the run has no use for (neither downloaded nor their closure): imported
# only by the commands that draw reports, which the GPU check does not run.
NOT_NEEDED_THERE = {
    "matplotlib": "draws the reports of `tbgen tune` and `tbgen bench --report`; the run makes none"
}

# The two projects the run renders: the add/sub example with its CUDA kernel, and the LibTorch wrapper.
PROJECTS = {
    "cpp-backend": ("gpu-add-sub", ("--gpu",)),
    "libtorch": ("torch-add-sub", ("--gpu", "--framework", "libtorch")),
}
BENCH_SECONDS = "2s"
BENCH_CONCURRENCY = "1,16"

PASS, FAIL, SKIP = "pass", "FAIL", "skip"


class CheckError(Exception):
    """What stops `prepare` (or a step of `run`): a message and the way out."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tail_lines(text: str, count: int) -> str:
    return "\n".join(text.strip().splitlines()[-count:])
