"""What the project around a model expects of it (Expectations); the checks report findings.Finding, each with
the config file it is about and its line."""

from __future__ import annotations

from dataclasses import dataclass

from triton_backend_gen.versions import Release

CONFIG_FILE = "config.pbtxt"


@dataclass(frozen=True)
class Expectations:
    """What the project around a model requires of it (None: not checked)."""

    backend: str | None = None
    decoupled: bool | None = None
    gpu: bool | None = None
    gpus_visible: bool | None = None  # does this machine show a GPU to a server started here?
    release: Release | None = None  # the Triton release it is served by (None: tbgen's default release)
    # What a suggested tbgen command adds to name the model's project ("" from inside it, " PATH" from
    # elsewhere); None when the model is not one of a tbgen project's.
    project_argument: str | None = None
    batch_strategy: str | None = (
        None  # the batching strategy tbgen.toml gives it ("": none; None: not checked)
    )
