"""Fixtures: clients of a Triton server that serves model_repository/, and reference.py.

With tbgen installed, `pytest` starts a server for this project itself (tbgen's `triton_server` fixture)
and stops it afterwards. TRITON_HTTP_URL and TRITON_GRPC_URL select a server that is already running
instead (`tbgen serve`, or the Docker image: see README.md); without tbgen they default to localhost:8000
and localhost:8001, and the tests skip, saying so, when no server answers there.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MODEL_NAME = "{{ cookiecutter.model_name }}"

{% include "conftest_server.py.j2" %}

@pytest.fixture(scope="session")
def reference() -> ModuleType:
    """The project's reference.py: make_inputs(), compute(), TOLERANCE."""
    spec = importlib.util.spec_from_file_location("reference", PROJECT_ROOT / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def connect(triton_server, protocol: str, **options):
    """A client of the server over ``protocol`` ("http" or "grpc"); skips the test when none answers.

    The triton_server fixture closes it at the end of the session."""
    client = getattr(triton_server, f"{protocol}_client")(**options)
    url = getattr(triton_server, f"{protocol}_url")
    try:
        live = client.is_server_live()
    except Exception as err:  # noqa: BLE001 - any connection failure means: no server here
        pytest.skip(f"no Triton server answers over {protocol.upper()} at {url} ({type(err).__name__}); "
                    f"install tbgen (pip install 'triton-backend-gen[server]') to start one for these tests, "
                    f"or start one on model_repository/ and set TRITON_{protocol.upper()}_URL")
    if not live or not client.is_model_ready(MODEL_NAME):
        pytest.fail(f"the server at {url} is up but model '{MODEL_NAME}' is not ready; see the server log")
    return client


@pytest.fixture(scope="session", params=["http", "grpc"])
def triton(request, triton_server):
    """(protocol module, client) for each protocol in turn."""
    return importlib.import_module(f"tritonclient.{request.param}"), connect(triton_server, request.param)


@pytest.fixture(scope="session")
def http_pool(triton_server):
    """An HTTP client that keeps up to 8 requests in flight (async_infer)."""
    return connect(triton_server, "http", concurrency=8)
