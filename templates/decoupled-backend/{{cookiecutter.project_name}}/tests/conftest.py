"""Fixtures for the tests of {{ cookiecutter.project_name }}: clients of a running Triton server.

Start a server on model_repository/ (for example `tbgen serve`, or the Docker image of the README) and run
`pytest tests`. The server is found at TRITON_GRPC_URL (default localhost:8001); without one answering
there, the tests skip and say so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
MODEL_NAME = "{{ cookiecutter.model_name }}"
GRPC_URL = os.environ.get("TRITON_GRPC_URL", "localhost:8001")

# reference.py sits at the project's root.
sys.path.insert(0, str(PROJECT_DIR))


@pytest.fixture(scope="session")
def grpcclient():
    """The tritonclient.grpc module."""
    return pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")


@pytest.fixture(scope="session")
def server_url(grpcclient) -> str:
    """GRPC_URL once a server answers there and has the model ready; skips when no server answers."""
    from tritonclient.utils import InferenceServerException

    with grpcclient.InferenceServerClient(GRPC_URL) as client:
        try:
            live = client.is_server_live(client_timeout=5)
        except InferenceServerException as err:
            pytest.skip(f"no Triton server answers at {GRPC_URL} (set TRITON_GRPC_URL): {err}")
        if not live:
            pytest.skip(f"the Triton server at {GRPC_URL} is not live")
        if not client.is_model_ready(MODEL_NAME, client_timeout=5):
            pytest.fail(f"the server at {GRPC_URL} answers but model '{MODEL_NAME}' is not ready; see its log")
    return GRPC_URL


@pytest.fixture
def client(grpcclient, server_url):
    """A fresh gRPC client (one stream at a time per client)."""
    with grpcclient.InferenceServerClient(server_url) as client:
        yield client
