"""Batching strategies (batching/<model>/, batchstrategy.so in the model's directory) generated, built, loaded
by the embedded tritonserver 24.10 and proven by the "batching strategy" check.

One project per template serves the module: `tbgen new --set batch_strategy=volume`, then three models added
with `tbgen add model` and given single, tokens and custom with `tbgen add batcher`; one `tbgen build` (the
batching libraries with -Werror), one `tbgen test --fuzz 300` that checks every strategy against the batches
the server forms. The python project then serves one session (the Python API, one server) that proves the
rest: Triton's own volume_batching example, compiled from the cached backend sources into a model beside the
generated volume strategy, forms the same batches for the same requests and limit; a bad limit fails the
model's load with a message naming the parameter and the model; and a custom rule changed in decision.h but
not in reference.py fails the check, naming the batches.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import check_results, fuzz_passes, new_project, run_tbgen, triton_sources_or_skip

from triton_backend_gen.errors import ServerError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.model_control import load_model
from triton_backend_gen.smoke import load_model_specs
from triton_backend_gen.smoke.batching import check_batching_strategy
from triton_backend_gen.smoke.clients import Endpoints

pytestmark = [pytest.mark.slow, pytest.mark.cpp]

ADDED = {"s_single": "single", "s_tokens": "tokens", "s_custom": "custom"}
# The comparison's requests (batch sizes) and budget: 5 add/sub rows of 2 x 16 FP32 (640 B). Every request
# fits the budget (Triton's example never runs a request larger than it), and only the budget closes batches.
EXAMPLE_SIZES = [1, 2, 2, 1, 3, 2, 1, 1]
EXAMPLE_LIMIT = 640


def strategy_project(tmp_path: Path, template: str) -> Path:
    """The module's project of ``template``: four models, one per strategy, built."""
    triton_sources_or_skip("r24.10")
    project = new_project(tmp_path, template, "batch_strategy=volume")
    for model, strategy in ADDED.items():
        added = run_tbgen("add", "model", model, "--project", str(project))
        assert added.returncode == 0, added.stdout + added.stderr
        given = run_tbgen("add", "batcher", model, "--strategy", strategy, "--project", str(project))
        assert given.returncode == 0, given.stdout + given.stderr
        assert (project / "batching" / model / "batcher.cc").is_file()
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    for model in ("add_sub", *ADDED):
        assert (project / "model_repository" / model / "batchstrategy.so").is_file()
        assert f"{model}'s batching strategy" in built.stdout  # the five exports checked
    return project


@pytest.mark.xdist_group("batching-cpp")
def test_cpp_backend_strategies_pass_tbgen_test_and_the_fuzzer(tmp_path):
    project = strategy_project(tmp_path, "cpp-backend")
    assert_every_strategy_checked(fuzz_passes(project, 300))


@pytest.fixture(scope="module")
def python_project(tmp_path_factory) -> Path:
    return strategy_project(tmp_path_factory.mktemp("batching"), "python-backend")


@pytest.mark.xdist_group("batching-python")
def test_python_backend_strategies_pass_tbgen_test_and_the_fuzzer(python_project):
    assert_every_strategy_checked(fuzz_passes(python_project, 300))
    # a python project's C++ libraries: tbgen check judges them, tbgen doctor says what they need
    checked = run_tbgen("check", str(python_project))
    assert checked.returncode == 0 and checked.stdout.count("exports the five") == 4, checked.stdout
    doctor = run_tbgen("doctor", cwd=python_project)
    assert re.search(
        r"batching strategies +ok\n +add_sub \(volume\), s_single \(single\), .*4 of 4 built; C\+\+",
        doctor.stdout,
    ), doctor.stdout


@pytest.mark.xdist_group("batching-python")
def test_a_strategy_built_here_loads_in_every_releases_image(python_project):
    """`tbgen package` copies the library built here into the release's image: it needs nothing newer than
    the oldest image's C library and libstdc++ (Ubuntu 20.04's glibc 2.31 and GLIBCXX_3.4.28)."""
    library = python_project / "model_repository" / "add_sub" / "batchstrategy.so"
    dump = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True, check=True).stdout
    needed = {
        (name, tuple(map(int, v.split(".")))) for name, v in re.findall(r"(GLIBCXX|GLIBC)_([\d.]+)", dump)
    }
    assert needed and all(v <= {"GLIBC": (2, 31), "GLIBCXX": (3, 4, 28)}[name] for name, v in needed), needed


def assert_every_strategy_checked(output: str) -> None:
    results = check_results(output)
    wanted = ["add_sub: batching strategy (volume)"] + [
        f"{m}: batching strategy ({s})" for m, s in ADDED.items()
    ]
    assert all(results.get(f"{name} [grpc]") == "pass" for name in wanted), output[-6000:]
    assert re.search(r"8 requests \[.*\] ran in \d+ executions", output)


@pytest.mark.xdist_group("batching-python")
def test_the_volume_strategy_batches_as_tritons_example_and_faults_are_named(python_project, tmp_path):
    """One server: Triton's volume_batching beside the generated volume strategy; a bad limit; a changed
    custom rule."""
    project = python_project
    example = add_tritons_example(project, tmp_path)
    set_limit(project / "model_repository" / "add_sub" / "config.pbtxt", EXAMPLE_LIMIT)
    decision = project / "batching" / "s_custom" / "decision.h"
    decision.write_text(re.sub(r"batch\.requests < ", "batch.requests <= ", decision.read_text(), count=1))
    assert run_tbgen("build", str(project)).returncode == 0
    loaded = load_project(project)
    specs = {spec.name: (reference, spec) for reference, spec, _ in load_model_specs(loaded)}
    # every config.pbtxt declares its tensors: without the python backend's auto-complete a reload takes 0.1 s
    with prepare_server(loaded, extra_args=("--disable-auto-complete-config",)) as triton:
        endpoints = Endpoints(http_url=triton.http_url, grpc_url=triton.grpc_url)
        results = {
            model: check(specs[model], "volume", endpoints, triton.log_file, EXAMPLE_SIZES)
            for model in ("add_sub", example)
        }
        changed = check(specs["s_custom"], "custom", endpoints, triton.log_file)
        bad = json.loads(json.dumps(triton_config(triton.http_url, "add_sub")))
        bad["parameters"]["MAX_BATCH_VOLUME_BYTES"]["string_value"] = "abc"
        with pytest.raises(ServerError) as refused:
            load_model(triton.http_url, "add_sub", bad)
    ours, theirs = results["add_sub"], results[example]
    assert ours.passed and theirs.passed, (ours.detail, theirs.detail)
    # the same executions: 3 batches of 5, 4 and 4 rows (the budget of 5 rows closes each)
    assert "ran in 3 executions [5, 4, 4]" in ours.detail and "ran in 3 executions [5, 4, 4]" in theirs.detail
    assert "volume_example/batchstrategy.so" in theirs.detail  # the server loaded Triton's library
    assert not changed.passed and "the strategy's rule makes" in changed.detail, changed.detail
    assert "model 'add_sub': parameter MAX_BATCH_VOLUME_BYTES must be a positive integer, got 'abc'" in str(
        refused.value.message
    )


def check(reference_and_spec: tuple, strategy: str, *args):
    reference, spec = reference_and_spec
    return check_batching_strategy(spec, reference, strategy, *args)


def add_tritons_example(project: Path, scratch: Path) -> str:
    """A model served by the project's backend whose batchstrategy.so is Triton's volume_batching example,
    compiled from the cached backend sources (never copied into the project's sources); its name."""
    sources = triton_sources_or_skip("r24.10")
    example = sources / "backend" / "examples" / "batching_strategies" / "volume_batching" / "src"
    name = "volume_example"
    added = run_tbgen("add", "model", name, "--project", str(project))
    assert added.returncode == 0, added.stdout + added.stderr
    model_dir = project / "model_repository" / name
    compiled = subprocess.run(
        ["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-w", f"-I{sources / 'core' / 'include'}",
         f"-I{sources / 'common' / 'include'}",
         f"-Wl,--version-script={example / 'libtriton_volumebatching.ldscript'}",
         str(example / "volume_batching.cc"), "-o", str(scratch / "batchstrategy.so")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    shutil.copy(scratch / "batchstrategy.so", model_dir / "batchstrategy.so")
    config = model_dir / "config.pbtxt"
    config.write_text(
        config.read_text()
        + f'\nparameters {{ key: "MAX_BATCH_VOLUME_BYTES" value {{ string_value: "{EXAMPLE_LIMIT}" }} }}\n'
    )
    return name


def set_limit(config: Path, limit: int) -> None:
    text, count = re.subn(
        r'(key: "MAX_BATCH_VOLUME_BYTES" value \{ string_value: ")\d+', rf"\g<1>{limit}", config.read_text()
    )
    assert count == 1, text
    config.write_text(text)


def triton_config(http_url: str, model: str) -> dict:
    import tritonclient.http as httpclient

    with httpclient.InferenceServerClient(http_url) as client:
        return client.get_model_config(model)
