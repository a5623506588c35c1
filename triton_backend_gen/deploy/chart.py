"""Writing a chart (`tbgen deploy helm`) and plain manifests (`tbgen deploy manifests`) for a project.

The chart is tbgen's templates (``chart/templates/``, Helm's Go templates, copied as they are), its
values.schema.json, and a Chart.yaml and a commented values.yaml rendered with the project's values. The
manifests are that chart rendered by ``helm template`` with those values, one file per object: the same
objects, for users without Helm. A directory that holds files is written only with ``force`` (values.yaml
may hold your edits).
"""

from __future__ import annotations

import json
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_backend_gen.deploy.tools import find_helm, helm_message, run_helm
from triton_backend_gen.deploy.values import CHART_FILES, ChartValues, DeployError, chart_name
from triton_backend_gen.errors import UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import Project

jinja2 = lazy_module("jinja2")
yaml = lazy_module("yaml")

STATIC = (".helmignore", "values.schema.json")
RENDERED = ("Chart.yaml", "values.yaml")
TEMPLATES = (
    "_helpers.tpl",
    "deployment.yaml",
    "service.yaml",
    "pdb.yaml",
    "hpa.yaml",
    "servicemonitor.yaml",
    "NOTES.txt",
)
SOURCE_PREFIX = "# Source: "
HELM_MANAGED, TBGEN_MANAGED = "app.kubernetes.io/managed-by: Helm", "app.kubernetes.io/managed-by: tbgen"


@dataclass(frozen=True)
class Written:
    directory: Path
    files: tuple[Path, ...]


def yaml_value(value: Any) -> str:
    """A value as YAML on one line (JSON is YAML: strings quoted, lists and mappings in flow style)."""
    return json.dumps(value)


def yaml_comment(text: str, width: int = 116) -> str:
    """``text`` as YAML comment lines of at most ``width`` characters."""
    return "\n".join(f"# {line}" for line in textwrap.wrap(text, width - 2, break_on_hyphens=False))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["y"] = yaml_value
    env.filters["comment"] = yaml_comment
    return env


def chart_texts(project: Project, chart: ChartValues) -> dict[str, str]:
    """Every file of the chart, by its path in the chart."""
    env = _environment()
    context = {
        "name": chart_name(project),
        "release": project.release.container,
        "server_version": project.release.server_version,
        "v": chart.values,
        "description": f"Triton Inference Server with the {project.backend} backend of {project.name}",
        **{f"{key}_note": text for key, text in chart.notes.items()},
    }
    texts = {
        name: env.from_string((CHART_FILES / f"{name}.j2").read_text()).render(context) for name in RENDERED
    }
    texts.update({name: (CHART_FILES / name).read_text() for name in STATIC})
    texts.update({f"templates/{name}": (CHART_FILES / "templates" / name).read_text() for name in TEMPLATES})
    return texts


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file.", "Pass --out DIR for a directory.")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(
            f"{out} holds files already (values.yaml may hold your edits).",
            "Pass --force to write over tbgen's files there, or --out DIR for another directory.",
        )


def write_chart(project: Project, chart: ChartValues, out: Path, *, force: bool = False) -> Written:
    """The chart in ``out`` (tbgen's files only are written; others there are left as they are)."""
    _prepare(out, force)
    written = []
    for name, text in chart_texts(project, chart).items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return Written(out, tuple(written))


def template_chart(
    chart_dir: Path,
    *,
    release: str,
    settings: list[str] = (),
    kube_version: str | None = None,
    helm: Path | None = None,
) -> str:
    """``helm template`` of ``chart_dir`` (its values.yaml, then ``settings`` as --set items): the rendered
    YAML. A value the schema or a template's ``fail`` refuses is a UsageError with Helm's words."""
    helm = helm or find_helm()
    args = ["template", release, str(chart_dir)]
    for item in settings:
        args += ["--set", item]
    if kube_version:
        args += ["--kube-version", kube_version]
    result = run_helm(helm, args, check=False)
    if result.returncode != 0:
        text = helm_message(result)
        if "schema" in text or "execution error" in text:
            raise UsageError(
                f"The chart refuses its values: {text}", "values.yaml says what each value means."
            )
        raise DeployError(f"helm template {chart_dir} failed: {text}", f"helm: {helm}")
    return result.stdout


def split_documents(rendered: str) -> list[tuple[str, str]]:
    """(template path, YAML text) of each object in ``helm template`` output."""
    documents = []
    for chunk in rendered.split("\n---\n"):
        chunk = chunk.removeprefix("---\n").strip("\n")
        lines = chunk.splitlines()
        source = lines[0].removeprefix(SOURCE_PREFIX) if lines and lines[0].startswith(SOURCE_PREFIX) else ""
        body = "\n".join(lines[1:] if source else lines).strip("\n")
        if body and yaml.safe_load(body):
            documents.append((source, body + "\n"))
    return documents


def write_manifests(project: Project, chart: ChartValues, out: Path, *, force: bool = False) -> Written:
    """The chart's objects, rendered by helm, one file each (``deployment.yaml``, ``service.yaml``, ...)."""
    _prepare(out, force)
    with tempfile.TemporaryDirectory(prefix="tbgen-chart-") as scratch:
        chart_dir = write_chart(project, chart, Path(scratch) / "chart").directory
        rendered = template_chart(chart_dir, release=chart_name(project))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for source, body in split_documents(rendered):
        kind = str(yaml.safe_load(body)["kind"]).lower()
        header = (
            f"# {kind} of {project.name}: rendered by `tbgen deploy manifests` from tbgen's chart "
            f"({source.split('/', 1)[-1]}).\n# Apply with: kubectl apply -f {out.name}/\n"
        )
        path = out / f"{kind}.yaml"
        path.write_text(header + body.replace(HELM_MANAGED, TBGEN_MANAGED))
        written.append(path)
    return Written(out, tuple(written))
