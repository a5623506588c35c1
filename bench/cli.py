"""Median wall time of `tbgen --help` and `tbgen --version` (whole process) next to a bare Python start, and
which slow third-party modules `tbgen --help` imported (none is the goal: they load where they are used).

    python bench/cli.py [--runs 15]

Prints one line per command and the goal: `tbgen --help` under 0.7 s on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

GOAL_S = 0.7
SLOW_MODULES = (
    "numpy",
    "docker",
    "tritonclient",
    "grpc",
    "google.protobuf",
    "cookiecutter",
    "jinja2",
    "yaml",
    "kubernetes_validate",
    "jsonschema",
)
PROBE = (
    "import sys\nfrom triton_backend_gen.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n"
    f"    pass\nprint('slow:', ','.join(m for m in {SLOW_MODULES!r} if m in sys.modules))\n"
)


def median_seconds(argv: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tbgen --version": [sys.executable, "-m", "triton_backend_gen", "--version"],
        "tbgen --help": [sys.executable, "-m", "triton_backend_gen", "--help"],
    }
    medians = {name: median_seconds(argv, args.runs) for name, argv in commands.items()}
    probe = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    imported = next(line for line in probe.stdout.splitlines() if line.startswith("slow:")).removeprefix(
        "slow:"
    )
    print(f"runs: {args.runs}, python {sys.version.split()[0]}")
    for name, median in medians.items():
        print(f"{name:>16}: median {median * 1000:7.1f} ms")
    verdict = "met" if medians["tbgen --help"] < GOAL_S else "MISSED"
    print(f"{'goal':>16}: tbgen --help under {GOAL_S * 1000:.0f} ms: {verdict}")
    print(f"{'slow imports':>16}: {imported.strip() or 'none'}")


if __name__ == "__main__":
    main()
