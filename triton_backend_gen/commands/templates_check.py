"""``tbgen templates check``: render every template over its option matrix and check what comes out.

The matrix is the product of each template's choice and boolean options (gpu x language x native x batching
...) at the default dtype, then one variant per other dtype, one edge variant without batching and with
variable dims, one per framework (cpp-backend wrapping libtorch, opencv-dnn: with ``smoke``, its example model
is exported as `tbgen new` does) and one per signature of SIGNATURES (a model's own tensors instead of the
example's). Each rendered variant must:
load as a tbgen project, pass ``tbgen validate``, byte-compile every Python file, and contain no unrendered
Jinja in its C++/CMake files (nor the word "cookiecutter" anywhere).

With ``build``, every variant that has something to build (C++ backends, native Python extensions) is built
with ``tbgen build`` (warnings are errors, then ``tbgen check`` against the server) from the Triton source
cache; with ``smoke`` it is also smoke-tested in a real server. ``releases`` renders the matrix once per
release (default: the server's own release with ``smoke``, else each template's default). On a machine
without a GPU, GPU variants are smoke-tested with ``--instance-kind cpu`` (a run copy of their models on
KIND_CPU instances, which a GPU build serves too).
"""

from __future__ import annotations

import itertools
import py_compile
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from triton_backend_gen import signature
from triton_backend_gen.discovery import find_tritonserver, gpus_visible
from triton_backend_gen.errors import TbgenError
from triton_backend_gen.findings import ERROR, NOTE, CheckReport, Finding
from triton_backend_gen.model_config import validate_tree
from triton_backend_gen.project import Project, load_project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.scaffold import (
    compose,
    get_template,
    list_templates,
    render_new_project,
    write_example_model,
)
from triton_backend_gen.scaffold.layout import layout_problems
from triton_backend_gen.scaffold.templates import Template
from triton_backend_gen.smoke.suite import STUB_CHECK, run_suite
from triton_backend_gen.toolchain.build import build_kind
from triton_backend_gen.toolchain.ensure_built import build_and_check
from triton_backend_gen.toolchain.sources import cached_sources

NATIVE_SUFFIXES = {".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".cmake", ".in", ".ldscript", ".map"}
DEFAULT_NAME = "my-backend"
_JINJA = re.compile(r"\{\{|\{%|%\}|\{#|#\}")
# Signatures every template is checked with: several dtypes, BYTES both ways, an optional input, variable
# dims.
SIGNATURES = {
    "mixed": signature.from_flags(
        ["TEXT:BYTES:1", "LANG:BYTES:1:optional", "IMG:FP16:3,-1", "K:INT32:1"],
        ["TOKENS:INT64:-1", "LABEL:BYTES:1", "SCORE:FP32:4"],
    ),
    "bytes-in": signature.from_flags(["TEXT:BYTES:-1"], ["LENGTH:INT32:1", "COUNTS:INT64:4"]),
}


# The options of sequence models, custom metrics and request parameters: combined with care
# (_feature_variants), not multiplied out.
FEATURE_KEYS = ("sequence", "correlation_id", "implicit_state", "custom_metrics", "request_parameters")
STRATEGY_KEY = "batch_strategy"  # each strategy one variant of its own (_strategy_variants)


def option_matrix(template: Template, *, full: bool = True) -> Iterator[dict[str, Any]]:
    """Every combination of the template's choice and boolean options but dtype, framework, pattern and the
    FEATURE_KEYS, then each other dtype, the edge variant, the feature variants, each framework, the
    SIGNATURES and each composition pattern (without ``full``: the combinations, the edge variant and one
    feature variant only)."""
    yield from _combinations(template)
    if full:
        yield from ({"dtype": choice} for choice in _other_choices(template, "dtype"))
    yield from _edge_variant(template)
    yield from _feature_variants(template, full)
    yield from _strategy_variants(template, full)
    if full:
        yield from ({"framework": choice} for choice in _other_choices(template, "framework"))
        yield from _signature_variants(template)
        yield from _pattern_variants(template)


def _combinations(template: Template) -> Iterator[dict[str, Any]]:
    """Every combination of the choice and boolean options that the other variants do not cover."""
    excluded = ("dtype", "framework", "pattern", STRATEGY_KEY, *FEATURE_KEYS)
    axes = [(o.key, o.choices or (False, True)) for o in template.options if o.key not in excluded]
    axes = [(key, choices) for key, choices in axes if _is_axis(template, key)]
    for values in itertools.product(*(choices for _, choices in axes)):
        yield dict(zip([key for key, _ in axes], values, strict=True))


def _is_axis(template: Template, key: str) -> bool:
    option = template.option(key)
    return bool(option.choices) or option.kind is bool


def _other_choices(template: Template, key: str) -> list[Any]:
    """The choices of option ``key`` but its default (the combinations cover it); none without the option."""
    option = template.option(key)
    return list(option.choices[1:]) if option else []


def _edge_variant(template: Template) -> Iterator[dict[str, Any]]:
    """No batching and variable dims (a template without dims has no variant of this kind)."""
    if template.option("dims"):
        edge = {k: v for k, v in (("max_batch_size", 0), ("dims", "-1")) if template.option(k)}
        if edge:
            yield edge


def _languages(template: Template) -> list[dict[str, Any]]:
    """One answer per language of a template that has several, else one empty answer."""
    language = template.option("language")
    return [{"language": choice} for choice in language.choices] if language else [{}]


def _signature_variants(template: Template) -> Iterator[dict[str, Any]]:
    if template.option("signature"):
        for name, tensors in SIGNATURES.items():
            for language in _languages(template):
                yield {"signature": tensors.context(), "model_name": name.replace("-", "_"), **language}


def _pattern_variants(template: Template) -> Iterator[dict[str, Any]]:
    for pattern, names in compose.PATTERN_TEMPLATES.items():
        if template.name in names:
            yield from ({"pattern": pattern, **language} for language in _languages(template))


def _feature_variants(template: Template, full: bool) -> Iterator[dict[str, Any]]:
    """A stateful model with every option that only it takes (oldest, string correlation IDs, implicit state
    where the template has it), custom metrics and request parameters; with ``full`` also the direct strategy
    (over integers where the template has a dtype), and custom metrics and request parameters on the stateless
    example."""
    if not template.option("sequence"):
        return
    implicit = {"implicit_state": True} if template.name == "cpp-backend" else {}
    yield {
        "sequence": "oldest",
        "correlation_id": "string",
        "custom_metrics": True,
        "request_parameters": True,
        **implicit,
    }
    if full:
        yield {"sequence": "direct", **({"dtype": "INT32"} if template.option("dtype") else {})}
        yield {"custom_metrics": True, "request_parameters": True}


def _strategy_variants(template: Template, full: bool) -> Iterator[dict[str, Any]]:
    """Each batching strategy on the example (without ``full``: volume only); with ``full`` also tokens over a
    variable-length BYTES input."""
    option = template.option(STRATEGY_KEY)
    if option is None:
        return
    yield from ({STRATEGY_KEY: choice} for choice in (option.choices[1:] if full else ["volume"]))
    if full:
        text = SIGNATURES["bytes-in"]
        yield {
            STRATEGY_KEY: "tokens",
            "signature": text.context(),
            "model_name": "bytes_in",
            "batch_input": "TEXT",
        }


def describe(answers: dict[str, Any]) -> str:
    def shown(key: str, value: Any) -> str:
        return signature.from_context(value).describe() if key == "signature" else str(value)

    return " ".join(f"{k}={shown(k, v)}" for k, v in answers.items()) or "defaults"


def check_templates(
    names: list[str] | None = None,
    *,
    build: bool = False,
    smoke: bool = False,
    releases: list[str] | None = None,
    full: bool = True,
    variants: dict[str, list[dict[str, Any]]] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> CheckReport:
    """Render (and with ``build``/``smoke`` build and smoke-test) each template's option matrix; ``full``:
    with every dtype and signature variant (see option_matrix); ``variants``: these answers of each template
    named instead of its matrix."""
    templates = _templates(names, variants)
    targets = _release_targets(releases, smoke)
    cpu_only = smoke and not gpus_visible()
    report = CheckReport("the templates", counts={"variants": 0, "files": 0})
    with tempfile.TemporaryDirectory(prefix="tbgen-check-") as scratch:
        for template, place, answers in _variants(templates, targets, full, variants):
            label = f"{template.name} [{describe(answers)}]"
            progress(f"checking {label}")
            project = Path(scratch) / place
            render_new_project(template.name, project, answers)
            report.counts["variants"] += 1
            report.counts["files"] += sum(1 for p in project.rglob("*") if p.is_file())
            instance_kind = "cpu" if cpu_only and answers.get("gpu") else None
            example = write_example_model(load_project(project)) if smoke else None
            if example is not None and not example.path.exists():
                report.findings.append(Finding(NOTE, example.message, subject=label))
                continue
            problems, skip = _variant_problems(project, template, build, smoke, instance_kind, progress)
            if skip:
                report.findings.append(Finding(NOTE, skip, subject=label))
            report.findings += [Finding(ERROR, problem, subject=label) for problem in problems]
    return report


def _templates(names: list[str] | None, variants: dict[str, list[dict[str, Any]]] | None) -> list[Template]:
    """The templates named by ``variants`` (when given), else by ``names``, else all."""
    if variants is not None:
        return [get_template(n) for n in variants]
    return [get_template(n) for n in names] if names else list(list_templates())


def _release_targets(releases: list[str] | None, smoke: bool) -> list[str | None]:
    """The releases to render for: those given, else the server's own with ``smoke``, else None (each
    template's default)."""
    return list(releases or []) or [_server_release() if smoke else None]


def _variants(
    templates: list[Template],
    targets: list[str | None],
    full: bool = True,
    chosen: dict[str, list[dict[str, Any]]] | None = None,
) -> Iterator[tuple[Template, Path, dict[str, Any]]]:
    """(template, where to render it in the scratch directory, answers) of each template's option matrix (or
    its ``chosen`` answers) for each release; the release goes into the answers of a template that has a
    triton_version option."""
    for template, release in itertools.product(templates, targets):
        matrix = option_matrix(template, full=full) if chosen is None else chosen[template.name]
        for index, answers in enumerate(matrix):
            if release and template.option("triton_version"):
                answers = {**answers, "triton_version": release}
            # Every variant keeps the template's default project name: what differs between two variants is
            # then only what their options change, and their builds share compiler-cache entries.
            yield template, Path(template.name) / f"{release or 'default'}-{index}" / DEFAULT_NAME, answers


def _variant_problems(
    project: Path,
    template: Template,
    build: bool,
    smoke: bool,
    instance_kind: str | None,
    progress: Callable[[str], None],
) -> tuple[list[str], str]:
    """(problems, why building was skipped) of a rendered variant: its files checked, then with ``build`` or
    ``smoke`` built, then with ``smoke`` smoke-tested, each step only when the ones before found nothing.

    A run that lost a python backend stub (it crashed or hung; seen once in CI with the 2.51 server's BLS over
    a stream) is said and run once more: a fault of the variant's own code comes back, and then fails it."""
    problems = check_rendered_project(project, template)
    if problems or not (build or smoke):
        return problems, ""
    loaded = load_project(project)  # once per variant: it read fine in check_rendered_project
    problems, skip = build_rendered_project(loaded)
    if smoke and not skip and not problems:
        problems = smoke_rendered_project(loaded, instance_kind)
        if any(problem.startswith(f"smoke {STUB_CHECK} ") for problem in problems):
            progress(
                "  NOTE a python stub stopped answering; the smoke suite runs once more. The first run:\n  "
                + "\n  ".join(problems)
            )
            problems = smoke_rendered_project(loaded, instance_kind)
    return problems, skip


def _server_release() -> str | None:
    release = find_tritonserver().release
    return release.container if release else None


def build_rendered_project(project: Project) -> tuple[list[str], str]:
    """(problems, why it was skipped): ``tbgen build`` the project, C++ from cached Triton sources only."""
    kind = build_kind(project)
    native_code = kind == "cpp" or bool(project.batched_models)
    if native_code and cached_sources(project.release.branch) is None:
        return [], (
            f"Triton sources for {project.release.branch} are not cached "
            f"(`tbgen deps fetch --triton-version {project.release.container}`), so it was not built"
        )
    try:
        result = build_and_check(project) if kind or project.batched_models else None
    except TbgenError as err:
        return [f"build failed: {err.message} {err.hint}".strip()], ""
    return [f"library check: {finding.message}" for finding in (result.errors if result else [])], ""


def smoke_rendered_project(project: Project, instance_kind: str | None = None) -> list[str]:
    """Problems the smoke suite found in a real server (the project is built already)."""
    try:
        report = run_suite(project, prepare_server(project, instance_kind=instance_kind))
    except TbgenError as err:
        return [f"{err.message} {err.hint}".strip()]
    return [f"smoke {r.name} ({r.protocol}): {r.detail}" for r in report.results if not r.passed]


def check_rendered_project(project: Path, template: Template) -> list[str]:
    """Problems found in one rendered project (empty when it is sound)."""
    problems: list[str] = []
    meta = None
    try:
        meta = load_project(project)
        if meta.template != template.name:
            problems.append(f"tbgen.toml names template {meta.template!r}")
    except TbgenError as err:
        problems.append(str(err))
    problems += [str(f) for f in validate_tree(project, meta) if f.failed]
    problems += layout_problems(project)
    for file in sorted(p for p in project.rglob("*") if p.is_file()):
        problems += _file_problems(file, file.relative_to(project))
    return problems


def _file_problems(file: Path, rel: Path) -> list[str]:
    """Problems of one rendered file (``rel`` its path in the project): Python that does not compile,
    leftovers of the template."""
    problems = []
    if file.suffix == ".py":
        try:
            py_compile.compile(
                str(file), cfile=str(Path(tempfile.gettempdir()) / "tbgen-check.pyc"), doraise=True
            )
        except py_compile.PyCompileError as err:
            problems.append(f"{rel} does not compile: {err.msg.strip()}")
    text = file.read_text(errors="replace")
    if "cookiecutter" in text:
        problems.append(f"{rel} mentions cookiecutter (an unrendered variable?)")
    if (file.suffix in NATIVE_SUFFIXES or file.name == "CMakeLists.txt") and _JINJA.search(text):
        problems.append(f"{rel} contains unrendered Jinja: {_JINJA.search(text).group(0)!r}")
    return problems
