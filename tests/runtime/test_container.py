"""The server container's spec (pinned for the NGC image, which cannot be pulled here)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from conftest import new_project

from triton_backend_gen.docker_engine import Mount, process_start
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import container

NGC_2410 = "nvcr.io/nvidia/tritonserver:24.10-py3"


def test_server_spec_for_a_cpp_project(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend"))
    library_dir = project.root / "build" / "install" / "backends" / project.backend
    library_dir.mkdir(parents=True)
    (library_dir / f"libtriton_{project.backend}.so").write_bytes(b"")
    command = container.server_command("tbgen-1-abc", "127.0.0.1", 8000, 8001, 8002)
    mounts = container.server_mounts(
        project.model_repository, (project.backend, project.installed_backend_dir)
    )
    spec = container.server_spec(NGC_2410, command, mounts, project.root)

    assert spec["image"] == NGC_2410
    assert spec["network_mode"] == "host" and "ports" not in spec
    assert spec["volumes"] == {
        str(project.model_repository.resolve()): {"bind": "/models", "mode": "ro"},
        str(library_dir.resolve()): {"bind": f"/opt/tritonserver/backends/{project.backend}", "mode": "ro"},
    }
    assert spec["user"] == f"{os.getuid()}:{os.getgid()}"
    assert spec["environment"] == {"HOME": "/tmp"}
    assert spec["shm_size"] == "1g"
    assert spec["device_requests"] == []
    assert spec["labels"] == {
        "tbgen": "1",
        "tbgen.role": "server",
        "tbgen.project": str(project.root),
        "tbgen.owner": f"{socket.gethostname()}:{os.getpid()}:{process_start(os.getpid())}",
    }
    assert spec["command"] == command
    assert command[:4] == [
        "tritonserver",
        "--id=tbgen-1-abc",
        "--model-repository=/models",
        "--backend-directory=/opt/tritonserver/backends",
    ]
    for flag in (
        "--http-address=127.0.0.1",
        "--http-port=8000",
        "--grpc-address=127.0.0.1",
        "--grpc-port=8001",
        "--metrics-address=127.0.0.1",
        "--metrics-port=8002",
        "--exit-on-error=false",
        "--exit-timeout-secs=5",
    ):
        assert flag in command


def test_server_mounts_for_a_python_project_hold_only_the_repository(tmp_path):
    project = load_project(new_project(tmp_path, "python-backend"))
    assert container.server_mounts(project.model_repository, None) == [
        Mount(project.model_repository.resolve(), Path("/models"))
    ]
