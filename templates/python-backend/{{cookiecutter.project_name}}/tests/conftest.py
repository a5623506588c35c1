"""Fixtures: clients of a running Triton server that serves model_repository/, and reference.py.

Start the server first (`tbgen serve`, or the Docker image: see README.md), then run `pytest`.
TRITON_HTTP_URL and TRITON_GRPC_URL say where it listens (default localhost:8000 and localhost:8001).
Without a server the tests are skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MODEL_NAME = "{{ cookiecutter.model_name }}"
URLS = {
    "http": os.environ.get("TRITON_HTTP_URL", "localhost:8000"),
    "grpc": os.environ.get("TRITON_GRPC_URL", "localhost:8001"),
}


@pytest.fixture(scope="session")
def reference() -> ModuleType:
    """The project's reference.py: make_inputs(), compute(), TOLERANCE."""
    spec = importlib.util.spec_from_file_location("reference", PROJECT_ROOT / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def connect(protocol: str, **options):
    """A client of the server over ``protocol`` ("http" or "grpc"); skips the test when none answers."""
    client_module = pytest.importorskip(f"tritonclient.{protocol}", reason="pip install 'tritonclient[all]'")
    url = URLS[protocol]
    client = client_module.InferenceServerClient(url, **options)
    try:
        live = client.is_server_live()
    except Exception as err:  # noqa: BLE001 - any connection failure means: no server here
        client.close()
        pytest.skip(f"no Triton server answers over {protocol.upper()} at {url} ({type(err).__name__}); "
                    f"start one on model_repository/ or set TRITON_{protocol.upper()}_URL")
    if not live or not client.is_model_ready(MODEL_NAME):
        client.close()
        pytest.fail(f"the server at {url} is up but model '{MODEL_NAME}' is not ready; see the server log")
    return client


@pytest.fixture(scope="session", params=["http", "grpc"])
def triton(request):
    """(protocol module, client) for each protocol in turn."""
    client = connect(request.param)
    yield importlib.import_module(f"tritonclient.{request.param}"), client
    client.close()


@pytest.fixture(scope="session")
def http_pool():
    """An HTTP client that keeps up to 8 requests in flight (async_infer)."""
    client = connect("http", concurrency=8)
    yield client
    client.close()
