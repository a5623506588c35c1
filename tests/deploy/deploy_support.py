"""Helpers of the deploy tests (not a conftest.py: `from conftest import` must keep meaning
tests/conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from triton_backend_gen.deploy.tools import find_helm
from triton_backend_gen.errors import TbgenError


def deploy_tools_or_skip() -> Path:
    """The helm tbgen deploy uses (the deploy extra's, unpacked into the cache, or one on PATH), once
    kubernetes-validate, jsonschema and yamllint import too; else skip naming what is missing."""
    missing = [
        name
        for name in ("kubernetes_validate", "jsonschema", "yamllint")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install 'triton-backend-gen[deploy]'")
    try:
        return find_helm()
    except TbgenError as err:
        pytest.skip(f"no helm: {err.message} ({err.hint})")
