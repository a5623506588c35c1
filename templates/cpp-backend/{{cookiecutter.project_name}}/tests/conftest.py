"""Fixtures for testing model "{{ cookiecutter.model_name }}" on a Triton server.

With tbgen installed, `pytest tests` starts a server with this backend and model repository itself
(tbgen's `triton_server` fixture; build the backend first with `tbgen build`) and stops it afterwards.
TRITON_HTTP_URL and TRITON_GRPC_URL select a server that is already running instead; without tbgen they
default to localhost:8000 and localhost:8001, and the tests skip, saying so, when no server answers there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

import reference  # noqa: E402  (the project's numpy reference)

MODEL_NAME = "{{ cookiecutter.model_name }}"

{% include "conftest_server.py.j2" %}

def _ready_client(client, url: str, variable: str):
    try:
        live = client.is_server_live()
    except Exception as err:  # connection refused, DNS, timeouts: no server to test against
        pytest.skip(f"no Triton server answers at {url}: {err}; install tbgen (pip install "
                    f"'triton-backend-gen[server]') to start one for these tests, or set {variable}")
    if not live:
        pytest.skip(f"the Triton server at {url} is not live (set {variable})")
    assert client.is_model_ready(MODEL_NAME), (
        f"the server at {url} is up but model '{MODEL_NAME}' is not ready; see the server log"
    )
    return client


@pytest.fixture(scope="session")
def http_client(triton_server):
    """An HTTP client of the server; the triton_server fixture closes it at the end of the session."""
    return _ready_client(triton_server.http_client(), triton_server.http_url, "TRITON_HTTP_URL")


@pytest.fixture(scope="session")
def grpc_client(triton_server):
    """A gRPC client of the server; the triton_server fixture closes it at the end of the session."""
    return _ready_client(triton_server.grpc_client(), triton_server.grpc_url, "TRITON_GRPC_URL")


@pytest.fixture(scope="session")
def ref():
    return reference
