"""`tbgen templates check`: the whole matrix is clean, each kind of defect in a rendered project is caught,
and with --smoke every C++ variant builds at each release, loads into the embedded server and passes the
suite."""

import math

import pytest
from conftest import cmake_fits_or_skip, newest_release_at_hand, run_tbgen, triton_sources_or_skip

from triton_backend_gen import versions
from triton_backend_gen.commands.templates_check import (
    FEATURE_KEYS,
    SIGNATURES,
    STRATEGY_KEY,
    _variant_problems,
    build_rendered_project,
    check_rendered_project,
    check_templates,
    option_matrix,
)
from triton_backend_gen.project import load_project
from triton_backend_gen.scaffold import get_template


def test_matrix_is_the_product_of_options_then_each_dtype_the_edge_the_frameworks_the_signatures_and_patterns():  # noqa: E501
    cpp = get_template("cpp-backend")
    variants = list(option_matrix(cpp))
    patterns = [{"pattern": p} for p in ("bls", "bls-async", "ensemble")]
    assert variants[-len(patterns) :] == patterns
    variants = variants[: -len(patterns)]
    axes = [
        o
        for o in cpp.options
        if (o.choices or o.kind is bool)
        and o.key not in ("dtype", "framework", "pattern", STRATEGY_KEY, *FEATURE_KEYS)
    ]
    assert {o.key for o in axes} == {"gpu", "dynamic_batching"}
    dtypes = cpp.option("dtype").choices
    assert len(dtypes) == 14 and "BYTES" in dtypes and "BF16" in dtypes
    product = math.prod(len(o.choices) or 2 for o in axes)
    sequences = [
        {
            "sequence": "oldest",
            "correlation_id": "string",
            "custom_metrics": True,
            "request_parameters": True,
            "implicit_state": True,
        },
        {"sequence": "direct", "dtype": "INT32"},
        {"custom_metrics": True, "request_parameters": True},
    ]
    strategies = [{"batch_strategy": s} for s in ("single", "volume", "tokens", "custom")]
    strategies.append(
        {
            "batch_strategy": "tokens",
            "signature": SIGNATURES["bytes-in"].context(),
            "model_name": "bytes_in",
            "batch_input": "TEXT",
        }
    )
    assert len(variants) == (
        product + len(dtypes) - 1 + 1 + len(sequences) + len(strategies) + 2 + len(SIGNATURES)
    )
    assert [v["dtype"] for v in variants[product : product + len(dtypes) - 1]] == list(dtypes[1:])
    edge = product + len(dtypes) - 1
    assert variants[edge] == {"max_batch_size": 0, "dims": "-1"}
    assert variants[edge + 1 : edge + 1 + len(sequences)] == sequences
    after = edge + 1 + len(sequences)
    assert variants[after : after + len(strategies)] == strategies
    assert variants[after + len(strategies) : after + len(strategies) + 2] == [
        {"framework": "libtorch"},
        {"framework": "opencv-dnn"},
    ]
    assert [v["model_name"] for v in variants[-len(SIGNATURES) :]] == ["mixed", "bytes_in"]
    assert list(option_matrix(cpp, full=False)) == [
        *variants[:product],
        {"max_batch_size": 0, "dims": "-1"},
        sequences[0],
        {"batch_strategy": "volume"},
    ]
    python = list(option_matrix(get_template("python-backend")))
    assert {
        "sequence": "oldest",
        "correlation_id": "string",
        "custom_metrics": True,
        "request_parameters": True,
    } in python
    assert not any(v.get("implicit_state") for v in python)  # the python backend has no implicit state
    decoupled = list(option_matrix(get_template("decoupled-backend")))
    assert decoupled[:2] == [{"language": "cpp"}, {"language": "python"}]
    assert decoupled[-2:] == [
        {"pattern": "bls-decoupled", "language": "cpp"},
        {"pattern": "bls-decoupled", "language": "python"},
    ]
    decoupled = decoupled[:-2]
    assert decoupled[2:5] == [
        {
            "sequence": "oldest",
            "correlation_id": "string",
            "custom_metrics": True,
            "request_parameters": True,
        },
        {"sequence": "direct"},
        {"custom_metrics": True, "request_parameters": True},
    ]
    assert [(v["signature"], v["language"]) for v in decoupled[5:]] == [
        (s.context(), language) for s in SIGNATURES.values() for language in ("cpp", "python")
    ]


@pytest.mark.slow
def test_every_template_variant_is_clean():
    report = check_templates()
    assert report.errors == []
    expected = sum(
        len(list(option_matrix(get_template(n))))
        for n in ("cpp-backend", "python-backend", "decoupled-backend")
    )
    assert report.counts["variants"] == expected
    assert report.counts["files"] > report.counts["variants"] * 10


@pytest.fixture
def rendered(render_template):
    return render_template("cpp-backend", gpu=True)


def test_a_clean_project_has_no_problems(rendered):
    assert check_rendered_project(rendered, get_template("cpp-backend")) == []


def test_unrendered_jinja_in_cpp_is_caught(rendered):
    kernels = rendered / "src" / "kernels.cu"
    kernels.write_text(kernels.read_text() + "\n// {{ cookiecutter.dtype }}\n")
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert any("src/kernels.cu" in p and "unrendered Jinja" in p for p in problems)


def test_python_that_does_not_compile_is_caught(rendered):
    (rendered / "reference.py").write_text("def broken(:\n")
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert any(p.startswith("reference.py does not compile") for p in problems)


def test_an_invalid_config_is_caught(rendered):
    config = next(rendered.glob("model_repository/*/config.pbtxt"))
    config.write_text(config.read_text().replace("max_batch_size", "max_batch_sise", 1))
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert any("config.pbtxt" in p for p in problems)


def test_a_project_file_naming_another_template_is_caught(rendered):
    toml = rendered / "tbgen.toml"
    toml.write_text(toml.read_text().replace('template = "cpp-backend"', 'template = "python-backend"'))
    problems = check_rendered_project(rendered, get_template("cpp-backend"))
    assert "tbgen.toml names template 'python-backend'" in problems


def test_a_cpp_variant_without_cached_sources_is_skipped_with_the_reason(rendered, tmp_path, monkeypatch):
    monkeypatch.setenv("TBGEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    problems, skipped = build_rendered_project(load_project(rendered))
    assert problems == []
    assert "are not cached" in skipped and "tbgen deps fetch" in skipped


# --------------------------------------------------------------------------- builds and smoke tests


@pytest.mark.slow
def test_a_smoke_run_that_loses_a_python_stub_is_said_and_run_once_more(
    render_template, server_or_skip, tmp_path
):
    """The first server's stub of add_sub dies in execute(); the second run's does not: the variant passes,
    and the first run's failures are shown as a note (a model that kills it every time fails: the tests in
    tests/cli)."""
    project = render_template("python-backend")
    model = project / "model_repository" / "add_sub" / "1" / "model.py"
    text = model.read_text()
    execute = "    def execute(self, requests):\n"
    assert execute in text
    marker = tmp_path / "killed-once"
    once = (
        f"        import os, pathlib, signal\n        if not pathlib.Path({str(marker)!r}).exists():\n"
        f"            pathlib.Path({str(marker)!r}).touch()\n            os.kill(os.getpid(), "
        "signal.SIGKILL)\n"
    )
    model.write_text(text.replace(execute, execute + once))
    said = []
    problems, skip = _variant_problems(
        project,
        get_template("python-backend"),
        build=False,
        smoke=True,
        instance_kind=None,
        progress=said.append,
    )
    assert marker.exists() and (problems, skip) == ([], "")
    [note] = said
    assert "a python stub stopped answering; the smoke suite runs once more" in note
    assert "smoke python stub add_sub_0_0 (-): the python stub of model 'add_sub' instance add_sub_0_0" in (
        note
    )
    assert "its process had exited (killed by SIGKILL)" in note


# The releases after the server's own are built and loaded on representative variants: the generated code does
# not depend on the release, what does is the Triton API the build compiles against (the batching backend with
# its CUDA kernels, a stateful model's state and sequence calls, and the decoupled response sender).
REPRESENTATIVE = {
    "cpp-backend": [
        {"gpu": True, "dynamic_batching": True},
        {"sequence": "oldest", "correlation_id": "string", "implicit_state": True, "custom_metrics": True},
    ],
    "decoupled-backend": [{"language": "cpp"}],
}
# At the server's own release every cpp-backend variant, in this many parts that can run side by side; the
# decoupled-backend matrix at that release is test_templates_check_smoke's
# (tests/cli/test_server_commands.py).
PARTS = 3
# Variants that tests of their own build, smoke-test and fuzz (with the same answers, and more checks): the
# frameworks in test_frameworks.py, bls in test_cpp_bls.py, bls-async and ensemble in test_compose.py, the
# batching strategies in test_batching_strategies.py.
ELSEWHERE = ("framework", "pattern", "batch_strategy")


def server_release_variants() -> list[dict]:
    """cpp-backend's matrix but the variants tested ELSEWHERE."""
    matrix = option_matrix(get_template("cpp-backend"))
    return [answers for answers in matrix if not any(key in answers for key in ELSEWHERE)]


def _matrix_parts():
    for part in range(PARTS):
        yield pytest.param("24.10", part, id=f"24.10-part{part + 1}of{PARTS}")
    # The newest release whose sources are at hand (26.06 here: the matrix's newest, 26.08, needs the network
    # to fetch), so that `templates check --build --triton-version <it>` runs rather than skips; it has the
    # readiness entry point (TRITONBACKEND_ModelInstanceReady) that 25.10 lacks.
    newest = newest_release_at_hand() or versions.newest().container
    for release in sorted({"25.10", newest}):
        yield pytest.param(release, None, id=f"{release}-representative")


@pytest.mark.cpp
@pytest.mark.slow
@pytest.mark.parametrize(("release", "part"), list(_matrix_parts()))
def test_cpp_matrix_builds_loads_and_passes_the_smoke_suite(release, part, compiler_cache, server_or_skip):
    """cpp-backend's variants rendered for ``release``, built with -Werror, checked against and smoke-tested
    in the 2.51 server: at the server's own release every variant (each dtype, the edge, the features, the
    signatures; the frameworks and the patterns ELSEWHERE), at the later ones the REPRESENTATIVE variants."""
    target = versions.resolve(release)
    triton_sources_or_skip(target.branch)
    cmake_fits_or_skip(target)
    if part is None:
        chosen = REPRESENTATIVE
    else:
        chosen = {"cpp-backend": server_release_variants()[part::PARTS]}
    report = check_templates(smoke=True, releases=[release], variants=chosen)
    assert report.errors == []
    assert report.notes == []
    assert report.counts["variants"] == sum(len(v) for v in chosen.values())


@pytest.mark.cpp
@pytest.mark.slow
def test_a_variant_that_does_not_compile_is_a_failure_naming_the_line(render_template, compiler_cache):
    triton_sources_or_skip("r24.10")
    project = render_template("cpp-backend", triton_version="24.10")
    source = project / "src" / "my_backend.cc"
    source.write_text(source.read_text() + "\nint unused_and_broken() { return; }\n")
    problems, skipped = build_rendered_project(load_project(project))
    assert skipped == ""
    (problem,) = problems
    assert problem.startswith("build failed") and "my_backend.cc:" in problem


@pytest.mark.slow
def test_cli_reports_the_variants_it_could_not_build(tmp_path):
    """`--build` without cached sources: C++ variants are reported as not built, Python ones need nothing."""
    result = run_tbgen(
        "templates",
        "check",
        "-t",
        "decoupled-backend",
        "--build",
        "--triton-version",
        "r24.10",
        env={"TBGEN_CACHE_DIR": str(tmp_path / "empty-cache")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIP decoupled-backend [language=cpp triton_version=24.10]" in result.stdout
    variants = list(option_matrix(get_template("decoupled-backend")))
    cpp = [
        v for v in variants if v.get("language", "cpp") == "cpp"
    ]  # the C++ ones: nothing to build them from
    assert f"{len(variants)} variants" in result.stdout and f"{len(cpp)} not built" in result.stdout


def test_cli_refuses_an_unknown_release():
    result = run_tbgen("templates", "check", "--triton-version", "19.01")
    assert result.returncode == 2
    assert "19.01" in result.stderr
