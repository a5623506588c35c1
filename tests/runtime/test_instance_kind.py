"""--instance-kind: a run copy of the model repository with rewritten instance groups; the user's files
stay."""

from __future__ import annotations

import pytest
from conftest import new_project, read_config, run_tbgen
from tritonclient.grpc import model_config_pb2

from triton_backend_gen.discovery import gpus_visible
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.instance_kind import (
    gpu_models,
    parse_instance_kind,
    run_repository,
    with_instance_kind,
)

GPU, CPU = model_config_pb2.ModelInstanceGroup.KIND_GPU, model_config_pb2.ModelInstanceGroup.KIND_CPU


def test_parse_instance_kind():
    assert parse_instance_kind(None) is None and parse_instance_kind("model") is None
    assert parse_instance_kind("cpu") == "cpu" and parse_instance_kind("gpu") == "gpu"
    with pytest.raises(UsageError, match="'tpu'") as refused:
        parse_instance_kind("tpu")
    assert refused.value.exit_code == 2 and "--instance-kind cpu" in refused.value.hint


def test_every_group_takes_the_kind_and_a_cpu_group_names_no_gpus():
    config = model_config_pb2.ModelConfig(name="m")
    config.instance_group.add(kind=GPU, count=2, gpus=[0, 1])
    config.instance_group.add(kind=CPU, count=1)
    cpu = with_instance_kind(config, "cpu")
    assert [(g.kind, g.count, list(g.gpus)) for g in cpu.instance_group] == [(CPU, 2, []), (CPU, 1, [])]
    assert [g.kind for g in with_instance_kind(config, "gpu").instance_group] == [GPU, GPU]
    assert config.instance_group[0].kind == GPU  # the given config is not changed
    empty = with_instance_kind(model_config_pb2.ModelConfig(name="m"), "cpu")
    assert [g.kind for g in empty.instance_group] == [CPU]


def test_the_run_copy_is_rewritten_and_the_users_files_are_not(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend", "gpu=yes"))
    config_file = project.models[0].config_file
    before = config_file.read_bytes()
    assert gpu_models(project.model_repository) == ["add_sub"]
    dest = project.runtime_dir / "models"
    assert run_repository(project.model_repository, dest, "cpu") == ["add_sub"]
    assert config_file.read_bytes() == before
    assert [g.kind for g in read_config(project.root).instance_group] == [GPU]
    copied = model_config_pb2.ModelConfig()
    from google.protobuf import text_format

    text_format.Parse((dest / "add_sub" / "config.pbtxt").read_text(), copied)
    assert [g.kind for g in copied.instance_group] == [CPU] and gpu_models(dest) == []
    assert copied.max_batch_size == read_config(project.root).max_batch_size
    assert run_repository(project.model_repository, dest, "cpu") == [
        "add_sub"
    ]  # a second run replaces the copy
    with pytest.raises(ServerError, match="never replaces"):
        run_repository(project.model_repository, tmp_path / "model_repository", "cpu")


@pytest.mark.skipif(gpus_visible(), reason="this machine has a GPU: KIND_GPU models load here")
def test_a_gpu_model_without_a_gpu_is_refused_naming_the_flag(tmp_path):
    project = load_project(new_project(tmp_path, "python-backend", "instance_kind=KIND_GPU"))
    with pytest.raises(ServerError, match="KIND_GPU") as refused:
        prepare_server(project)
    assert "--instance-kind cpu" in refused.value.hint
    result = run_tbgen("test", str(project.root))
    assert (
        result.returncode == 1 and "--instance-kind cpu" in result.stderr and "Traceback" not in result.stderr
    )


@pytest.mark.slow
@pytest.mark.skipif(gpus_visible(), reason="this machine has a GPU: KIND_GPU models load here")
def test_a_gpu_python_project_passes_with_instance_kind_cpu(tmp_path, server_or_skip):
    root = new_project(tmp_path, "python-backend", "instance_kind=KIND_GPU")
    before = (root / "model_repository" / "add_sub" / "config.pbtxt").read_bytes()
    result = run_tbgen("test", str(root), "--instance-kind", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    said = " ".join(result.stdout.split())  # the note is wrapped at 200 columns, wherever its path ends
    assert "KIND_CPU instances" in said and "config.pbtxt files are unchanged" in said, result.stdout
    assert (root / "model_repository" / "add_sub" / "config.pbtxt").read_bytes() == before
    assert not list(root.rglob("model_repository/*/config.pbtxt.*"))
