"""Which launcher serves a run, and with what: the runtime's entry point (``prepare_server``,
``start_server``).

For a project: its model repository (or a run copy of it, see ``runtime.instance_kind``), the log at
``<project>/build/tbgen/server.log`` and the backend tree under ``<project>/build/tbgen/``. For a bare model
repository: a temporary directory holds the backend tree and the log.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

from triton_backend_gen import versions
from triton_backend_gen.discovery import find_tritonserver, gpus_visible
from triton_backend_gen.docker_engine import default_image
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.project import Project
from triton_backend_gen.runtime.backend_dir import assemble_backend_dir, project_backend_dir
from triton_backend_gen.runtime.container import ContainerServer, server_mounts
from triton_backend_gen.runtime.control_mode import control_mode_args
from triton_backend_gen.runtime.execution_envs import check_execution_envs
from triton_backend_gen.runtime.instance_kind import gpu_models, run_repository
from triton_backend_gen.runtime.local import LocalServer
from triton_backend_gen.runtime.release_note import release_note
from triton_backend_gen.runtime.server import ServerOptions, TritonServer

RUN_REPOSITORY = "models"  # <work dir>/models: a run's rewritten copy (never called model_repository)


def prepare_server(
    target: Project | Path,
    *,
    server: Path | None = None,
    python: Path = Path(sys.executable),
    docker: bool = False,
    image: str | None = None,
    gpu: bool = False,
    mount: bool = True,
    instance_kind: str | None = None,
    **overrides: Any,
) -> TritonServer:
    """A server (not started) for a project or a bare model repository (a directory of models).

    ``overrides`` set ServerOptions fields (http_port=8000, verbose=True, ...). With ``docker`` the server
    runs in a container of ``image`` (default: the NGC image of the project's release, or of the newest
    release for a bare repository), with all GPUs when ``gpu``; ``mount=False`` serves the image's own /models
    and backends (an image made by `tbgen package`). ``instance_kind`` ("cpu" or "gpu") serves a copy of the
    repository with every instance group of that kind; without it, KIND_GPU models where no GPU is visible are
    refused here with the fix, before a server starts."""
    project = target if isinstance(target, Project) else None
    work_dir, repository = _work_dir_and_repository(target)
    notes: list[str] = []
    if instance_kind is not None and mount:
        repository = _run_copy(repository, work_dir / RUN_REPOSITORY, instance_kind, notes)
    elif mount and not (gpu if docker else gpus_visible()):
        _refuse_gpu_models(repository, docker)
    options = dataclasses.replace(
        ServerOptions(model_repository=repository, log_file=work_dir / "server.log"), **overrides
    )
    if project is not None and project.batched_models and not _controls_models(options.extra_args):
        # The batching strategy check loads its model again with a long queue delay (smoke.batching).
        options.extra_args += control_mode_args("explicit", project=True)[1]
    triton = (
        _container_server(project, options, image, gpu=gpu, mount=mount)
        if docker
        else _local_server(project, options, work_dir, server, python)
    )
    triton.notes += notes
    check_execution_envs(triton, repository, work_dir)
    if project is None:
        triton.remove_on_stop += [work_dir / "backends", work_dir / "lib", work_dir / RUN_REPOSITORY]
    return triton


def _controls_models(args: tuple[str, ...]) -> bool:
    """Whether tritonserver ``args`` choose a model control mode already."""
    return any(arg.startswith("--model-control-mode") for arg in args)


def _work_dir_and_repository(target: Project | Path) -> tuple[Path, Path]:
    """(where the run's files go, the model repository) of a project or a bare model repository."""
    if isinstance(target, Project):
        return target.runtime_dir, target.model_repository
    if is_model_repository(Path(target)):
        return Path(tempfile.mkdtemp(prefix="tbgen-server-")), Path(target).resolve()
    raise UsageError(
        f"{target} is neither a tbgen project (no tbgen.toml here or above) nor a model repository "
        "(a directory of model directories, each with a config.pbtxt or a version directory).",
        "Run it in a project made by `tbgen new`, or pass a project or a model repository.",
    )


def is_model_repository(path: Path) -> bool:
    """Whether ``path`` is a directory holding at least one model: a directory with a config.pbtxt or a
    numbered version directory."""
    if not path.is_dir():
        return False
    return any(
        model.is_dir()
        and (
            (model / "config.pbtxt").is_file()
            or any(v.is_dir() and v.name.isdigit() for v in model.iterdir())
        )
        for model in path.iterdir()
    )


def _run_copy(repository: Path, dest: Path, kind: str, notes: list[str]) -> Path:
    """``dest``: a copy of ``repository`` with every instance group of ``kind`` (what changed goes to
    notes)."""
    changed = run_repository(repository, dest, kind)
    if changed:
        notes.append(
            f"serving a copy of the models with KIND_{kind.upper()} instances ({', '.join(changed)}) in "
            f"{dest}; your config.pbtxt files are unchanged"
            + ("; the CUDA path is not exercised" if kind == "cpu" else "")
        )
    return dest


def start_server(target: Project | Path, **options: Any) -> TritonServer:
    """``prepare_server`` and start it (ready to use); what `tbgen serve` and `tbgen infer` run."""
    triton = prepare_server(target, **options)
    triton.start()
    return triton


def _local_server(
    project: Project | None, options: ServerOptions, work_dir: Path, server: Path | None, python: Path
) -> LocalServer:
    install = find_tritonserver(server)
    triton = LocalServer(install, assemble_backend_dir(install, work_dir, project, python), options)
    triton.release_note = release_note(project, install) if project is not None else None
    return triton


def _container_server(
    project: Project | None, options: ServerOptions, image: str | None, *, gpu: bool, mount: bool
) -> ContainerServer:
    release = project.release if project is not None else versions.default_release()
    mounts = []
    if mount:
        own = project_backend_dir(project) if project is not None else None
        mounts = server_mounts(options.model_repository, (project.backend, own) if own is not None else None)
    labelled = project.root if project is not None else options.model_repository
    return ContainerServer(image or default_image(release), options, mounts, labelled, gpu=gpu)


def _refuse_gpu_models(repository: Path, docker: bool) -> None:
    models = gpu_models(repository)
    if models:
        where = "the container gets no GPU (no --gpu)" if docker else "this machine has no visible GPU"
        raise ServerError(
            f"{', '.join(models)} asks for KIND_GPU instances, and {where}: the server would refuse to "
            "load it.",
            "Run with --instance-kind cpu (a copy of the models on KIND_CPU instances; the CUDA path is "
            "then not exercised)" + (", or add --gpu." if docker else ", or run on a machine with a GPU."),
        )
