"""Model control through a running server's repository API (HTTP): load, reload, unload, the index.

Triton allows these only when it runs with ``--model-control-mode=explicit`` (tbgen's default for a project's
server, with ``--load-model=*``); a server in ``none`` or ``poll`` mode refuses them ("explicit model load /
unload is not allowed if polling is enabled"), which :func:`load_model` reports as such.

A load of a model that is already loaded reloads it when its files changed since (Triton compares their
modification times) and is a no-op otherwise; a load that fails leaves the version that was serving in place.
A load may carry the whole model configuration as JSON (``config``): the server then ignores config.pbtxt.
`tbgen dev` uses that to point a C++ model at a fresh copy of its backend library (the ``runtime`` field),
since the server keeps a library it has opened and opens a new one only under a new path.
"""

from __future__ import annotations

import json
import urllib.error

from triton_backend_gen.errors import ServerError
from triton_backend_gen.lazy import lazy_module

urllib_request = lazy_module("urllib.request")

LOAD_TIMEOUT_S = 120.0


def load_model(http_url: str, name: str, config: dict | None = None, timeout: float = LOAD_TIMEOUT_S) -> None:
    """Load (or reload) model ``name`` on the server at ``http_url`` (host:port), with ``config`` (the
    ModelConfig as a JSON dict) in place of its config.pbtxt when given. ServerError with the server's reason
    when the load fails or the server refuses model control."""
    body = {"parameters": {"config": json.dumps(config)}} if config is not None else {}
    _post(http_url, f"/v2/repository/models/{name}/load", body, timeout, f"load model '{name}'")


def unload_model(http_url: str, name: str, timeout: float = LOAD_TIMEOUT_S) -> None:
    """Unload model ``name`` (ServerError with the server's reason when it refuses)."""
    _post(http_url, f"/v2/repository/models/{name}/unload", {}, timeout, f"unload model '{name}'")


def repository_index(http_url: str, timeout: float = 5.0) -> list[dict]:
    """The server's repository index: one dict per model version (name, version, state, reason)."""
    return _post(http_url, "/v2/repository/index", {}, timeout, "read the repository index") or []


def refuses_model_control(err: ServerError) -> bool:
    """Whether ``err`` (of load_model or unload_model) is the server refusing model control: Triton answers
    "explicit model load / unload is not allowed if polling is enabled" in none and poll mode."""
    return "is not allowed" in err.message


def _post(http_url: str, path: str, body: dict, timeout: float, what: str):
    request = urllib_request.Request(
        f"http://{http_url}{path}", data=json.dumps(body).encode(), method="POST"
    )
    opener = urllib_request.build_opener(urllib_request.ProxyHandler({}))  # never through a proxy
    try:
        with opener.open(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        reason = _error_text(err)
        raise ServerError(
            f"The server at {http_url} could not {what}: {reason}",
            _hint(reason),
        ) from None
    except (OSError, urllib.error.URLError) as err:
        raise ServerError(
            f"No Triton server answers at {http_url} ({err}).",
            "Start one (`tbgen serve`), or pass the HTTP address of a running server.",
        ) from None


def _error_text(err) -> str:
    """The ``error`` of Triton's JSON error body, else the HTTP status."""
    try:
        return str(json.loads(err.read() or b"{}").get("error") or f"HTTP {err.code}")
    except ValueError:
        return f"HTTP {err.code}"


def _hint(reason: str) -> str:
    if "not allowed" in reason and ("polling" in reason or "explicit" in reason):
        return (
            "The server does not take model control requests: start it with --model-control-mode explicit "
            "(`tbgen serve` does so for a project by default)."
        )
    return "The server's log has the details of the load."
