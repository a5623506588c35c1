"""A Triton server that tbgen did not start and does not stop: one already running at an address (`tbgen test
--url`, `tbgen bench --url`), e.g. a `tbgen serve` in another terminal or a server in a cluster.

``parse_server_address`` reads ``--url``: the HTTP ``host:port``, gRPC on the next port up unless given as
``HTTP,GRPC``, and (for `tbgen test`) the metrics endpoint as a third part.

``RemoteServer`` gives the ``TritonServer`` interface for such a server, so that the smoke suite runs against
it as against its own. "Starting" it makes the run's models ready there: a load through the repository API
(a reload where the model's files changed) when the server allows model control (``--model-control-mode
explicit``), else a check that each is loaded and READY, whose configs as served the suite's config checks
then compare with config.pbtxt. "Stopping" it leaves it running. It has no pid, no log file and no process
this machine can see: the fuzzer does not measure its memory, a python stub's state is not known, and what
would name the log names the server's address.
"""

from __future__ import annotations

import socket
import urllib.error
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.errors import ServerError, UsageError
from triton_backend_gen.runtime.model_control import load_model, refuses_model_control
from triton_backend_gen.runtime.server import READY, ModelState, ServerOptions, TritonServer


@dataclass(frozen=True)
class ServerAddress:
    """The endpoints (host:port) of a running server."""

    http: str
    grpc: str
    metrics: str | None = None  # None: not given (Triton cannot be asked for it)


def parse_server_address(url: str, *, with_metrics: bool = True) -> ServerAddress:
    """``--url`` as "HTTP" (gRPC on the next port up), "HTTP,GRPC" or, ``with_metrics``, "HTTP,GRPC,METRICS",
    each a host:port; UsageError otherwise."""
    parts = url.split(",")
    if len(parts) > (3 if with_metrics else 2) or not all(_is_host_port(part) for part in parts):
        more = ",GRPC_HOST:PORT[,METRICS_HOST:PORT]" if with_metrics else ",GRPC_HOST:PORT"
        raise UsageError(
            f"--url {url!r} is not HOST:PORT (or HTTP_HOST:PORT[{more}]).",
            "Example: --url 127.0.0.1:8000 (gRPC on the next port, 8001), or --url "
            + (
                "127.0.0.1:8000,127.0.0.1:8001,127.0.0.1:8002"
                if with_metrics
                else "127.0.0.1:8000,127.0.0.1:9001"
            ),
        )
    host, _, port = parts[0].rpartition(":")
    grpc = parts[1] if len(parts) > 1 else f"{host}:{int(port) + 1}"
    return ServerAddress(parts[0], grpc, parts[2] if len(parts) > 2 else None)


def parse_url(url: str) -> tuple[str, str]:
    """(HTTP, gRPC) host:port from ``--url`` ("host:port", gRPC on the next port, or "http,grpc")."""
    address = parse_server_address(url, with_metrics=False)
    return address.http, address.grpc


def _is_host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and int(port) < 65536


class RemoteServer(TritonServer):
    """A running server at ``address`` whose ``models`` a run uses (see the module); ``repository`` is the
    project's model repository, whose config.pbtxt files the smoke suite plans from and compares with."""

    def __init__(self, address: ServerAddress, repository: Path, models: Sequence[str]) -> None:
        # No log file: the server's log is where its owner keeps it.
        super().__init__(ServerOptions(model_repository=repository, log_file=None))  # type: ignore[arg-type]
        self.address = address
        self.models = list(models)
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """The models ready at the server: loaded through the repository API, or found loaded and READY.
        ServerError when nothing answers there, a load fails, or a model is missing or not ready."""
        self._started = True
        self._require_answering()
        self._load_models()
        self._require_ready()

    def stop(self, timeout: float = 15) -> int:
        """Nothing: the server is not tbgen's to stop (it keeps serving, the models loaded)."""
        return 0

    def describe(self) -> str:
        return f"the server at {self.address.http}"

    @property
    def pid(self) -> int | None:
        return None  # its process, if on this machine at all, is not this run's

    def _exit_status(self) -> int | None:
        return None  # not known: `running` asks the server whether it is live instead

    @property
    def running(self) -> bool:
        """Whether the server still answers as live (what the suite asks after each check)."""
        try:
            self._request("GET", "/v2/health/live", timeout=5)
        except (OSError, ValueError, urllib.error.URLError):
            return False
        return self._started

    @property
    def http_url(self) -> str:
        return self.address.http

    @property
    def grpc_url(self) -> str:
        return self.address.grpc

    @property
    def metrics_url(self) -> str | None:  # type: ignore[override]
        return self.address.metrics

    @property
    def log_file(self) -> None:  # type: ignore[override]
        return None

    def log_text(self) -> str:
        return ""  # not this machine's to read

    def model_states(self) -> list[ModelState]:
        """The states of the run's models only: the server may serve others, which are not this run's."""
        return [state for state in super().model_states() if state.name in self.models]

    # --- starting: the models ready there ----------------------------------------------------------------
    def _require_answering(self) -> None:
        """ServerError unless the HTTP endpoint answers as live and the gRPC port takes connections."""
        if not self.running:
            raise ServerError(
                f"No Triton server answers at {self.address.http}.",
                "Start one (`tbgen serve` in the project prints its endpoints), or give --url the HTTP "
                "host:port of a running server.",
            )
        host, _, port = self.address.grpc.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
        except OSError as err:
            raise ServerError(
                f"The server at {self.address.http} answers, but nothing takes connections on its gRPC "
                f"endpoint {self.address.grpc} ({err}).",
                "Give both endpoints: --url HTTP_HOST:PORT,GRPC_HOST:PORT (`tbgen serve` prints them).",
            ) from None

    def _load_models(self) -> None:
        """Each model loaded (reloaded where its files changed) through the repository API, or a note that
        the server refuses model control (its models are then checked as they are)."""
        for name in self.models:
            try:
                load_model(self.address.http, name)
            except ServerError as err:
                if not refuses_model_control(err):
                    raise ServerError(
                        err.message,
                        f"{err.hint} Is it serving this project's model repository (`tbgen serve` in the "
                        "project does)?",
                    ) from None
                self.notes.append(
                    f"{self.describe()} does not take model control requests (it runs with "
                    "--model-control-mode none or poll): its models were tested as it serves them; start it "
                    "with --model-control-mode explicit to let --url load them"
                )
                return
        self.notes.append(
            f"loaded {', '.join(self.models)} on {self.describe()} through its repository API "
            "(a reload where the files changed)"
        )

    def _require_ready(self) -> None:
        """ServerError naming each of the run's models that the server lacks or has not READY."""
        states = self.model_states()
        ready = {s.name for s in states if s.state == READY}
        problems = [
            f"{name} ({'; '.join(_state_text(s) for s in states if s.name == name) or 'not in its index'})"
            for name in self.models
            if name not in ready
        ]
        if problems:
            raise ServerError(
                f"{self.describe()} does not serve every model of the project ready: {', '.join(problems)}.",
                "Serve the project's model repository there (`tbgen serve` in the project, whose explicit "
                "model control lets --url load the models itself); the server's log says why a "
                "model did not load.",
            )


def _state_text(state: ModelState) -> str:
    return f"{state.state or 'not loaded'}" + (f": {state.reason}" if state.reason else "")
