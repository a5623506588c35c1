"""``--instance-kind cpu|gpu|model``: a run's copy of the model repository with the instance groups rewritten.

A project made with ``--gpu`` has KIND_GPU instance groups, which a machine without a GPU refuses to load.
``--instance-kind cpu`` serves a copy of the repository (under the project's ``build/tbgen/``, never named
``model_repository``) whose instance groups are KIND_CPU: the user's files are never touched, and the CUDA
path is then not exercised. ``gpu`` does the opposite; ``model`` (the default) serves the repository as it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config import find_configs, load_model_config

text_format = lazy_module("google.protobuf.text_format")
model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

INSTANCE_KINDS = ("cpu", "gpu", "model")
_KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}  # the ModelInstanceGroup.Kind of each --instance-kind


def parse_instance_kind(text: str | None) -> str | None:
    """None for "model" or nothing (serve the configs as they are); "cpu" or "gpu"."""
    if text is None or text == "model":
        return None
    if text not in INSTANCE_KINDS:
        raise UsageError(
            f"--instance-kind {text!r} is not one of {', '.join(INSTANCE_KINDS)}.",
            "Use --instance-kind cpu to run a GPU project's models on KIND_CPU instances.",
        )
    return text


def gpu_models(repository: Path) -> list[str]:
    """The models of ``repository`` with a KIND_GPU instance group (unreadable configs are left to the
    server)."""
    found = []
    for path in find_configs(repository):
        try:
            config = load_model_config(path)
        except Exception:  # noqa: BLE001 - the server reports a broken config with its own words
            continue
        if any(group.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU for group in config.instance_group):
            found.append(config.name or path.parent.name)
    return found


def with_instance_kind(config: model_config_pb2.ModelConfig, kind: str) -> model_config_pb2.ModelConfig:
    """A copy of ``config`` whose instance groups are all of ``kind`` ("cpu" or "gpu"), one KIND_CPU/GPU group
    when it had none; a CPU group names no GPUs."""
    rewritten = model_config_pb2.ModelConfig()
    rewritten.CopyFrom(config)
    if not rewritten.instance_group:
        rewritten.instance_group.add()
    for group in rewritten.instance_group:
        group.kind = model_config_pb2.ModelInstanceGroup.Kind.Value(_KINDS[kind])
        if kind == "cpu":
            del group.gpus[:]
    return rewritten


def run_repository(source: Path, dest: Path, kind: str) -> list[str]:
    """Copy ``source`` to ``dest`` (replacing what a previous run left) with every config rewritten to
    ``kind``; the names of the models whose instance kind changed."""
    if dest.name == "model_repository" or dest.resolve() == source.resolve():
        raise ServerError(f"Refusing to rewrite {dest}: a run copy never replaces a model repository.")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, symlinks=True)
    changed = []
    for path in find_configs(dest):
        try:
            config = load_model_config(path)
        except Exception:  # noqa: BLE001 - served as it is; the server says what is wrong with it
            continue
        rewritten = with_instance_kind(config, kind)
        if rewritten != config:
            path.write_text(text_format.MessageToString(rewritten))
            changed.append(config.name or path.parent.name)
    return changed
