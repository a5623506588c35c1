"""``tbgen templates check``: render every template over its option matrix and check what comes out.

The matrix is the product of each template's choice and boolean options (dtype x gpu x language x native x
batching ...), plus one edge variant without batching and with variable dims. Each rendered variant must:
load as a tbgen project, pass ``tbgen validate``, byte-compile every Python file, and contain no unrendered
Jinja in its C++/CMake files (nor the word "cookiecutter" anywhere). With ``smoke``, each variant is then
built when it is C++ (against the Triton source cache) and smoke-tested in a real server, rendered for the
server's own release.
"""

from __future__ import annotations

import itertools
import py_compile
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from triton_backend_gen.scaffold.templates import Template

NATIVE_SUFFIXES = {".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".cmake", ".in", ".ldscript", ".map"}
_JINJA = re.compile(r"\{\{|\{%|%\}|\{#|#\}")


@dataclass
class CheckReport:
    variants: int = 0
    files: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def option_matrix(template: Template) -> Iterator[dict[str, Any]]:
    """Every combination of the template's choice and boolean options, then the edge variant."""
    axes = [(o.key, o.choices or (False, True)) for o in template.options if o.choices or o.kind is bool]
    keys = [key for key, _ in axes]
    for values in itertools.product(*(choices for _, choices in axes)):
        yield dict(zip(keys, values, strict=True))
    edge = {k: v for k, v in (("max_batch_size", 0), ("dims", "-1")) if template.option(k)}
    if edge:
        yield edge


def describe(answers: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in answers.items()) or "defaults"


def check_templates(
    names: list[str] | None = None, *, smoke: bool = False, progress: Callable[[str], None] = lambda line: None
) -> CheckReport:
    from triton_backend_gen.scaffold import get_template, list_templates, render_new_project

    templates = [get_template(n) for n in names] if names else list(list_templates())
    release = _server_release() if smoke else None
    report = CheckReport()
    with tempfile.TemporaryDirectory(prefix="tbgen-check-") as scratch:
        for template in templates:
            for index, answers in enumerate(option_matrix(template)):
                label = f"{template.name} [{describe(answers)}]"
                progress(f"checking {label}")
                if release and template.option("triton_version"):
                    answers = {**answers, "triton_version": release}
                project = render_new_project(template.name, Path(scratch) / f"{template.name}-{index}", answers)
                report.variants += 1
                report.files += sum(1 for p in project.rglob("*") if p.is_file())
                problems = check_rendered_project(project, template)
                if smoke and not problems:
                    problems, skip = smoke_rendered_project(project)
                    if skip:
                        report.skipped.append(f"{label}: {skip}")
                report.failures += [f"{label}: {problem}" for problem in problems]
    return report


def _server_release() -> str | None:
    from triton_backend_gen.runtime.discovery import find_tritonserver

    release = find_tritonserver().release
    return release.container if release else None


def smoke_rendered_project(project: Path) -> tuple[list[str], str]:
    """(problems, reason it was skipped): build a C++ project if its sources are cached, then smoke-test it."""
    from triton_backend_gen.errors import TbgenError
    from triton_backend_gen.project import load_project
    from triton_backend_gen.testrun import run_project_tests

    meta = load_project(project)
    if meta.language == "cpp":
        from triton_backend_gen.toolchain.cmake import run_cmake_build
        from triton_backend_gen.toolchain.sources import cached_sources

        sources = cached_sources(f"r{meta.triton_version}")
        if sources is None:
            return [], f"Triton sources for r{meta.triton_version} are not cached, so it was not built"
        try:
            run_cmake_build(project, project / "build", triton_sources=sources, gpu=meta.gpu)
        except TbgenError as err:
            return [f"build failed: {err.message}"], ""
    try:
        report = run_project_tests(project)
    except TbgenError as err:
        return [f"{err.message} {err.hint}".strip()], ""
    return [f"smoke {r.name} ({r.protocol}): {r.detail}" for r in report.results if not r.passed], ""


def check_rendered_project(project: Path, template: Template) -> list[str]:
    """Problems found in one rendered project (empty when it is sound)."""
    from triton_backend_gen.errors import TbgenError
    from triton_backend_gen.model_config import validate_tree
    from triton_backend_gen.project import load_project

    problems: list[str] = []
    try:
        meta = load_project(project)
        if meta.template != template.name:
            problems.append(f"tbgen.toml names template {meta.template!r}")
    except TbgenError as err:
        problems.append(str(err))
    problems += [str(f) for f in validate_tree(project) if f.severity == "error"]
    for file in sorted(p for p in project.rglob("*") if p.is_file()):
        rel = file.relative_to(project)
        if file.suffix == ".py":
            try:
                py_compile.compile(str(file), cfile=str(Path(tempfile.gettempdir()) / "tbgen-check.pyc"), doraise=True)
            except py_compile.PyCompileError as err:
                problems.append(f"{rel} does not compile: {err.msg.strip()}")
        text = file.read_text(errors="replace")
        if "cookiecutter" in text:
            problems.append(f"{rel} mentions cookiecutter (an unrendered variable?)")
        if (file.suffix in NATIVE_SUFFIXES or file.name == "CMakeLists.txt") and _JINJA.search(text):
            problems.append(f"{rel} contains unrendered Jinja: {_JINJA.search(text).group(0)!r}")
    return problems
