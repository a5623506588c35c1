"""The Docker engine helpers that need no image: default images, GPU requests, orphans, names, errors."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from triton_backend_gen import docker_engine as engine
from triton_backend_gen import versions
from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.project import image_slug

NGC_2410 = "nvcr.io/nvidia/tritonserver:24.10-py3"


def test_the_default_image_is_the_releases_ngc_image():
    assert engine.default_image(versions.resolve("24.10")) == NGC_2410
    assert engine.default_image(versions.resolve("r25.10")) == "nvcr.io/nvidia/tritonserver:25.10-py3"


class FakeEngine:
    """Only what gpu_requests reads: the engine's runtimes (an NVIDIA runtime cannot exist here)."""

    def __init__(self, runtimes):
        self._runtimes = runtimes

    def info(self):
        return {"Runtimes": self._runtimes}


def test_gpu_requests_ask_for_every_gpu_through_the_nvidia_runtime():
    (request,) = engine.gpu_requests(FakeEngine({"runc": {}, "nvidia": {}}), gpu=True)
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert engine.gpu_requests(FakeEngine({"runc": {}}), gpu=False) == []
    with pytest.raises(UsageError, match="NVIDIA container runtime") as refused:
        engine.gpu_requests(FakeEngine({"runc": {}}), gpu=True)
    assert refused.value.exit_code == 2 and "nvidia-ctk" in refused.value.hint


def test_orphans_are_containers_whose_tbgen_on_this_host_is_gone():
    def labelled(owner):
        return SimpleNamespace(labels={"tbgen": "1", "tbgen.owner": owner})

    host = socket.gethostname()
    gone = labelled(f"{host}:999999999:12345")
    mine = labelled(engine.owner())
    # A tbgen that died and whose pid now belongs to another process (this one, started at another time).
    reused = labelled(f"{host}:{os.getpid()}:{int(engine.process_start(os.getpid())) + 1}")
    older_label = labelled(f"{host}:999999999")
    elsewhere = labelled("another-host:999999999:1")
    assert engine.owner().startswith(f"{host}:{os.getpid()}:")
    assert engine.orphans([gone, mine, reused, older_label, elsewhere]) == [gone, reused, older_label]


def test_image_slug_is_a_directory_name():
    assert image_slug(NGC_2410) == "nvcr.io_nvidia_tritonserver_24.10-py3"


def test_an_unreachable_engine_says_how_to_start_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(ServerError, match="not reachable") as error:
        engine.connect()
    assert "dockerd" in error.value.hint


def test_a_script_container_runs_sh_as_the_invoking_user_with_tbgens_labels(tmp_path):
    mounts = [engine.Mount(tmp_path, Path("/work"), read_only=False)]
    spec = engine.script_spec(
        "img",
        "set -e\ntrue",
        mounts,
        engine.ROLE_BUILD,
        tmp_path,
        environment={"PIP_INDEX_URL": "file:///idx"},
    )
    assert spec["image"] == "img" and spec["command"] == ["sh", "-c", "set -e\ntrue"] and spec["detach"]
    assert (
        spec["volumes"] == {str(tmp_path): {"bind": "/work", "mode": "rw"}} and spec["network_mode"] == "host"
    )
    assert spec["user"] == f"{os.getuid()}:{os.getgid()}" and "working_dir" not in spec
    assert spec["environment"] == {"HOME": "/tmp", "PIP_INDEX_URL": "file:///idx"}
    assert spec["labels"][engine.ROLE_LABEL] == "build" and spec["labels"][engine.PROJECT_LABEL] == str(
        tmp_path
    )
    pinned = engine.script_spec(
        "img", "true", [], engine.ROLE_BUILD, tmp_path, working_dir=tmp_path, user="1:2"
    )
    assert pinned["working_dir"] == str(tmp_path) and pinned["user"] == "1:2" and pinned["volumes"] == {}


class RemovedElsewhere:
    """A container another client is removing: the engine refuses a second removal with 409 until it is gone
    (what a daemon under load answered in CI-like runs); gone after ``reloads`` looks."""

    name = "busy"

    def __init__(self, reloads: int):
        self.reloads = reloads

    def remove(self, force: bool) -> None:
        response = SimpleNamespace(status_code=409, reason="Conflict", url="")
        raise engine.docker_errors.APIError(
            "conflict", response=response, explanation="removal of container busy is already in progress"
        )

    def reload(self) -> None:
        self.reloads -= 1
        if self.reloads < 0:
            raise engine.docker_errors.NotFound("gone")


def test_a_container_being_removed_elsewhere_is_waited_for_not_an_error():
    container = RemovedElsewhere(reloads=2)
    assert engine.remove_containers([container]) == ["busy"]
    assert container.reloads == -1
