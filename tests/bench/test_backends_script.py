"""bench/backends.py without a server: its command line, the signatures part's signatures are valid and its
requests fit them, the floor backend (bench/floor_backend.cc) compiles against Triton's headers, and the
frameworks part's python+torch baseline finds torch and computes what the libtorch backend's example model
does. What every bench/ script imports of tbgen exists (the fast tier's guard; tests/bench/test_bench_parts.py
runs the scripts)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from triton_backend_gen import signature
from triton_backend_gen.toolchain.sources import cached_sources

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def backends():
    spec = importlib.util.spec_from_file_location("bench_backends", BENCH / "backends.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_signature_is_valid_and_its_request_fits_it(backends):
    for model, (inputs, outputs) in backends.SIGNATURES.items():
        parsed = signature.validate(signature.from_flags(inputs, outputs))
        request = backends.signature_inputs(model)
        assert list(request) == [t.name for t in parsed.inputs]
        for tensor in parsed.inputs:
            array = request[tensor.name]
            assert array.shape == (1, *tensor.dims), model
            assert array.dtype == np.dtype(tensor.type.numpy), model
            if tensor.datatype == "BYTES":
                assert all(isinstance(v, bytes) and 8 <= len(v) <= 32 for v in array.flat)


def test_the_bytes_only_signatures_measure_one_and_65536_elements(backends):
    sizes = sorted(backends.signature_inputs(m)["TEXT"].size for m in backends.SIGNATURES if m != "mixed")
    assert sizes == [1, 65536]


@pytest.mark.cpp
def test_the_floor_compiles_against_the_cached_headers(backends, tmp_path):
    sources = cached_sources(f"r{backends.RELEASE}")
    if (
        sources is None
        or shutil.which("g++") is None
        or not Path("/usr/include/rapidjson/document.h").is_file()
    ):
        pytest.skip("needs Triton's sources in tbgen's cache, g++ and rapidjson's headers")
    library = backends.build_floor(tmp_path)
    assert list(library) == ["libtriton_floor_ref.so"] and library["libtriton_floor_ref.so"][:4] == b"\x7fELF"


def test_only_selects_parts_and_frameworks_is_one(backends):
    assert backends.parse_args(["--only", "frameworks", "--duration", "3s"]).parts == ["frameworks"]
    repeated = ["--only", "cpp", "--only", "frameworks", "--only", "cpp"]
    assert backends.parse_args(repeated).parts == ["cpp", "frameworks"]
    assert backends.parse_args([]).parts == list(backends.PARTS)
    assert "frameworks" in backends.PARTS and backends.parse_args([]).seconds == 5.0


def test_quick_measures_the_first_level_once_and_is_off_by_default(backends, tmp_path):
    normal = backends.parse_args([])
    assert not normal.quick and normal.work_dir is None and backends.levels(normal, [1, 8, 32]) == [1, 8, 32]
    quick = backends.parse_args(["--quick", "--duration", "0.3s", "--work-dir", str(tmp_path)])
    assert quick.quick and quick.seconds == 0.3 and quick.work_dir == tmp_path
    assert backends.levels(quick, [1, 8, 32]) == [1]


def test_a_model_added_from_a_copied_config_carries_its_own_name(backends, tmp_path):
    """python-backend's config.pbtxt names its model: a copy served under another directory must not keep that
    name, or Triton refuses to load it (what broke `--only python`)."""
    project = backends.new_project(tmp_path / "bench-py", "python-backend")
    config = backends.config_of(project, "add_sub")
    assert 'name: "add_sub"' in config
    backends.add_model(project, "add_sub_loop", config, {"1/model.py": b"# loop"})
    copied = backends.config_of(project, "add_sub_loop")
    assert copied.count('name: "add_sub_loop"') == 1 and 'name: "add_sub"\n' not in copied
    assert 'name: "INPUT0"' in copied  # tensor names are not the model's
    assert backends.with_name('backend: "x"\n', "m").startswith('name: "m"\n')  # inserted when absent
    from triton_backend_gen.project import load_project

    assert "add_sub_loop" in [model.name for model in load_project(project).models]


def tbgen_imports(script: Path) -> list[tuple[str, str | None]]:
    """(module, name) for each ``from triton_backend_gen... import name`` and ``import triton_backend_gen...``
    in ``script``, at any depth (the bench scripts import lazily, inside functions)."""
    found = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("triton_backend_gen"):
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (alias.name, None) for alias in node.names if alias.name.startswith("triton_backend_gen")
            ]
    return found


@pytest.mark.parametrize("script", sorted(path.name for path in BENCH.glob("*.py")))
def test_what_each_bench_script_imports_of_tbgen_exists(script):
    for module, name in tbgen_imports(BENCH / script):
        imported = importlib.import_module(module)
        if name is not None and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # a submodule; raises when that is missing too


def test_an_unknown_part_is_refused(backends, capsys):
    with pytest.raises(SystemExit):
        backends.parse_args(["--only", "tensorflow"])
    assert "frameworks" in capsys.readouterr().err


def test_the_framework_goals_are_judged_from_the_ratios(backends, capsys):
    backends.print_framework_goals(
        {
            ("16", "python+torch"): [3.1, 4.0],
            ("16", "floor"): [0.95, 0.91],
            ("64k", "python+torch"): [1.2, 0.9],
            ("64k", "floor"): [0.8, 0.7],
        }
    )
    out = capsys.readouterr().out
    assert "faster than python+torch at every point: NOT met (lowest 0.90x)" in out
    assert "within 10% of the floor at [16]: met (lowest 0.91x)" in out
    backends.print_framework_goals({("16", "floor"): [0.89, 1.0], ("64k", "floor"): [0.8, 0.7]})
    out = capsys.readouterr().out
    assert "not measured" in out and "NOT met (lowest 0.89x)" in out


def test_torch_site_is_derived_or_says_why_not(backends):
    site, why_not = backends.torch_site()
    if site is None:
        assert why_not
    else:
        assert not why_not and (site == "" or (Path(site) / "torch" / "__init__.py").is_file())


FAKE_PB_UTILS = """
class _In:
    def __init__(self, array):
        self.array = array

    def as_numpy(self):
        return self.array


def get_input_tensor_by_name(request, name):
    return _In(request[name])


class Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, array


class InferenceResponse:
    def __init__(self, output_tensors):
        self.outputs = {t.name: t.array for t in output_tensors}
"""


def test_the_python_torch_baseline_computes_sum_and_difference(backends, tmp_path):
    site, why_not = backends.torch_site()
    if site is None:
        pytest.skip(f"no torch for this Python: {why_not}")
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text(backends.TORCH_PER_REQUEST)
    (tmp_path / "triton_python_backend_utils.py").write_text(FAKE_PB_UTILS)
    script = textwrap.dedent(f"""
        import importlib.util, sys
        import numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        spec = importlib.util.spec_from_file_location("model", {str(tmp_path / "1" / "model.py")!r})
        model = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(model)
        import torch

        class AddSub(torch.nn.Module):
            def forward(self, a: torch.Tensor, b: torch.Tensor):
                return a + b, a - b

        torch.jit.script(AddSub()).save({str(tmp_path / "1" / "model.pt")!r})
        instance = model.TritonPythonModel()
        instance.initialize({{"model_repository": {str(tmp_path)!r}, "model_version": "1"}})
        rng = np.random.default_rng(0)
        requests = [{{"INPUT0": rng.random((1, n), np.float32), "INPUT1": rng.random((1, n), np.float32)}}
                    for n in (16, 16, 65536)]
        for request, response in zip(requests, instance.execute(requests), strict=True):
            assert np.array_equal(response.outputs["OUTPUT0"], request["INPUT0"] + request["INPUT1"])
            assert np.array_equal(response.outputs["OUTPUT1"], request["INPUT0"] - request["INPUT1"])
        print("ok")
    """)
    env = {**os.environ, backends.TORCH_SITE_ENV: site}
    (tmp_path / "check.py").write_text(script)  # a file: torch.jit.script reads the module's source
    result = subprocess.run(
        [sys.executable, str(tmp_path / "check.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_composed_part_measures_models_its_projects_have(backends, tmp_path):
    from triton_backend_gen.project import load_project
    from triton_backend_gen.smoke import load_reference

    ensemble = load_project(backends.new_project(tmp_path / "ens", "cpp-backend", pattern="ensemble"))
    assert {m.name for m in ensemble.models} == {"ensemble", "preprocess", "add_sub", "postprocess"}
    router = backends.new_project(tmp_path / "bls", "python-backend", pattern="bls")
    # bench sends make_inputs(1) (seed 0): the request the router forwards goes to add_sub, its comparison
    assert load_reference(router / "reference.py").make_inputs(1)["MODEL_NAME"][0, 0] == b"add_sub"
    assert "composed" in backends.PARTS
