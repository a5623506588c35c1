"""The project's unit tests: each model's computation (the user's files) against reference.py, with no
server. C++ projects build and run a GoogleTest target (``toolchain.unit_cpp``); Python projects run the
project's ``tests/test_compute.py`` in a fresh interpreter (``toolchain.unit_python``). `tbgen test --unit`
runs them alone, `tbgen test` before it starts a server, `tbgen dev` first on every save."""

from __future__ import annotations

from triton_backend_gen.project import Project
from triton_backend_gen.toolchain.unit_cpp import run_cpp_unit_tests
from triton_backend_gen.toolchain.unit_python import run_python_unit_tests
from triton_backend_gen.toolchain.unit_result import UnitResult

__all__ = ["UnitResult", "run_unit_tests"]


def run_unit_tests(
    project: Project, model: str | None = None, *, models: list[str] | None = None
) -> list[UnitResult]:
    """The unit tests of every model of ``project`` (or of ``model``, or of ``models``), in order. BuildError
    when the C++ test target does not compile (its first error, with the file and line)."""
    if models is None:
        models = [project.model(model).name] if model is not None else [m.name for m in project.models]
    if project.is_cpp:
        return run_cpp_unit_tests(project, models)
    return run_python_unit_tests(project, models)
