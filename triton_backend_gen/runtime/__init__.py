"""Runtime stage: find a tritonserver, assemble its backend directory, run it, stop it.

``start_server`` is the stage function the CLI's ``serve``/``test``/``infer`` call; ``find_tritonserver`` and
``discover_servers`` answer "which server?" (``tbgen doctor``).
"""

from triton_backend_gen.runtime.backend_dir import BackendLayout, assemble_backend_dir
from triton_backend_gen.runtime.discovery import (
    ServerInstall,
    discover_servers,
    find_tritonserver,
)
from triton_backend_gen.runtime.server import (
    ModelState,
    ServerOptions,
    SignalReceived,
    TritonServer,
    prepare_server,
    start_server,
    stop_on_signals,
)

__all__ = [
    "BackendLayout",
    "ModelState",
    "ServerInstall",
    "ServerOptions",
    "SignalReceived",
    "TritonServer",
    "assemble_backend_dir",
    "discover_servers",
    "find_tritonserver",
    "prepare_server",
    "start_server",
    "stop_on_signals",
]
