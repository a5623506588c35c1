"""The build container's spec and script (pinned for the NGC image, which cannot be pulled here)."""

from __future__ import annotations

import os
import shlex

from conftest import new_project

from triton_backend_gen import versions
from triton_backend_gen.project import image_slug, load_project
from triton_backend_gen.toolchain import container_build

NGC_2410 = "nvcr.io/nvidia/tritonserver:24.10-py3"


def test_build_spec_and_script_for_an_offline_ngc_build(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend"))
    sources = tmp_path / "cache" / "r24.10"
    build_dir = project.root / "build" / "docker" / image_slug(NGC_2410)
    script = container_build.build_script(
        project,
        build_dir,
        project.root / "build" / "install",
        sources=sources,
        gpu=False,
        build_type="Release",
        jobs=None,
    )
    spec = container_build.build_spec(NGC_2410, script, project, sources=sources)

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
    assert defines["TRITON_CORE_REPO_TAG"] == project.release.branch  # tbgen.toml's release wins
    # Nothing of this machine's toolchain leaks into the container's command line.
    assert not [
        arg for arg in configure if "ccache" in arg or "/.venv/" in arg or "CMAKE_MAKE_PROGRAM" in arg
    ]
    assert "export CMAKE_GENERATOR=Ninja" in script  # only when the image has ninja
    assert "cmake --build" in script and '--parallel "$(nproc)"' in script


def test_a_gpu_build_script_names_the_images_nvcc_and_the_releases_architectures(tmp_path):
    project = load_project(new_project(tmp_path, "cpp-backend", "gpu=yes"))
    release = versions.resolve("24.10")
    script = container_build.build_script(
        project,
        tmp_path / "b",
        tmp_path / "i",
        sources=None,
        gpu=True,
        build_type="Release",
        jobs=2,
        cuda_architectures=";".join(release.cuda_architectures),
    )
    configure = next(shlex.split(line) for line in script.splitlines() if line.startswith("cmake -S"))
    defines = dict(arg[2:].split("=", 1) for arg in configure if arg.startswith("-D"))
    assert defines["TRITON_ENABLE_GPU"] == "ON"
    assert defines["CMAKE_CUDA_COMPILER"] == "/usr/local/cuda/bin/nvcc"
    assert defines["CMAKE_CUDA_ARCHITECTURES"] == ";".join(release.cuda_architectures)
    assert not any(
        key.startswith("FETCHCONTENT_SOURCE_DIR") for key in defines
    )  # online: FetchContent clones
