"""Runtime stage: run a tritonserver (a local process or a container) on a project's models, and stop it.

``prepare_server``/``start_server`` (runtime.launch) pick the launcher; ``TritonServer`` (runtime.server) is
the interface both launchers give: endpoints, model states, log lines, start and stop.
"""

from triton_backend_gen.runtime.backend_dir import BackendLayout, assemble_backend_dir
from triton_backend_gen.runtime.launch import prepare_server, start_server
from triton_backend_gen.runtime.server import ModelState, ServerOptions, TritonServer

__all__ = [
    "BackendLayout",
    "ModelState",
    "ServerOptions",
    "TritonServer",
    "assemble_backend_dir",
    "prepare_server",
    "start_server",
]
