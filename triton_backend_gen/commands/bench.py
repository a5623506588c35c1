"""`tbgen bench`: plan the benchmark, then measure a running server, or build and start the project's own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from triton_backend_gen.errors import ServerError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.perf import BenchReport, plan_bench
from triton_backend_gen.project import Project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.remote import parse_url
from triton_backend_gen.signals import stop_on_signals
from triton_backend_gen.toolchain.ensure_built import ensure_built

np = lazy_module("numpy")


def run_bench(
    project: Project,
    *,
    model: str | None = None,
    protocol: str = "grpc",
    concurrency: list[int] = (1, 8),
    seconds: float = 10.0,
    batch_size: int = 1,
    tool: str = "auto",
    url: str | None = None,
    server_pid: int | None = None,
    server: Path | None = None,
    instance_kind: str | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> BenchReport:
    """Benchmark ``model`` (default: the project's first) of ``project``.

    ``url`` (HTTP host:port of a running server; gRPC is taken on the next port up unless it is given as
    ``http,grpc``) skips starting one (``server_pid``, when known, gives its CPU use)."""
    bench = plan_bench(
        project, model=model, protocol=protocol, batch_size=batch_size, tool=tool, inputs=inputs
    )
    if url:
        http_url, grpc_url = parse_url(url)
        return bench.measure(
            http_url, grpc_url, server_pid, f"the server at {http_url}", concurrency, seconds, progress
        )
    ensure_built(project, server)
    triton = prepare_server(project, server=server, instance_kind=instance_kind)
    with stop_on_signals(), triton:
        name = bench.spec.name
        not_ready = [m for m in triton.model_states() if m.name == name and m.state != "READY"]
        if not_ready:
            raise ServerError(f"{name} did not load: {not_ready[0].reason}", f"Server log: {triton.log_file}")
        return bench.measure(
            triton.http_url, triton.grpc_url, triton.pid, triton.describe(), concurrency, seconds, progress
        )
