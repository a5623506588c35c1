"""Save-to-verdict time of `tbgen dev` against what users did before it (`tbgen build && tbgen test` after
each edit), for a python model and for a one-file C++ change; the time of `tbgen test --unit` of a python
model.

    python bench/dev.py [--runs 5] [--triton-version 24.10] [--work-dir DIR]

Each run edits the user's file (python: model_repository/add_sub/1/compute.py; C++: src/compute.cc) with a
change that keeps the answers (a real recompile every time: a new constant, which the compiler cache has not
seen), then waits for the verdict line `tbgen dev` prints; the same edit is then timed as `tbgen build` and
`tbgen test` processes, and, for C++, as the incremental build alone (`cmake --build`, what the compile of
the edit costs). Figures are medians. The goals (README): python save-to-verdict at most 1.5 s; C++ at most
the incremental build plus 1 s; `tbgen test --unit` of a python model under 0.5 s, tbgen's start included.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PYTHON_GOAL_S = 1.5
CPP_OVER_BUILD_GOAL_S = 1.0
UNIT_GOAL_S = 0.5
VERDICT = "verdict: "
EDITS = {
    "python-backend": ("model_repository/add_sub/1/compute.py", "\nBENCH_EDIT = {n}\n"),
    "cpp-backend": ("src/compute.cc", "\n[[maybe_unused]] static const int kBenchEdit{n} = {n};\n"),
}


def tbgen_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "triton_backend_gen", *args]


def seconds_of(argv: list[str], cwd: Path) -> float:
    """Wall time of a process that must succeed."""
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


class DevSession:
    """`tbgen dev` in a project, its output read line by line (off a terminal: a line per event)."""

    def __init__(self, project: Path) -> None:
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.process = subprocess.Popen(
            tbgen_argv("dev"),
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put((time.perf_counter(), line.rstrip()))

    def verdict(self, timeout: float = 300) -> tuple[float, str]:
        """(when, the lines up to it) of the next verdict; exits when the session ends or ``timeout`` passes
        first."""
        deadline = time.perf_counter() + timeout
        seen = []
        while time.perf_counter() < deadline:
            try:
                when, line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            seen.append(line)
            if line.startswith(VERDICT):
                return when, "\n".join(seen)
        self.stop()
        sys.exit("tbgen dev gave no verdict:\n" + "\n".join(seen[-40:]))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def edit(project: Path, template: str, n: int) -> None:
    """The n-th edit of the user's file: a new constant appended (answers unchanged, a real recompile)."""
    path, text = EDITS[template]
    with open(project / path, "a") as file:
        file.write(text.format(n=n))


def dev_seconds(project: Path, template: str, runs: int, first: int) -> list[float]:
    """Save-to-verdict times of ``runs`` edits in one `tbgen dev` session (every verdict must pass)."""
    session = DevSession(project)
    try:
        session.verdict()  # the start
        times = []
        for n in range(first, first + runs):
            time.sleep(0.5)  # a person's pause between saves; the session is idle again
            saved = time.perf_counter()
            edit(project, template, n)
            when, lines = session.verdict()
            if not lines.splitlines()[-1].startswith(VERDICT + "pass"):
                sys.exit(f"tbgen dev failed after an edit that keeps the answers:\n{lines}")
            times.append(when - saved)
        return times
    finally:
        session.stop()


def build_and_test_seconds(project: Path, template: str, runs: int, first: int) -> list[float]:
    """`tbgen build && tbgen test` after each of ``runs`` edits."""
    times = []
    for n in range(first, first + runs):
        edit(project, template, n)
        build = seconds_of(tbgen_argv("build"), project) if template == "cpp-backend" else 0.0
        # what users ran before tbgen had unit tests: the build and the smoke suite in a fresh server
        times.append(build + seconds_of(tbgen_argv("test", "--quiet", "--no-unit"), project))
    return times


def compile_seconds(project: Path, runs: int, first: int) -> list[float]:
    """The incremental build alone (`cmake --build build`) after each of ``runs`` C++ edits."""
    times = []
    for n in range(first, first + runs):
        edit(project, "cpp-backend", n)
        times.append(seconds_of(["cmake", "--build", "build"], project))
    return times


def measure(work: Path, template: str, runs: int, release: str) -> dict[str, float]:
    project = work / template
    subprocess.run(
        tbgen_argv("new", str(project), "-t", template, "--no-input", "--triton-version", release),
        check=True,
        capture_output=True,
    )
    if template == "cpp-backend":
        seconds_of(tbgen_argv("build"), project)
    figures = {"dev": statistics.median(dev_seconds(project, template, runs, 0))}
    figures["build+test"] = statistics.median(build_and_test_seconds(project, template, runs, 100))
    if template == "cpp-backend":
        figures["compile"] = statistics.median(compile_seconds(project, runs, 200))
    else:
        figures["unit"] = statistics.median(
            seconds_of(tbgen_argv("test", "--unit"), project) for _ in range(runs)
        )
    return figures


def report(python: dict[str, float], cpp: dict[str, float], runs: int) -> None:
    print(f"runs: {runs} (medians), python {sys.version.split()[0]}")
    print(f"{'':38}{'tbgen dev':>12}{'build+test':>12}{'ratio':>8}   goal")
    ratio = python["build+test"] / python["dev"]
    print(
        f"{'python model, save to verdict':38}{python['dev']:>10.2f} s{python['build+test']:>10.2f} s"
        f"{ratio:>7.1f}x   <= {PYTHON_GOAL_S} s: {'met' if python['dev'] <= PYTHON_GOAL_S else 'MISSED'}"
    )
    over = cpp["dev"] - cpp["compile"]
    ratio = cpp["build+test"] / cpp["dev"]
    print(
        f"{'C++ one-file change, save to verdict':38}{cpp['dev']:>10.2f} s{cpp['build+test']:>10.2f} s"
        f"{ratio:>7.1f}x   <= incremental build ({cpp['compile']:.2f} s) + {CPP_OVER_BUILD_GOAL_S} s: "
        f"{'met' if over <= CPP_OVER_BUILD_GOAL_S else 'MISSED'} (+{over:.2f} s)"
    )
    unit = python["unit"]
    print(
        f"{'tbgen test --unit, python model':38}{unit:>10.2f} s{'':>20}   < {UNIT_GOAL_S} s: "
        f"{'met' if unit < UNIT_GOAL_S else 'MISSED'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--triton-version", default="24.10")
    parser.add_argument("--work-dir", type=Path, help="where the projects go (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tbgen-bench-dev-") as scratch:
        work = args.work_dir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        python = measure(work, "python-backend", args.runs, args.triton_version)
        cpp = measure(work, "cpp-backend", args.runs, args.triton_version)
    report(python, cpp, args.runs)


if __name__ == "__main__":
    main()
