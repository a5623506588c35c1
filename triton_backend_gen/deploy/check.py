"""`tbgen deploy check`: a rendered chart or a directory of manifests, validated offline.

- a chart: ``helm lint --strict``, then ``helm template`` with its values and with every optional object
  switched on (:data:`VARIANTS`: the HorizontalPodAutoscaler on CPU and on a Triton metric, the
  ServiceMonitor);
- every object, strictly (an unknown field is an error) against the Kubernetes schemas of each version asked
  for (kubernetes-validate bundles 1.25 up to its newest). A built-in kind its version does not serve (a
  removed API such as autoscaling/v2beta2, or a misspelling) fails; a custom resource is checked against a
  schema tbgen ships (the Prometheus Operator's ServiceMonitor) or skipped with a note;
- yamllint on what was rendered and on the chart's own YAML files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from triton_backend_gen.deploy.chart import split_documents, template_chart
from triton_backend_gen.deploy.tools import find_helm, helm_message, lint_yaml, run_helm
from triton_backend_gen.deploy.values import SCHEMA_FILES, DeployError, require_extra
from triton_backend_gen.errors import UsageError
from triton_backend_gen.findings import ERROR, NOTE, PASSED, WARNING, CheckReport, Finding
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.versions import version_tuple

yaml = lazy_module("yaml")
jsonschema = lazy_module("jsonschema")  # the deploy extra: require_extra says when it is missing
kubernetes_validate = lazy_module("kubernetes_validate")

OLDEST_CHECKED = "1.29"
RELEASE = "tbgen-check"
# Value sets a chart is rendered with besides its own values: every optional object appears in one of them.
VARIANTS: dict[str, list[str]] = {
    "its values": [],
    "autoscaling on CPU, ServiceMonitor": [
        "autoscaling.enabled=true",
        "autoscaling.metric=cpu",
        "metrics.serviceMonitor.enabled=true",
    ],
    "autoscaling on queue time": [
        "autoscaling.enabled=true",
        "autoscaling.metric=queue_time",
        "autoscaling.target=50000",
        "podDisruptionBudget.enabled=false",
    ],
}
# Custom resources tbgen knows: (apiVersion, kind) -> the schema it ships.
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json"}


def _verdict(check: str, subject: str, passed: bool, message: str = "") -> Finding:
    """A check's finding about ``subject``: PASSED (``message`` may say against what), else an ERROR."""
    return Finding(PASSED if passed else ERROR, message, check=check, subject=subject)


def default_kube_versions() -> list[str]:
    """The versions checked unless told otherwise: the oldest tbgen supports and the newest bundled."""
    require_extra(kubernetes_validate, "kubernetes-validate")
    newest = _newest_bundled()
    return [OLDEST_CHECKED] if newest == OLDEST_CHECKED else [OLDEST_CHECKED, newest]


def _newest_bundled() -> str:
    """The newest Kubernetes version ("1.37") kubernetes-validate has schemas for."""
    return ".".join(kubernetes_validate.latest_version().split(".")[:2])


def is_builtin(api_version: str) -> bool:
    """Whether an apiVersion belongs to Kubernetes itself (core, apps, policy, *.k8s.io ...), not to a CRD."""
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def object_findings(obj: dict[str, Any], subject: str, kube_versions: list[str]) -> list[Finding]:
    """The strict schema checks of one object for each version."""
    api, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    if not api or not kind:
        return [_verdict("schema", subject, False, "no apiVersion or kind: not a Kubernetes object")]
    if not is_builtin(api):
        return [crd_finding(obj, subject, api, kind)]
    found = []
    for version in kube_versions:
        step = f"schema {version}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            where = ".".join(str(p) for p in err.path) or "(the object)"
            found.append(_verdict(step, subject, False, f"{where}: {err.message}"))
        except kubernetes_validate.SchemaNotFoundError:
            found.append(
                _verdict(
                    step,
                    subject,
                    False,
                    f"Kubernetes {version} serves no {kind} in {api} (a removed or misspelt API)",
                )
            )
        else:
            found.append(_verdict(step, subject, True))
    return found


def crd_finding(obj: dict[str, Any], subject: str, api: str, kind: str) -> Finding:
    schema_file = CRD_SCHEMAS.get((api, kind))
    if schema_file is None:
        return Finding(
            NOTE,
            f"{kind} ({api}) is a custom resource tbgen has no schema for: skipped",
            check="schema",
            subject=subject,
        )
    schema = json.loads((SCHEMA_FILES / schema_file).read_text())
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(obj), key=lambda e: list(map(str, e.path))
    )
    if errors:
        detail = "; ".join(f"{'.'.join(map(str, e.path)) or '(the object)'}: {e.message}" for e in errors)
        return _verdict(f"schema {kind}", subject, False, detail)
    return _verdict(f"schema {kind}", subject, True, f"against tbgen's {schema_file}")


def lint_findings(text: str, subject: str) -> list[Finding]:
    problems = lint_yaml(text)
    if not problems:
        return [_verdict("yamllint", subject, True)]
    return [
        Finding(
            ERROR if p.level == "error" else WARNING,
            f"line {p.line}: {p.desc} ({p.rule})",
            check="yamllint",
            subject=subject,
        )
        for p in problems
    ]


def documents_findings(
    documents: list[tuple[str, str]], label: str, kube_versions: list[str]
) -> list[Finding]:
    found = []
    for source, body in documents:
        obj = yaml.safe_load(body)
        name = (obj.get("metadata") or {}).get("name", "?") if isinstance(obj, dict) else "?"
        subject = f"{obj.get('kind', '?') if isinstance(obj, dict) else '?'}/{name} ({label})"
        if not isinstance(obj, dict):
            found.append(_verdict("schema", f"{source} ({label})", False, "not a mapping"))
            continue
        found += object_findings(obj, subject, kube_versions)
    return found


def check_chart(directory: Path, kube_versions: list[str], report: CheckReport) -> None:
    helm = find_helm()
    lint = run_helm(helm, ["lint", "--strict", str(directory)], check=False)
    report.findings.append(
        _verdict(
            "helm lint",
            str(directory),
            lint.returncode == 0,
            "" if lint.returncode == 0 else helm_message(lint),
        )
    )
    for name in ("Chart.yaml", "values.yaml"):
        report.findings += lint_findings((directory / name).read_text(), name)
    for label, settings in VARIANTS.items():
        try:
            rendered = template_chart(
                directory, release=RELEASE, settings=settings, kube_version=kube_versions[-1], helm=helm
            )
        except (UsageError, DeployError) as err:
            report.findings.append(_verdict("helm template", label, False, err.message))
            continue
        report.findings.append(_verdict("helm template", label, True))
        report.findings += lint_findings(rendered, f"rendered with {label}")
        documents = split_documents(rendered)
        report.counts["objects"] += len(documents)
        report.findings += documents_findings(documents, label, kube_versions)


def check_manifests(directory: Path, kube_versions: list[str], report: CheckReport) -> None:
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    if not files:
        raise UsageError(
            f"{directory} holds no chart (Chart.yaml) and no manifests (*.yaml).",
            "Render one first: `tbgen deploy helm`, or `tbgen deploy manifests`.",
        )
    for path in files:
        text = path.read_text()
        report.findings += lint_findings(text, path.name)
        try:
            documents = [(path.name, yaml.safe_dump(doc)) for doc in yaml.safe_load_all(text) if doc]
        except yaml.YAMLError as err:
            report.findings.append(_verdict("yaml", path.name, False, str(err)))
            continue
        report.counts["objects"] += len(documents)
        report.findings += documents_findings(documents, path.name, kube_versions)


def parse_kube_version(text: str) -> str:
    match = re.fullmatch(r"v?(1\.\d+)(\.\d+)?", text.strip())
    if match is None:
        raise UsageError(f"--kube-version {text!r} is not a Kubernetes version.", "e.g. --kube-version 1.29")
    return match.group(1)


def check_deployment(directory: Path, kube_versions: list[str] | None = None) -> CheckReport:
    """Validate the chart or the manifests in ``directory`` (see the module) for ``kube_versions``."""
    require_extra(kubernetes_validate, "kubernetes-validate")
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory.", "Pass the chart's or the manifests' directory.")
    versions = sorted(
        {parse_kube_version(v) for v in kube_versions or default_kube_versions()}, key=version_tuple
    )
    newest = _newest_bundled()
    too_new = [v for v in versions if version_tuple(v) > version_tuple(newest)]
    if too_new:
        raise UsageError(
            f"kubernetes-validate {kubernetes_validate.__version__} has schemas up to {newest}, not "
            f"{', '.join(too_new)}.",
            "pip install -U kubernetes-validate, or ask for an older version.",
        )
    is_chart = (directory / "Chart.yaml").is_file()
    report = CheckReport(
        f"{'chart' if is_chart else 'manifests'} {directory}",
        against=f"Kubernetes {' and '.join(versions)}",
        counts={"objects": 0},
    )
    (check_chart if is_chart else check_manifests)(directory, versions, report)
    return report
