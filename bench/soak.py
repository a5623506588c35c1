"""Each template's default project under `tbgen test --soak`: the memory slope of every process and the
latency drift, the figures README's "Soak" table shows.

    python bench/soak.py [--templates cpp,python,decoupled,decoupled-python,bls,sequence] [--soak 2m]
                         [--concurrency 4] [--work-dir DIR] [--json FILE] [--quick]

Each case is a project made by `tbgen new` as a user makes it (nothing changed), tested by `tbgen test
--soak` (the unit tests and the smoke suite first, then the soak: --concurrency clients over HTTP and gRPC,
or gRPC streams for a decoupled model, whole sequences for a sequence model, every answer compared with
reference.py, the private memory of the server and of each python stub sampled about a hundred times):

    cpp               cpp-backend (add/sub, C++)
    python            python-backend (add/sub)
    decoupled         decoupled-backend (repeat, C++)
    decoupled-python  decoupled-backend --set language=python
    bls               python-backend --pattern bls (a router and its two callees)
    sequence          python-backend --set sequence=direct (an accumulator, direct strategy)

Figures per case: requests per second, each process's slope after the warm-up (KiB per 1,000 requests and
MiB per hour at the measured rate; the verdict's threshold is 16 KiB per 1,000 requests), each model's p99 in
the first and the last stretch of the soak (a minute each, quarters of a soak under 4 minutes), and whether
`tbgen test` passed. Exit 1 when a case fails: every template's default project must pass.

--quick is the smoke run of the test suite (tests/bench/test_bench_soak.py): the cases it is given with a 15 s
soak; the figures mean little. --work-dir keeps the projects, their reports (build/tbgen/soak/report.html)
and server logs (<DIR>/bench-soak, replaced on each run; default: a temporary directory, removed at the end).
Needs the embedded server, and Triton's r24.10 sources in tbgen's cache for the C++ cases.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

CASES = {
    "cpp": ("-t", "cpp-backend"),
    "python": ("-t", "python-backend"),
    "decoupled": ("-t", "decoupled-backend"),
    "decoupled-python": ("-t", "decoupled-backend", "--set", "language=python"),
    "bls": ("-t", "python-backend", "--pattern", "bls"),
    "sequence": ("-t", "python-backend", "--set", "sequence=direct"),
}
_SLOPE = re.compile(
    r"^(?:pass|FAIL)  soak memory: (?P<process>tritonserver|python stub \S+ \S+)  [\d.]+ s\n    (?:a leak: )?"
    r"(?P<kib>[+-][\d,.]+) KiB per 1,000 requests \((?P<mib>[+-][\d,.]+) MiB per hour",
    re.MULTILINE,
)
_MODEL = re.compile(
    r"^(?:pass|FAIL)  soak(?: (?P<model>\S+))?  [\d.]+ s\n    (?P<answers>[\d,]+) answers", re.M
)
_WINDOW = re.compile(r"^\s+[\d.]+-[\d.]+ s: p50 [\d.]+ ms, p99 (?P<p99>[\d.]+) ms", re.MULTILINE)


@dataclass
class Figures:
    case: str
    passed: bool
    requests_per_s: float = 0.0
    slopes: dict[str, tuple[float, float]] = field(default_factory=dict)  # process -> (KiB/1000, MiB/h)
    p99_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> (first, last stretch)


def tbgen(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "triton_backend_gen", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "250"},
    )


def number(text: str) -> float:
    return float(text.replace(",", ""))


def parse(case: str, output: str, seconds: float, passed: bool) -> Figures:
    """The figures from what `tbgen test --soak` printed off a terminal."""
    figures = Figures(case, passed)
    for match in _SLOPE.finditer(output):
        figures.slopes[match.group("process")] = (number(match.group("kib")), number(match.group("mib")))
    answers = 0
    for match in _MODEL.finditer(output):
        answers += int(number(match.group("answers")))
        rest = output[match.end() :].split("\npass  ", 1)[0].split("\nFAIL  ", 1)[0]
        p99 = [float(w.group("p99")) for w in _WINDOW.finditer(rest)]
        if p99:
            figures.p99_ms[match.group("model") or case] = (p99[0], p99[-1])
    figures.requests_per_s = answers / seconds
    return figures


def run_case(work: Path, case: str, soak: str, seconds: float, concurrency: int) -> Figures:
    project = work / f"soak-{case}"  # "sequence" or "python" would name a backend of Triton's own
    made = tbgen("new", str(project), *CASES[case], "--no-input", "--triton-version", "24.10")
    if made.returncode != 0:
        sys.exit(f"{case}: tbgen new failed:\n{made.stdout}{made.stderr}")
    print(f"{case}: tbgen test --soak {soak}", flush=True)
    tested = tbgen("test", str(project), "--soak", soak, "--concurrency", str(concurrency))
    figures = parse(case, tested.stdout, seconds, tested.returncode == 0)
    if not figures.passed:
        print(tested.stdout[-4000:] + tested.stderr[-2000:], flush=True)
    return figures


def print_table(rows: list[Figures]) -> None:
    print(
        f"\n{'case':18} {'result':6} {'req/s':>7}  "
        "process slopes (KiB per 1,000 requests, MiB/h)  p99 first->last"
    )
    for row in rows:
        slopes = "; ".join(f"{p}: {k:+.2f} ({m:+.1f})" for p, (k, m) in row.slopes.items())
        p99 = "; ".join(f"{m}: {a:.2f}->{b:.2f} ms" for m, (a, b) in row.p99_ms.items())
        print(
            f"{row.case:18} {'pass' if row.passed else 'FAIL':6} {row.requests_per_s:7,.0f}  {slopes}  {p99}"
        )


def seconds_of(text: str) -> float:
    unit = {"s": 1, "m": 60, "h": 3600}[text[-1]] if text[-1] in "smh" else 1
    return float(text.rstrip("smh")) * unit


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--templates", default=",".join(CASES), help=f"comma-separated: {', '.join(CASES)}")
    parser.add_argument("--soak", default="2m", help="each case's soak (default 2m)")
    parser.add_argument("--concurrency", type=int, default=4, help="clients in all (default 4)")
    parser.add_argument(
        "--work-dir", type=Path, help="keep the projects and logs there (default: a temp dir)"
    )
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="the smoke run: 15 s soaks, figures meaningless")
    args = parser.parse_args()
    chosen = [name for name in args.templates.split(",") if name]
    unknown = [name for name in chosen if name not in CASES]
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}: choose from {', '.join(CASES)}")
    soak = "15s" if args.quick else args.soak
    temporary = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tbgen-bench-soak-")) if temporary else args.work_dir / "bench-soak"
    if not temporary:
        shutil.rmtree(work, ignore_errors=True)  # an earlier run's, with the same --work-dir
        work.mkdir(parents=True)
    try:
        rows = [run_case(work, case, soak, seconds_of(soak), args.concurrency) for case in chosen]
    finally:
        if temporary:
            shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows]))
    if not all(row.passed for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # tbgen stops its server on the way out; the temporary directory is removed
        sys.exit("interrupted")
