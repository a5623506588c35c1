"""Median wall time of `tbgen new` (whole process) next to plain `cookiecutter --no-input`, same template.

    python bench/new.py [--runs 15] [--template python-backend]

Prints one line per tool and their ratio; the target is tbgen no slower than cookiecutter.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def time_command(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--template", default="python-backend")
    args = parser.parse_args()

    commands = {
        "cookiecutter": [sys.executable, "-m", "cookiecutter", str(TEMPLATES / args.template), "--no-input"],
        "tbgen new": [
            sys.executable,
            "-m",
            "triton_backend_gen",
            "new",
            "my-backend",
            "-t",
            args.template,
            "--no-input",
        ],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "HOME": scratch}  # cookiecutter's replay files stay out of the real home
        for _ in range(args.runs):
            for name, argv in commands.items():  # interleaved, so drift affects both alike
                work = Path(tempfile.mkdtemp(dir=scratch))
                samples[name].append(time_command(argv, work, env))
                shutil.rmtree(work)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"template: {args.template}, runs: {args.runs}, python {sys.version.split()[0]}")
    for name, median in medians.items():
        print(f"{name:>14}: median {median * 1000:7.1f} ms  (min {min(samples[name]) * 1000:.1f} ms)")
    print(f"{'ratio':>14}: tbgen / cookiecutter = {medians['tbgen new'] / medians['cookiecutter']:.2f}")


if __name__ == "__main__":
    main()
