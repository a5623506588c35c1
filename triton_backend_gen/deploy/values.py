"""The chart's values for a project: defaults from what tbgen knows of it, the user's overrides, and the
rules.

Pure decisions (no files written, no tools run):

- :func:`default_values`: the image `tbgen package` builds, ``nvidia.com/gpu`` only when a model has KIND_GPU
  instances, a /dev/shm sized for the python backend, resources, and probes sized from the load time `tbgen
  test` measured (:func:`startup_probe`);
- :func:`apply_settings`: ``--set a.b=value`` and ``--values FILE`` over them;
- :func:`check_values`: values.schema.json (the same file `helm` checks user values with) and the rules a
  schema cannot say (the ports differ, ...), the same the chart's templates ``fail`` on. A bad value is a
  UsageError naming the value and the rule.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

from triton_backend_gen.errors import TbgenError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import BackendKind, Project
from triton_backend_gen.runtime.load_time import LoadTime
from triton_backend_gen.toolchain.pyenv import DEPLOY_EXTRA as EXTRA_COMMAND

yaml = lazy_module("yaml")
jsonschema = lazy_module(
    "jsonschema"
)  # the deploy extra (pip install 'triton-backend-gen[deploy]'): require_extra

EXTRA_HINT = f"Install tbgen's deploy extra: {EXTRA_COMMAND} (scripts/setup does)."
CHART_FILES = resources.files("triton_backend_gen.deploy") / "chart"
SCHEMA_FILES = resources.files("triton_backend_gen.deploy") / "schemas"

# Probes. The startup probe allows max(STARTUP_MIN_S, LOAD_MARGIN x the measured load time + LOAD_SLACK_S) for
# the models to load (a cluster node may be slower than this machine, and colder); STARTUP_UNMEASURED_S
# without a measurement.
STARTUP_PERIOD_S = 5
STARTUP_MIN_S = 60
LOAD_MARGIN = 3
LOAD_SLACK_S = 30
STARTUP_UNMEASURED_S = 300
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
SHM_PYTHON, SHM_NATIVE = "1Gi", "256Mi"  # the python backend passes every tensor through /dev/shm
NGC_USER = 1000  # triton-server in the NGC tritonserver images
CPU_TARGET = 80  # the autoscaler's default: average CPU use, percent of the request
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti|E|Ei)?$")
_FACTORS = {
    None: 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Ei": 2**60,
}


class DeployError(TbgenError):
    """Rendering, checking or running a deployment failed (a tool, a validation, the local pod)."""


def require_extra(module: ModuleType, name: str) -> None:
    """DeployError naming the deploy extra when ``module`` (a lazy module of it) is not installed."""
    if importlib.util.find_spec(module.__name__) is None:
        raise DeployError(f"`tbgen deploy` needs {name}, which is not installed.", EXTRA_HINT)


@dataclass(frozen=True)
class ChartValues:
    """The values, and the notes values.yaml carries beside them (why each default is what it is)."""

    values: dict[str, Any]
    notes: dict[str, str]


# --- defaults ----------------------------------------------------------------------------------------------
def chart_name(project: Project) -> str:
    """The chart's name: the project's, as Helm spells names (lowercase letters, digits and dashes)."""
    return re.sub(r"[^a-z0-9-]+", "-", project.name.lower()).strip("-")[:53] or "triton"


def split_image(image: str) -> tuple[str, str]:
    """(repository, tag) of an image reference; UsageError for a digest or a reference without a tag's
    place."""
    if "@" in image:
        raise UsageError(
            f"{image} names an image by digest; the chart takes a repository and a tag.",
            "Tag the image (docker tag IMAGE REPO:TAG) and pass --image REPO:TAG.",
        )
    repository, colon, tag = image.rpartition(":")
    if not colon or "/" in tag:
        return image, "latest"
    return repository, tag


def uses_python_backend(project: Project) -> bool:
    return project.kind is not BackendKind.CPP or any(m.backend == "python" for m in project.models)


def startup_probe(load: LoadTime | None) -> tuple[dict[str, int], str]:
    """The startup probe's settings and the sentence saying how they were sized."""
    if load is None:
        budget = STARTUP_UNMEASURED_S
        why = (
            f"No load time measured yet (run `tbgen test`, then render again): the startup probe allows "
            f"{budget} s for the models to load."
        )
    else:
        budget = max(STARTUP_MIN_S, math.ceil(LOAD_MARGIN * load.seconds + LOAD_SLACK_S))
        why = (
            f"`tbgen test` measured {load.seconds:.1f} s to load the models ({load.measured_at}): the "
            f"startup probe allows max({STARTUP_MIN_S}, {LOAD_MARGIN} x {load.seconds:.1f} + "
            f"{LOAD_SLACK_S}) = {budget} s."
        )
    threshold = math.ceil(budget / STARTUP_PERIOD_S)
    return {"periodSeconds": STARTUP_PERIOD_S, "timeoutSeconds": 2, "failureThreshold": threshold}, why


def default_values(
    project: Project, *, image: str, gpu_models: list[str], load: LoadTime | None
) -> ChartValues:
    """The chart's values for ``project`` served from ``image``; ``gpu_models``: its models with KIND_GPU
    instances."""
    repository, tag = split_image(image)
    python = uses_python_backend(project)
    startup, probes_note = startup_probe(load)
    memory_request, memory_limit = ("2Gi", "4Gi") if python else ("1Gi", "2Gi")
    values: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
        "imagePullSecrets": [],
        "replicaCount": 1,
        "server": {
            "modelControlMode": "none",
            "loadModels": [],
            "repositoryPollSeconds": 15,
            "exitTimeoutSeconds": 30,
            "logVerbose": 0,
            "extraArgs": [],
        },
        "env": [],
        "ports": dict(PORTS),
        "service": {"type": "ClusterIP"},
        "resources": {
            "requests": {"cpu": "1", "memory": memory_request},
            "limits": {"cpu": "4", "memory": memory_limit},
        },
        "gpu": 1 if gpu_models else 0,
        "sharedMemory": SHM_PYTHON if python else SHM_NATIVE,
        "probes": {
            "startup": startup,
            "readiness": {
                "periodSeconds": 5,
                "timeoutSeconds": 2,
                "failureThreshold": 3,
                "successThreshold": 1,
            },
            "liveness": {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        },
        "securityContext": {"runAsUser": NGC_USER, "runAsGroup": NGC_USER, "readOnlyRootFilesystem": True},
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
        "autoscaling": {
            "enabled": False,
            "minReplicas": 1,
            "maxReplicas": 4,
            "metric": "cpu",
            "target": CPU_TARGET,
            "adapterMetricName": "",
        },
        "metrics": {"serviceMonitor": {"enabled": False, "interval": "15s", "labels": {}}},
        "nodeSelector": {},
        "tolerations": (
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] if gpu_models else []
        ),
        "affinity": {},
        "podAnnotations": {},
    }
    notes = {
        "resources": (
            f"Requests are what the scheduler reserves, limits what the pod may use (/dev/shm counts "
            f"against the memory limit). Defaults for a {'python' if python else 'C++'} backend on CPU: "
            f"1 CPU and {memory_request} requested, 4 CPUs and {memory_limit} at most; `tbgen deploy "
            f"local` prints what the server used, to size them from."
        ),
        "gpu": (
            f"1: {', '.join(gpu_models)} has KIND_GPU instances (the tolerations let the pod onto tainted "
            "GPU nodes)."
            if gpu_models
            else "0: every model runs on KIND_CPU instances."
        ),
        "shm": (
            "The python backend passes each request's tensors through it: 1Gi."
            if python
            else "A C++ backend hardly uses it: 256Mi."
        ),
        "probes": probes_note,
    }
    return ChartValues(values, notes)


# --- overrides ---------------------------------------------------------------------------------------------
def parse_settings(items: list[str]) -> dict[str, Any]:
    """``--set a.b=value`` items as {"a.b": value}, each value read as YAML (1 -> int, true -> bool, [a] ->
    list)."""
    settings: dict[str, Any] = {}
    for item in items:
        key, equals, text = item.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z][A-Za-z0-9_-]*)*", key):
            raise UsageError(
                f"--set {item!r} is not KEY=VALUE.",
                "e.g. --set replicaCount=2 --set autoscaling.enabled=true (keys as in values.yaml).",
            )
        try:
            settings[key] = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            settings[key] = text
    return settings


def read_values_file(path: Path) -> dict[str, Any]:
    """A values file (YAML) as nested settings; UsageError when it is not a mapping."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise UsageError(f"Cannot read {path}: {err.strerror}.", "Pass a YAML file of chart values.") from err
    except yaml.YAMLError as err:
        raise UsageError(f"{path} is not valid YAML: {err}", "Fix the file, then render again.") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(
            f"{path} holds a {type(data).__name__}, not a mapping of values.",
            "Write it as values.yaml is written (image:, replicaCount:, ...).",
        )
    return data


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it (mappings merged key by key, anything else replaced), as Helm
    merges."""
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_settings(values: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``values`` with dotted ``settings`` ({"a.b": 1}) applied."""
    nested: dict[str, Any] = {}
    for key, value in settings.items():
        *parents, last = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return merge(values, nested)


# --- the rules ---------------------------------------------------------------------------------------------
def values_schema() -> dict[str, Any]:
    return json.loads((CHART_FILES / "values.schema.json").read_text())


def quantity(text: str | int | float) -> float:
    """A Kubernetes quantity ("512Mi", "1.5", "500m") as a number (bytes, cores)."""
    match = _QUANTITY.match(str(text))
    if match is None:
        raise UsageError(f"{text!r} is not a Kubernetes quantity.", "e.g. 512Mi, 2Gi, 500m, 2")
    return float(match.group(1)) * _FACTORS[match.group(2)]


def value_errors(values: dict[str, Any], models: list[str] | None = None) -> list[str]:
    """Every broken rule, one sentence each: the schema's (as `helm` would report them), then the chart's."""
    require_extra(jsonschema, "jsonschema")
    validator = jsonschema.Draft7Validator(values_schema())
    errors = [
        f"{'.'.join(str(p) for p in error.absolute_path) or 'values'}: {error.message}"
        for error in sorted(validator.iter_errors(values), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if errors:
        return errors  # the rules below read the values the schema vouches for
    return _port_errors(values["ports"]) + _server_errors(values["server"], models) + _resource_errors(values)


def _port_errors(ports: dict[str, Any]) -> list[str]:
    if len({ports["http"], ports["grpc"], ports["metrics"]}) < 3:
        return [
            f"ports: http ({ports['http']}), grpc ({ports['grpc']}) and metrics ({ports['metrics']}) must "
            "differ; give each its own port"
        ]
    return []


def _server_errors(server: dict[str, Any], models: list[str] | None) -> list[str]:
    errors = []
    if server.get("loadModels") and server["modelControlMode"] != "explicit":
        errors.append(
            f"server.loadModels needs server.modelControlMode=explicit (it is {server['modelControlMode']})"
        )
    unknown = [name for name in server.get("loadModels", []) if models is not None and name not in models]
    if unknown:
        errors.append(
            f"server.loadModels: {', '.join(unknown)} is not a model of the project ({', '.join(models)})"
        )
    return errors


def _resource_errors(values: dict[str, Any]) -> list[str]:
    """Autoscaling, requests, limits and shared memory that cannot hold together."""
    errors = []
    scaling, requests, limits = (
        values["autoscaling"],
        values["resources"]["requests"],
        values["resources"]["limits"],
    )
    if scaling.get("minReplicas", 1) > scaling.get("maxReplicas", 1):
        errors.append(
            f"autoscaling: minReplicas ({scaling['minReplicas']}) is above maxReplicas "
            f"({scaling['maxReplicas']})"
        )
    if scaling.get("enabled") and scaling.get("metric") == "cpu" and not requests.get("cpu"):
        errors.append("autoscaling.metric=cpu measures use against resources.requests.cpu: set it")
    if "memory" in limits and quantity(values["sharedMemory"]) >= quantity(limits["memory"]):
        errors.append(
            f"sharedMemory ({values['sharedMemory']}) counts against resources.limits.memory "
            f"({limits['memory']}) and must be below it"
        )
    for kind in ("cpu", "memory"):
        request, limit = requests.get(kind), limits.get(kind)
        if request is not None and limit is not None and quantity(request) > quantity(limit):
            errors.append(f"resources: the {kind} request ({request}) is above its limit ({limit})")
    return errors


def check_values(values: dict[str, Any], models: list[str] | None = None) -> None:
    """UsageError listing every broken rule of ``values`` (nothing is written then)."""
    errors = value_errors(values, models)
    if errors:
        raise UsageError(
            "Bad chart values: " + "; ".join(errors),
            "values.yaml says what each value means; change it with --set KEY=VALUE or --values FILE.",
        )
