"""The container specs tbgen gives Docker (pinned for the NGC image, which cannot be pulled here), and the
engine-facing helpers that need no image."""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import new_project

from triton_backend_gen import versions
from triton_backend_gen.errors import UsageError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime import container

NGC_2410 = "nvcr.io/nvidia/tritonserver:24.10-py3"


def test_the_default_image_is_the_releases_ngc_image():
    assert container.default_image("24.10") == NGC_2410
    assert container.default_image("r25.10") == "nvcr.io/nvidia/tritonserver:25.10-py3"
    assert container.default_image("2.51.0") == NGC_2410


def test_server_spec_for_a_cpp_project(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend"))
    library_dir = project.root / "build" / "install" / "backends" / project.backend
    library_dir.mkdir(parents=True)
    (library_dir / f"libtriton_{project.backend}.so").write_bytes(b"")
    command = container.server_command("tbgen-1-abc", "127.0.0.1", 8000, 8001, 8002)
    mounts = container.server_mounts(project.model_repository, project)
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
    assert spec["labels"] == {"tbgen": "1", "tbgen.role": "server", "tbgen.project": str(project.root),
                              "tbgen.owner": f"{socket.gethostname()}:{os.getpid()}"}
    assert spec["command"] == command
    assert command[:4] == ["tritonserver", "--id=tbgen-1-abc", "--model-repository=/models",
                           "--backend-directory=/opt/tritonserver/backends"]
    for flag in ("--http-address=127.0.0.1", "--http-port=8000", "--grpc-address=127.0.0.1", "--grpc-port=8001",
                 "--metrics-address=127.0.0.1", "--metrics-port=8002", "--exit-on-error=false",
                 "--exit-timeout-secs=5"):
        assert flag in command


def test_server_mounts_for_a_python_project_hold_only_the_repository(tmp_path):
    project = load_project(new_project(tmp_path, "python-backend"))
    assert container.server_mounts(project.model_repository, project) == [
        container.Mount(project.model_repository.resolve(), Path("/models"))
    ]


def test_build_spec_and_script_for_an_offline_ngc_build(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend"))
    sources = tmp_path / "cache" / "r24.10"
    build_dir = project.root / "build" / "docker" / container.image_slug(NGC_2410)
    script = container.build_script(project, build_dir, project.root / "build" / "install", sources=sources,
                                    gpu=False, build_type="Release", jobs=None)
    spec = container.build_spec(NGC_2410, script, project, sources=sources)

    assert spec["image"] == NGC_2410
    assert spec["command"] == ["sh", "-c", script]
    assert spec["volumes"] == {
        str(project.root): {"bind": str(project.root), "mode": "rw"},
        str(sources.resolve()): {"bind": str(sources.resolve()), "mode": "ro"},
    }
    assert spec["working_dir"] == str(project.root)
    assert spec["user"] == f"{os.getuid()}:{os.getgid()}" and spec["environment"] == {"HOME": "/tmp"}
    assert spec["labels"]["tbgen.role"] == "build"
    assert "device_requests" not in spec  # compiling needs no GPU

    configure = next(shlex.split(line) for line in script.splitlines() if line.startswith("cmake -S"))
    assert configure[:5] == ["cmake", "-S", str(project.root), "-B", str(build_dir)]
    defines = dict(arg[2:].split("=", 1) for arg in configure if arg.startswith("-D"))
    assert defines["FETCHCONTENT_SOURCE_DIR_REPO-CORE"] == str(sources / "core")
    assert defines["FETCHCONTENT_FULLY_DISCONNECTED"] == "ON"
    assert defines["CMAKE_INSTALL_PREFIX"] == str(project.root / "build" / "install")
    assert defines["TRITON_ENABLE_GPU"] == "OFF"
    # Nothing of this machine's toolchain leaks into the container's command line.
    assert not [arg for arg in configure if "ccache" in arg or "/.venv/" in arg or "CMAKE_MAKE_PROGRAM" in arg]
    assert "export CMAKE_GENERATOR=Ninja" in script  # only when the image has ninja
    assert 'cmake --build' in script and "--parallel \"$(nproc)\"" in script


def test_a_gpu_build_script_names_the_images_nvcc_and_the_releases_architectures(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend", "gpu=yes"))
    release = versions.resolve("24.10")
    script = container.build_script(project, tmp_path / "b", tmp_path / "i", sources=None, gpu=True,
                                    build_type="Release", jobs=2, cuda_architectures=";".join(release.cuda_architectures))
    configure = next(shlex.split(line) for line in script.splitlines() if line.startswith("cmake -S"))
    defines = dict(arg[2:].split("=", 1) for arg in configure if arg.startswith("-D"))
    assert defines["TRITON_ENABLE_GPU"] == "ON"
    assert defines["CMAKE_CUDA_COMPILER"] == "/usr/local/cuda/bin/nvcc"
    assert defines["CMAKE_CUDA_ARCHITECTURES"] == ";".join(release.cuda_architectures)
    assert not any(key.startswith("FETCHCONTENT_SOURCE_DIR") for key in defines)  # online: FetchContent clones


class FakeEngine:
    """Only what gpu_requests reads: the engine's runtimes (an NVIDIA runtime cannot exist here)."""

    def __init__(self, runtimes):
        self._runtimes = runtimes

    def info(self):
        return {"Runtimes": self._runtimes}


def test_gpu_requests_ask_for_every_gpu_through_the_nvidia_runtime():
    (request,) = container.gpu_requests(FakeEngine({"runc": {}, "nvidia": {}}), gpu=True)
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert container.gpu_requests(FakeEngine({"runc": {}}), gpu=False) == []
    with pytest.raises(UsageError, match="NVIDIA container runtime") as refused:
        container.gpu_requests(FakeEngine({"runc": {}}), gpu=True)
    assert refused.value.exit_code == 2 and "nvidia-ctk" in refused.value.hint


def test_orphans_are_containers_whose_tbgen_on_this_host_is_gone():
    def labelled(owner):
        return SimpleNamespace(labels={"tbgen": "1", "tbgen.owner": owner})

    host = socket.gethostname()
    gone = labelled(f"{host}:999999999")
    mine = labelled(f"{host}:{os.getpid()}")
    elsewhere = labelled("another-host:999999999")
    assert container.orphans([gone, mine, elsewhere]) == [gone]


def test_image_slug_is_a_directory_name():
    assert container.image_slug(NGC_2410) == "nvcr.io_nvidia_tritonserver_24.10-py3"


def test_an_unreachable_engine_says_how_to_start_it(tmp_path, monkeypatch):
    from triton_backend_gen.errors import ServerError

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(ServerError, match="not reachable") as error:
        container.connect()
    assert "dockerd" in error.value.hint
