"""Fixtures for the tests of {{ cookiecutter.project_name }}: gRPC clients of a Triton server.

With tbgen installed, `pytest` starts a server for this project itself (tbgen's `triton_server` fixture)
and stops it afterwards. TRITON_GRPC_URL selects a server that is already running instead (`tbgen serve`,
or the Docker image: see README.md); without tbgen it defaults to localhost:8001, and the tests skip,
saying so, when no server answers there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
MODEL_NAME = "{{ cookiecutter.model_name }}"

# reference.py sits at the project's root.
sys.path.insert(0, str(PROJECT_DIR))

{% include "conftest_server.py.j2" %}

@pytest.fixture(scope="session")
def grpcclient():
    """The tritonclient.grpc module."""
    return pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")


@pytest.fixture(scope="session")
def server_url(grpcclient, triton_server) -> str:
    """The server's gRPC address once it answers there with the model ready; skips when no server answers."""
    from tritonclient.utils import InferenceServerException

    url = triton_server.grpc_url
    client = triton_server.grpc_client()
    try:
        live = client.is_server_live(client_timeout=5)
    except InferenceServerException as err:
        pytest.skip(f"no Triton server answers at {url}: {err}; install tbgen (pip install "
                    "'triton-backend-gen[server]') to start one for these tests, or set TRITON_GRPC_URL")
    if not live:
        pytest.skip(f"the Triton server at {url} is not live")
    if not client.is_model_ready(MODEL_NAME, client_timeout=5):
        pytest.fail(f"the server at {url} answers but model '{MODEL_NAME}' is not ready; see its log")
    return url


@pytest.fixture
def client(grpcclient, server_url):
    """A fresh gRPC client (one stream at a time per client)."""
    with grpcclient.InferenceServerClient(server_url) as client:
        yield client
