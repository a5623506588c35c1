"""Time `tbgen build` of a rendered cpp-backend: a cold configure+build (ccache off), a no-op rebuild and a
rebuild after touching the backend's one source file.

    python bench/build.py [--triton-version 24.10] [--ccache]

Triton's sources come from tbgen's source cache (the figures are for an offline build); without the
release there the script says so and exits 1. Each figure is the wall time of the whole `tbgen build`
process. --ccache leaves the compiler cache on (CCACHE_DIR as set), so that the first build reuses cached
objects: the test suite's smoke run, whose first figure is no cold build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tbgen(*args: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"tbgen {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return seconds


def main() -> None:
    from triton_backend_gen import versions
    from triton_backend_gen.toolchain.sources import cached_sources, sources_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton-version", default="24.10")
    parser.add_argument(
        "--ccache",
        action="store_true",
        help="keep the compiler cache on (a smoke run: the first build is then not cold)",
    )
    args = parser.parse_args()
    release = versions.resolve(args.triton_version)
    if cached_sources(release.branch) is None:
        sys.exit(
            f"Triton {release.branch} sources are not in {sources_dir()}: fill the cache first (tbgen deps)."
        )

    with tempfile.TemporaryDirectory(prefix="tbgen-bench-build-") as scratch:
        project = Path(scratch) / "bench-backend"
        env = dict(os.environ) if args.ccache else {**os.environ, "CCACHE_DISABLE": "1"}
        tbgen(
            "new",
            str(project),
            "-t",
            "cpp-backend",
            "--no-input",
            "--triton-version",
            release.container,
            env=env,
        )
        source = project / "src" / "bench_backend.cc"
        if not source.is_file():  # touching a file the build does not compile would time a no-op rebuild
            sys.exit(
                f"{source.relative_to(project)} is not in the rendered project: the template changed, "
                "update bench/build.py"
            )
        cold = tbgen("build", str(project), env=env)
        noop = tbgen("build", str(project), env=env)
        source.touch()
        one_file = tbgen("build", str(project), env=env)

    first = "first configure + build" if args.ccache else "cold configure + build"
    ccache = "on" if args.ccache else "disabled"
    print(f"cpp-backend, Triton {release.branch}, {os.cpu_count()} CPUs, ccache {ccache}")
    for label, seconds in ((first, cold), ("no-op rebuild", noop), ("one-file rebuild", one_file)):
        print(f"  {label:<24}: {seconds:7.1f} s")


if __name__ == "__main__":
    main()
