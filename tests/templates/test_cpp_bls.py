"""cpp-backend with pattern=bls: a C++ BLS router that sends each request to the model its selector names,
through Triton's in-process server API.

The template renders the router only (judged alone by the rendering tests); `tbgen new --pattern bls` adds the
callees, python-backend models with the router's tensors whose references the router's reference.py reads from
references/<callee>.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from conftest import check_results, fuzz_passes, grpc_infer, read_config, run_tbgen, triton_sources_or_skip
from tritonclient.grpc import model_config_pb2

from triton_backend_gen.scaffold import get_template, render_new_project, resolve_answers
from triton_backend_gen.scaffold.render import render_into
from triton_backend_gen.smoke import load_reference

TOP = "bls_sync"
CALLEES = ("add_sub", "add_sub_2")
# Every kind of tensor the router forwards: BYTES, an optional input (left out for odd seeds), a -1 dim.
SIGNATURE = {
    "inputs": [
        {"name": "TEXT", "datatype": "BYTES", "dims": [1]},
        {"name": "LANG", "datatype": "BYTES", "dims": [1], "optional": True},
        {"name": "IMG", "datatype": "FP16", "dims": [3, -1]},
    ],
    "outputs": [
        {"name": "COUNT", "datatype": "INT64", "dims": [1]},
        {"name": "LABEL", "datatype": "BYTES", "dims": [1]},
    ],
}


def render(directory: Path, **given) -> Path:
    """The cpp-backend template rendered alone (no callees) into ``directory``/blsproj."""
    template = get_template("cpp-backend")
    answers = resolve_answers(
        template,
        {"project_name": "blsproj", "model_name": TOP, "pattern": "bls", "triton_version": "24.10", **given},
    )
    return render_into(template, answers, directory)


def new_bls(directory: Path, **given) -> Path:
    """What `tbgen new blsproj -t cpp-backend --pattern bls` makes: the router and its Python callees."""
    return render_new_project(
        "cpp-backend", directory / "blsproj", {"pattern": "bls", "triton_version": "24.10", **given}
    )


def rendered_files(project: Path) -> dict[str, bytes]:
    return {str(p.relative_to(project)): p.read_bytes() for p in sorted(project.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- rendering


def test_pattern_none_ignores_selector_and_callees(tmp_path):
    """pattern=none renders the template's own backend: the BLS answers change no file."""
    template = get_template("cpp-backend")
    plain = resolve_answers(template, {"project_name": "p", "triton_version": "24.10"})
    assert plain["pattern"] == "none"
    odd = resolve_answers(
        template,
        {
            "project_name": "p",
            "triton_version": "24.10",
            "pattern": "none",
            "selector": "WHICH",
            "callees": "a,b,c",
        },
    )
    first = rendered_files(render_into(template, plain, tmp_path / "one"))
    assert first == rendered_files(render_into(template, odd, tmp_path / "two"))
    source = first["src/p.cc"].decode()
    assert "class BatchExecutor" in source and "TRITONSERVER_ServerInferAsync" not in source
    toml = tomllib.loads(first["tbgen.toml"].decode())
    assert (
        not {"pattern", "selector", "callees"} & set(toml["answers"]) and "pattern" not in toml["models"][0]
    )
    assert not any(name.startswith("references/") for name in first)


@pytest.mark.parametrize("gpu", [False, True])
def test_bls_renders_a_router_of_the_signature(tmp_path, gpu):
    project = render(tmp_path, gpu=gpu, dtype="INT32", dims="2,3", max_batch_size=4, instance_count=2)
    files = set(rendered_files(project))
    assert (
        "src/kernels.cu" not in files and "export_model.py" not in files
    )  # no kernel: the router computes nothing
    assert "references/add_sub.py" not in files  # the callees are not the template's
    config = read_config(project, TOP)
    assert config.backend == "blsproj"
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    type_name = model_config_pb2.DataType.Name
    assert [(t.name, type_name(t.data_type), list(t.dims)) for t in config.input] == [
        ("MODEL_NAME", "TYPE_STRING", [1]),
        ("INPUT0", "TYPE_INT32", [2, 3]),
        ("INPUT1", "TYPE_INT32", [2, 3]),
    ]
    assert [t.name for t in config.output] == ["OUTPUT0", "OUTPUT1"]
    (group,) = config.instance_group
    assert group.count == 2 and group.kind == (
        model_config_pb2.ModelInstanceGroup.KIND_GPU if gpu else model_config_pb2.ModelInstanceGroup.KIND_CPU
    )
    toml = tomllib.loads((project / "tbgen.toml").read_text())
    assert [m["name"] for m in toml["models"]] == [TOP] and toml["models"][0]["pattern"] == "bls"
    assert {k: toml["answers"][k] for k in ("pattern", "selector", "callees")} == {
        "pattern": "bls",
        "selector": "MODEL_NAME",
        "callees": "add_sub,add_sub_2",
    }
    source = (project / "src" / "blsproj.cc").read_text()
    for needed in (
        "TRITONSERVER_ServerInferAsync",
        "TRITONSERVER_InferenceRequestAppendInputData",
        "TritonServer()",
        "health_.Run([&] { return Route(model, named, &callee); });",  # Route through the instance's health
        'constexpr char kSelector[] = "MODEL_NAME";',
    ):
        assert needed in source, needed
    assert "\nRoute(const std::string& model" in (project / "src" / "compute.cc").read_text()
    assert "BatchExecutor" not in source and "future" not in source  # nothing waits for a callee
    cmakelists = (project / "CMakeLists.txt").read_text()
    assert "kernels.cu" not in cmakelists


def test_bls_reference_computes_through_the_callees_references(tmp_path):
    project = new_bls(
        tmp_path, selector="ROUTE", callees="first,second", max_batch_size=0, dims="4", dtype="INT32"
    )
    reference = load_reference(project)
    assert reference.CALLEES == ("first", "second") and reference.MAX_BATCH_SIZE == 0
    assert list(reference.INPUTS) == ["ROUTE", "INPUT0", "INPUT1"]
    for seed, callee in [(0, "first"), (1, "second")]:
        inputs = reference.make_inputs(None, seed=seed)
        assert inputs["ROUTE"].tolist() == [callee.encode()]
        assert inputs["INPUT0"].shape == (4,)
        got = reference.compute(inputs)
        np.testing.assert_array_equal(got["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"])
    # A user's edit of a callee's reference flows through (the references are read from references/).
    edited = project / "references" / "second.py"
    edited.write_text(
        edited.read_text() + "\n\n_compute = compute\n\n\ndef compute(inputs):\n"
        "    return {name: value * 0 for name, value in _compute(inputs).items()}\n"
    )
    reference = load_reference(project)
    inputs = reference.make_inputs(None, seed=3)
    assert not reference.compute(inputs)["OUTPUT0"].any()


def test_bls_reference_batches_the_selector(tmp_path):
    project = new_bls(tmp_path)
    reference = load_reference(project)
    inputs = reference.make_inputs(3, seed=2)
    assert inputs["MODEL_NAME"].shape == (3, 1) and set(inputs["MODEL_NAME"].flat) == {b"add_sub"}
    assert inputs["INPUT0"].shape == (3, 16)


def test_bls_with_a_framework_is_refused(tmp_path, capfd):
    from triton_backend_gen.errors import ScaffoldError

    template = get_template("cpp-backend")
    answers = resolve_answers(
        template,
        {
            "project_name": "p",
            "model_name": TOP,
            "pattern": "bls",
            "framework": "libtorch",
            "triton_version": "24.10",
        },
    )
    with pytest.raises(ScaffoldError, match="failed to render"):
        render_into(template, answers, tmp_path)
    assert "pattern=bls routes requests to other models and wraps no framework" in capfd.readouterr().err


# --------------------------------------------------------------------------- built and served


CASES = {
    "fp32-batching": {},
    "int32-no-batching": {"dtype": "INT32", "max_batch_size": 0, "dims": "4"},
    "signature": {"signature": {**SIGNATURE, "config": ""}, "max_batch_size": 4},
}


@pytest.mark.cpp
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_bls_builds_warning_free_and_serves_its_callees(tmp_path, compiler_cache, server_or_skip, case):
    """Built with -Werror, the router passes the smoke suite and 300 fuzz requests; each callee answers
    through it as its reference computes; a selector naming no model gets an error that names it, and the
    server stays up."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from triton_backend_gen.project import load_project
    from triton_backend_gen.runtime import prepare_server
    from triton_backend_gen.smoke.compare import output_mismatches

    triton_sources_or_skip("r24.10")
    project = new_bls(tmp_path, **CASES[case])
    built = run_tbgen("build", str(project))
    assert built.returncode == 0, built.stdout + built.stderr
    log = (project / "build" / "tbgen-build.log").read_text()
    assert not [line for line in log.splitlines() if str(project / "src") in line and "warning" in line]
    result = run_tbgen("test", str(project))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " 0 failed" in result.stdout and check_results(result.stdout).get(f"{TOP}: infer [http]") == "pass"
    assert check_results(fuzz_passes(project)).get(f"{TOP}: infer [grpc]") == "pass"

    reference = load_reference(project)
    batch = 2 if reference.MAX_BATCH_SIZE > 0 else None
    with (
        prepare_server(load_project(project)) as triton,
        grpcclient.InferenceServerClient(triton.grpc_url) as client,
    ):
        for seed, callee in enumerate(CALLEES):
            inputs = reference.make_inputs(batch, seed=seed)
            assert inputs["MODEL_NAME"].flat[0] == callee.encode()
            expected = reference.compute(inputs)
            assert not output_mismatches(
                grpc_infer(client, TOP, reference, inputs), expected, reference.TOLERANCE
            )
            direct = grpc_infer(
                client, callee, reference, {k: v for k, v in inputs.items() if k != "MODEL_NAME"}
            )
            assert not output_mismatches(direct, expected, reference.TOLERANCE), callee

        inputs = reference.make_inputs(batch, seed=0)
        for wrong in ("no_such_model", TOP):
            inputs["MODEL_NAME"] = np.full_like(inputs["MODEL_NAME"], wrong.encode())
            with pytest.raises(InferenceServerException) as refused:
                grpc_infer(client, TOP, reference, inputs)
            assert f"'{wrong}'" in str(refused.value), str(refused.value)
        assert client.is_server_live() and client.is_model_ready(TOP)
        inputs = reference.make_inputs(batch, seed=1)
        assert not output_mismatches(
            grpc_infer(client, TOP, reference, inputs), reference.compute(inputs), reference.TOLERANCE
        )
