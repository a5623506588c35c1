"""Generated backends against hand-written baselines, side by side on one server under the same load.

    python bench/backends.py [--duration 5s] [--tool auto|perf_analyzer|builtin] [--only cpp|python|decoupled]
                             [--reference-backend DIR]

1. cpp-backend's generated add/sub against bench/identity_backend.cc (copies INPUT0/INPUT1 to the outputs and
   nothing else: the floor of Triton's per-request cost), FP32 [16] and [65536], concurrency 1 and 8, dynamic
   batching with a 100 us queue delay on both; with --reference-backend, also against that backend (Triton's
   `recommended` example, say, which you build from Triton's backend repository);
2. python-backend's generated model.py against a per-request loop (the usual hand-written model.py) computing
   the same, concurrency 1, 8 and 32, with dynamic batching on and off;
3. decoupled-backend (C++): responses/s for 1 and 8 concurrent streams (16 responses per request, no delay).

Each pair runs in one server, in the order A B B A (figures averaged), and each line prints the pair's
throughput ratio (generated / baseline): only ratios from one run mean much, since runs of the same model vary by
up to 25% on a shared machine. Needs Triton's r24.10 sources in tbgen's cache (the C++ parts) and the embedded server.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RELEASE = "24.10"
SIZES = {"16": 16, "64k": 65536}
QUEUE_DELAY = "dynamic_batching { max_queue_delay_microseconds: 100 }"

PER_REQUEST_LOOP = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", in0 + in1), pb_utils.Tensor("OUTPUT1", in0 - in1)]))
        return responses
'''


def new_project(path: Path, template: str, **answers) -> Path:
    from triton_backend_gen.scaffold import render_new_project

    return render_new_project(template, path, {"triton_version": RELEASE, **answers})


def add_model(project: Path, name: str, config: str, files: dict[str, bytes] = {}) -> None:
    """A model directory (config.pbtxt, version 1, extra files) and its entry in tbgen.toml."""
    directory = project / "model_repository" / name
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "config.pbtxt").write_text(config)
    for relative, data in files.items():
        (directory / relative).write_bytes(data)
    with (project / "tbgen.toml").open("a") as toml:
        toml.write(f'\n[[models]]\nname = "{name}"\ndecoupled = false\n')


def config_of(project: Path, model: str) -> str:
    return (project / "model_repository" / model / "config.pbtxt").read_text()


def with_dims(config: str, size: int) -> str:
    return re.sub(r"dims: \[ 16 \]", f"dims: [ {size} ]", config)


def with_backend(config: str, backend: str) -> str:
    return re.sub(r'backend: "[^"]+"', f'backend: "{backend}"', config)


def with_batching(config: str, dynamic: bool) -> str:
    config = re.sub(r"dynamic_batching \{[^}]*\}\n?", "", config)
    return config + (QUEUE_DELAY + "\n" if dynamic else "")


def build_identity(dest: Path) -> bytes:
    from triton_backend_gen.toolchain.sources import cached_sources

    sources = cached_sources(f"r{RELEASE}")
    library = dest / "libtriton_identity_ref.so"
    subprocess.run(["g++", "-O3", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                    f"-I{sources / 'core' / 'include'}", str(HERE / "identity_backend.cc"), "-o", str(library)],
                   check=True)
    return library.read_bytes()


def inputs_of(size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {name: rng.uniform(-10, 10, (1, size)).astype(np.float32) for name in ("INPUT0", "INPUT1")}


def measure(project: Path, models: list[str], concurrency: list[int], args, inputs=None) -> dict[str, object]:
    """Each of ``models`` under the same load, in one server, in the order A B ... B A (so that drift of the
    machine during the run weighs on each alike); {model: BenchReport with each figure averaged}. ``inputs``:
    {model: that model's request} (default: each project's reference.make_inputs)."""
    from triton_backend_gen.commands.bench import run_bench
    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import prepare_server

    loaded = load_project(project)
    runs: dict[str, list] = {model: [] for model in models}
    with prepare_server(loaded) as triton:
        url = f"{triton.http_url},{triton.grpc_url}"
        for model in [*models, *reversed(models)]:
            runs[model].append(run_bench(loaded, model=model, url=url, server_pid=triton.pid, concurrency=concurrency,
                                         seconds=args.seconds, tool=args.tool, inputs=(inputs or {}).get(model)))
    return {model: averaged(reports) for model, reports in runs.items()}


def averaged(reports: list) -> object:
    """The first report with every numeric figure of each level replaced by the mean over ``reports``."""
    first = reports[0]
    for index, level in enumerate(first.levels):
        for name, value in vars(level).items():
            if name != "concurrency" and isinstance(value, (int, float)):
                setattr(level, name, sum(getattr(r.levels[index], name) for r in reports) / len(reports))
    return first


def print_pair(title: str, generated, baseline, names: tuple[str, str]) -> None:
    print(f"\n{title}  ({generated.tool}, {generated.protocol})")
    print(f"  {'conc':>4}  {names[0]:>14}  {names[1]:>14}  {'ratio':>6}  {'p50 us':>15}  {'client/server CPU':>22}")
    for mine, theirs in zip(generated.levels, baseline.levels, strict=True):
        ratio = mine.throughput / theirs.throughput if theirs.throughput else float("inf")
        print(f"  {mine.concurrency:>4}  {mine.throughput:>12,.0f}/s  {theirs.throughput:>12,.0f}/s  {ratio:>5.2f}x"
              f"  {mine.p50_us:>6,.0f} /{theirs.p50_us:>7,.0f}  {mine.client_cpu:>4.0%}/{mine.server_cpu:<4.0%} "
              f"{theirs.client_cpu:>4.0%}/{theirs.server_cpu:<4.0%}")


def cpp_pairs(scratch: Path, args) -> None:
    from triton_backend_gen.commands.build import build
    from triton_backend_gen.project import load_project

    project = new_project(scratch / "bench-cpp", "cpp-backend")
    build(load_project(project))
    identity = build_identity(scratch)
    generated = with_batching(config_of(project, "add_sub"), dynamic=True)
    (project / "model_repository" / "add_sub" / "config.pbtxt").write_text(generated)
    add_model(project, "add_sub_64k", with_dims(generated, SIZES["64k"]))
    reference = with_backend(generated, "identity_ref")
    add_model(project, "identity_16", reference, {"libtriton_identity_ref.so": identity})
    add_model(project, "identity_64k", with_dims(reference, SIZES["64k"]), {"libtriton_identity_ref.so": identity})
    external = add_reference_backend(project, Path(args.reference_backend), generated) if args.reference_backend else None
    for size, (mine, floor) in {"16": ("add_sub", "identity_16"), "64k": ("add_sub_64k", "identity_64k")}.items():
        models = [mine, floor] + ([f"reference_{size}"] if external else [])
        inputs = {mine: inputs_of(SIZES[size]), floor: inputs_of(SIZES[size]),
                  f"reference_{size}": {"INPUT": inputs_of(SIZES[size])["INPUT0"]}}
        reports = measure(project, models, [1, 8], args, inputs)
        print_pair(f"C++ FP32 [{SIZES[size]}]: generated add/sub vs identity floor", reports[mine], reports[floor],
                   ("generated", "identity"))
        if external:
            print_pair(f"C++ FP32 [{SIZES[size]}]: generated add/sub vs {external} (one input, one output)",
                       reports[mine], reports[f"reference_{size}"], ("generated", external))


def add_reference_backend(project: Path, directory: Path, generated: str) -> str:
    """Models reference_16 and reference_64k served by the backend built in ``directory`` (its
    libtriton_<name>.so, e.g. Triton's `recommended` example): one FP32 input INPUT, one output OUTPUT."""
    libraries = sorted(directory.glob("libtriton_*.so"))
    if not libraries:
        sys.exit(f"--reference-backend {directory}: no libtriton_<name>.so in it")
    name = libraries[0].name[len("libtriton_"):-len(".so")]
    config = with_backend(generated, name)
    config = re.sub(r"input \[.*?\n\]\noutput \[.*?\n\]\n",
                    'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                    'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 16 ] } ]\n', config, flags=re.DOTALL)
    library = {libraries[0].name: libraries[0].read_bytes()}
    add_model(project, "reference_16", config, library)
    add_model(project, "reference_64k", with_dims(config, SIZES["64k"]), library)
    return name


def python_pairs(scratch: Path, args) -> None:
    project = new_project(scratch / "bench-py", "python-backend")
    generated = config_of(project, "add_sub")
    add_model(project, "add_sub_loop", generated, {"1/model.py": PER_REQUEST_LOOP.encode()})
    for dynamic in (True, False):
        for model in ("add_sub", "add_sub_loop"):
            (project / "model_repository" / model / "config.pbtxt").write_text(with_batching(generated, dynamic))
        reports = measure(project, ["add_sub", "add_sub_loop"], [1, 8, 32], args)
        mode = "dynamic batching 100 us" if dynamic else "no dynamic batching"
        print_pair(f"Python FP32 [16], {mode}: generated model.py vs per-request loop", reports["add_sub"],
                   reports["add_sub_loop"], ("generated", "loop"))


def decoupled(scratch: Path, args) -> None:
    from triton_backend_gen.commands.build import build
    from triton_backend_gen.project import load_project

    project = new_project(scratch / "bench-dec", "decoupled-backend", language="cpp")
    build(load_project(project))
    inputs = {"IN": np.arange(16, dtype=np.int32), "DELAY": np.zeros(16, np.uint32), "WAIT": np.zeros(1, np.uint32)}
    (report,) = measure(project, ["repeat_int32"], [1, 8], args, inputs).values()
    print(f"\nDecoupled C++ repeat, 16 responses per request, no delay  ({report.tool})")
    for level in report.levels:
        print(f"  {level.concurrency:>2} streams: {level.responses_per_s:>10,.0f} responses/s "
              f"({level.throughput:,.0f} requests/s, p50 {level.p50_us:,.0f} us, "
              f"client/server CPU {level.client_cpu:.0%}/{level.server_cpu:.0%})")


def main() -> None:
    from triton_backend_gen.bench import parse_duration
    from triton_backend_gen.toolchain.sources import cached_sources, sources_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5s", help="measurement time per level")
    parser.add_argument("--tool", default="auto", choices=("auto", "perf_analyzer", "builtin"))
    parser.add_argument("--only", action="append", choices=("cpp", "python", "decoupled"),
                        help="run only these parts (repeatable; default: all three)")
    parser.add_argument("--reference-backend", metavar="DIR",
                        help="also compare with the backend built in DIR (libtriton_<name>.so with one FP32 input INPUT "
                             "and one output OUTPUT, such as Triton's recommended example; built by you, never committed)")
    args = parser.parse_args()
    args.seconds = parse_duration(args.duration)
    if cached_sources(f"r{RELEASE}") is None:
        sys.exit(f"Triton r{RELEASE} sources are not in {sources_dir()}: fill the cache first (tbgen deps fetch).")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()};"
          f" client and server share the CPUs")
    parts = {"cpp": cpp_pairs, "python": python_pairs, "decoupled": decoupled}
    with tempfile.TemporaryDirectory(prefix="tbgen-bench-backends-") as scratch:
        for name in args.only or parts:
            parts[name](Path(scratch), args)


if __name__ == "__main__":
    main()
