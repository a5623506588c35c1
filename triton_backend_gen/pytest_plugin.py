"""pytest plugin (entry point ``pytest11``): fixtures for testing Triton backends.

- ``triton_server`` (session): a running Triton server with clients. With TRITON_HTTP_URL or
  TRITON_GRPC_URL set, the server already running there; otherwise tbgen starts one for the tbgen project
  found at or above pytest's rootdir (or the current directory) and stops it after the session. Fails
  when a model of the repository does not load, showing the server log's relevant lines.
- ``tbgen_project``: a factory that renders one of tbgen's templates into tmp_path.

The plugin loads with every pytest run of the environment: the slow third-party modules behind tbgen's stages
load only when a fixture uses them (triton_backend_gen.lazy).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from triton_backend_gen.discovery import find_tritonserver
from triton_backend_gen.errors import TbgenError
from triton_backend_gen.project import find_project_root, load_project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.scaffold import render_new_project

HTTP_URL_VARIABLE = "TRITON_HTTP_URL"
GRPC_URL_VARIABLE = "TRITON_GRPC_URL"


class ServerHandle:
    """What ``triton_server`` yields: where the server listens, and client factories closed at teardown."""

    def __init__(self, http_url: str | None, grpc_url: str | None, server: Any = None) -> None:
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.server = server  # the TritonServer tbgen started, or None for a server given by URL
        self._clients: list[Any] = []

    @property
    def log_file(self) -> Path | None:
        return self.server.log_file if self.server is not None else None

    def http_client(self, **options: Any):
        """A new tritonclient.http.InferenceServerClient of this server (``options``: concurrency=, ...)."""
        return self._client("http", self.http_url, HTTP_URL_VARIABLE, options)

    def grpc_client(self, **options: Any):
        """A new tritonclient.grpc.InferenceServerClient of this server."""
        return self._client("grpc", self.grpc_url, GRPC_URL_VARIABLE, options)

    def close(self) -> None:
        """Close every client the factories made (streams included)."""
        while self._clients:
            client = self._clients.pop()
            # A client broken by its test must not keep the others open.
            with contextlib.suppress(Exception):
                if hasattr(client, "stop_stream"):
                    client.stop_stream(cancel_requests=True)
                client.close()

    def _client(self, protocol: str, url: str | None, variable: str, options: dict[str, Any]):
        if url is None:
            pytest.skip(f"no {protocol.upper()} URL for the Triton server under test (set {variable})")
        module = pytest.importorskip(
            f"tritonclient.{protocol}", reason=f"pip install 'tritonclient[{protocol}]'"
        )
        client = module.InferenceServerClient(url, **options)
        self._clients.append(client)
        return client


def project_root_for(config: pytest.Config) -> Path | None:
    """The tbgen project at or above pytest's rootdir, else at or above the directory pytest was run in."""
    for start in (Path(config.rootpath), Path(config.invocation_params.dir)):
        root = find_project_root(start)
        if root is not None:
            return root
    return None


@pytest.fixture(scope="session")
def triton_server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    """A running Triton server for the session (see the module docstring)."""
    http_url, grpc_url = os.environ.get(HTTP_URL_VARIABLE), os.environ.get(GRPC_URL_VARIABLE)
    if http_url or grpc_url:
        handle = ServerHandle(http_url, grpc_url)
        yield handle
        handle.close()
        return

    server = _start_project_server(request.config)
    handle = ServerHandle(server.http_url, server.grpc_url, server)
    try:
        _fail_unless_models_ready(server)
        yield handle
    finally:
        handle.close()
        server.stop()


def _start_project_server(config: pytest.Config) -> Any:
    """A started TritonServer for the project at or above pytest's rootdir; skips the tests when there is no
    project or no tritonserver, fails them when the server does not start."""
    root = project_root_for(config)
    if root is None:
        pytest.skip(
            f"no tbgen project (tbgen.toml) at or above {config.rootpath}, and neither "
            f"{HTTP_URL_VARIABLE} nor {GRPC_URL_VARIABLE} is set"
        )
    try:
        find_tritonserver()
    except TbgenError as err:
        pytest.skip(f"no tritonserver to test against: {err.message} ({err.hint})")
    try:
        server = prepare_server(load_project(root))
        server.start()
    except TbgenError as err:
        pytest.fail(f"could not start Triton for {root}: {err}", pytrace=False)
    return server


def _fail_unless_models_ready(server: Any) -> None:
    """Fail the tests when a model of the server is not READY, with the server log's relevant lines."""
    failed = [state for state in server.model_states() if state.state != "READY"]
    if failed:
        names = ", ".join(f"{state.name} ({state.state or 'not loaded'})" for state in failed)
        lines = "\n".join(server.relevant_log_lines())
        pytest.fail(f"models not ready: {names}\n{lines}\nFull log: {server.log_file}", pytrace=False)


@pytest.fixture
def tbgen_project(tmp_path: Path) -> Callable[..., Path]:
    """``tbgen_project(template, project_name="my-backend", **answers)`` renders a project into tmp_path and
    returns its directory (answers are validated as `tbgen new` validates them)."""

    def render(template: str, project_name: str = "my-backend", **answers: Any) -> Path:
        return render_new_project(template, tmp_path / project_name, answers)

    return render
