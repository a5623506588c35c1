"""Fixtures for testing model "{{ cookiecutter.model_name }}" on a running Triton server.

Start a server with this backend and model repository (`tbgen test` does it for you), then run
`pytest tests`. TRITON_HTTP_URL and TRITON_GRPC_URL select the server (default localhost:8000 and
localhost:8001); without a server answering there, the tests skip and say so.
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
HTTP_URL = os.environ.get("TRITON_HTTP_URL", "localhost:8000")
GRPC_URL = os.environ.get("TRITON_GRPC_URL", "localhost:8001")


def _ready_client(module, url: str, variable: str):
    client = module.InferenceServerClient(url)
    try:
        live = client.is_server_live()
    except Exception as err:  # connection refused, DNS, timeouts: no server to test against
        pytest.skip(f"no Triton server answers at {url} (set {variable}): {err}")
    if not live:
        pytest.skip(f"the Triton server at {url} is not live (set {variable})")
    assert client.is_model_ready(MODEL_NAME), (
        f"the server at {url} is up but model '{MODEL_NAME}' is not ready; see the server log"
    )
    return client


@pytest.fixture(scope="session")
def http_client():
    import tritonclient.http as httpclient

    client = _ready_client(httpclient, HTTP_URL, "TRITON_HTTP_URL")
    yield client
    client.close()


@pytest.fixture(scope="session")
def grpc_client():
    import tritonclient.grpc as grpcclient

    client = _ready_client(grpcclient, GRPC_URL, "TRITON_GRPC_URL")
    yield client
    client.close()


@pytest.fixture(scope="session")
def ref():
    return reference
