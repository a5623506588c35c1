"""Third-party modules that take long to import, imported when first used.

``tbgen --help`` and ``tbgen new`` should start at once, yet the modules behind the other commands import
docker, tritonclient (with grpc and protobuf), numpy and cookiecutter, which take most of a second together.
Each tbgen module imports those through ``lazy_module`` at its top, as it would import them, and the import
happens on the first attribute taken from them (``np.zeros``, ``model_config_pb2.ModelConfig``)::

    np = lazy_module("numpy")
    model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

tbgen's own modules are imported as usual; only third-party modules, and the few heavy modules of the
standard library that only some commands use (asyncio, urllib.request with http.client), go through here.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _LazyModule(types.ModuleType):
    """A module imported on its first attribute access; afterwards it forwards to the real one."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = None

    def __getattr__(self, attribute: str) -> Any:
        target = self.__dict__["_lazy_target"]
        if target is None:
            target = self.__dict__["_lazy_target"] = importlib.import_module(self.__name__)
        return getattr(target, attribute)


def lazy_module(name: str) -> types.ModuleType:
    """The module ``name`` (a dotted name, e.g. "tritonclient.grpc"), imported when first used."""
    return _LazyModule(name)
