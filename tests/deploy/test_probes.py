"""`tbgen deploy local`'s reading of the chart's pod spec, and its probes run as the kubelet runs them,
against a real HTTP server on loopback (no container)."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest
from conftest import new_project
from deploy_support import deploy_tools_or_skip

from triton_backend_gen.deploy import render_helm
from triton_backend_gen.deploy.chart import template_chart
from triton_backend_gen.deploy.local import (
    ADDRESS_FLAGS,
    Probe,
    ProbeMonitor,
    deployment_of,
    docker_spec,
    pod_container,
)
from triton_backend_gen.deploy.values import DeployError
from triton_backend_gen.project import load_project
from triton_backend_gen.runtime.server import free_port


@pytest.fixture(scope="module")
def deploy_tools() -> Path:
    return deploy_tools_or_skip()


class Health:
    """A server answering /ready with 503 for its first ``not_ready`` requests, then 200; /live with 200 until
    ``dead`` is set; every answer after ``delay`` seconds."""

    def __init__(self, not_ready: int = 0, delay: float = 0.0) -> None:
        self.not_ready, self.delay, self.dead, self.requests = not_ready, delay, False, []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                owner.requests.append((time.monotonic(), self.path, self.headers.get("User-Agent")))
                time.sleep(owner.delay)
                if self.path == "/ready":
                    code = 503 if owner.not_ready > 0 else 200
                    owner.not_ready -= 1
                else:
                    code = 500 if owner.dead else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def probe(
        self,
        kind: str,
        path: str,
        *,
        period: int = 1,
        timeout: int = 1,
        success: int = 1,
        failure: int = 3,
        initial_delay: int = 0,
    ) -> Probe:
        return Probe(kind, path, self.port, initial_delay, period, timeout, success, failure)


def test_the_startup_probe_passes_after_failures_below_its_threshold_once_a_period():
    with Health(not_ready=2) as health:
        monitor = ProbeMonitor({"startup": health.probe("startup", "/ready")}, alive=lambda: True)
        started = monitor.wait_started()
    times = [t for t, _, _ in health.requests]
    assert len(times) == 3 and 1.9 < started < 3.0
    assert all(0.9 < later - earlier < 1.3 for earlier, later in zip(times, times[1:], strict=False))
    assert {agent for _, _, agent in health.requests} == {"kube-probe"}
    [result] = monitor.results()
    assert result.passed and "3 probes, 2 failed" in result.detail


def test_the_startup_probe_trips_at_its_failure_threshold_as_the_kubelet_would_restart():
    with Health(not_ready=100) as health:
        monitor = ProbeMonitor({"startup": health.probe("startup", "/ready", failure=3)}, alive=lambda: True)
        with pytest.raises(DeployError, match="failed 3 times in a row .* the kubelet would restart"):
            monitor.wait_started()
    assert len(health.requests) == 3


def test_an_answer_slower_than_the_timeout_is_a_failure():
    with Health(delay=1.5) as health:
        monitor = ProbeMonitor(
            {"startup": health.probe("startup", "/ready", timeout=1, failure=2)}, alive=lambda: True
        )
        with pytest.raises(DeployError, match="timed out"):
            monitor.wait_started()


def test_a_container_that_exits_fails_the_startup_at_once():
    with Health(not_ready=100) as health:
        monitor = ProbeMonitor(
            {"startup": health.probe("startup", "/ready", failure=30)}, alive=lambda: False
        )
        with pytest.raises(DeployError, match="exited before its startup probe passed"):
            monitor.wait_started()


def test_readiness_needs_its_success_threshold_and_liveness_trips_after_its_failures():
    with Health(not_ready=1) as health:
        monitor = ProbeMonitor(
            {
                "startup": health.probe("startup", "/live"),
                "readiness": health.probe("readiness", "/ready", success=2),
                "liveness": health.probe("liveness", "/live", failure=2),
            },
            alive=lambda: True,
        )
        monitor.wait_started()
        monitor.run_in_background()
        ready_after = monitor.wait_ready(timeout=10)
        assert monitor.records["readiness"].attempts == 3 and ready_after > 1.9  # 503, then two 200s
        health.dead = True
        time.sleep(2.5)
        monitor.halt()
    results = {r.name: r for r in monitor.results()}
    assert results["startup probe"].passed and results["readiness probe"].passed
    assert (
        not results["liveness probe"].passed
        and "the kubelet would have restarted it" in results["liveness probe"].detail
    )


def test_the_pod_spec_of_the_chart_becomes_the_containers_settings(tmp_path, deploy_tools):
    project = load_project(new_project(tmp_path, "python-backend", name="pods"))
    chart = render_helm(project).directory
    pod = pod_container(deployment_of(template_chart(chart, release="t")))
    assert pod.image == "pods:latest" and pod.command == ("tritonserver",)
    assert pod.args[:4] == (
        "--model-repository=/models",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
    )
    assert pod.ports == {"http": 8000, "grpc": 8001, "metrics": 8002} and pod.env == {"HOME": "/tmp"}
    assert pod.shm_bytes == 2**30 and pod.tmpfs == ("/tmp",) and pod.user == "1000:1000"
    assert pod.read_only and pod.drop_all and pod.no_new_privileges and pod.gpus == 0
    assert pod.memory_limit == 4 * 2**30 and pod.nano_cpus == 4 * 10**9
    assert pod.probes["startup"] == Probe("startup", "/v2/health/ready", 8000, 0, 5, 2, 1, 60)
    assert pod.probes["liveness"].path == "/v2/health/live"
    spec = docker_spec(pod, {"tbgen": "1"})
    assert spec["entrypoint"] == ["tritonserver"] and spec["network_mode"] == "host"
    assert spec["command"][-3:] == [f"{flag}=127.0.0.1" for flag in ADDRESS_FLAGS]
    assert spec["user"] == "1000:1000" and spec["read_only"] and spec["tmpfs"] == {"/tmp": ""}
    assert (
        spec["shm_size"] == 2**30
        and spec["cap_drop"] == ["ALL"]
        and spec["security_opt"] == ["no-new-privileges"]
    )
