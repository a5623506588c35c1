"""Every config of a project or model repository, checked with what the project's tbgen.toml expects."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from triton_backend_gen.findings import Finding
from triton_backend_gen.model_config.checks import RELEASE_RULES, check_config
from triton_backend_gen.model_config.expectations import CONFIG_FILE, Expectations
from triton_backend_gen.project import BackendKind, Project
from triton_backend_gen.versions import default_release

_SKIPPED_DIRS = {"__pycache__", "node_modules", "_deps"}


def find_configs(root: Path) -> list[Path]:
    """Every config.pbtxt under ``root`` (a project or a model repository), sorted.

    Hidden directories and CMake build trees (which hold Triton's own example repositories) are skipped;
    ``root`` may also be a config file itself."""
    root = Path(root)
    if root.is_file():
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d
            for d in dirnames
            if not d.startswith(".")
            and d not in _SKIPPED_DIRS
            and not (Path(dirpath, d, "CMakeCache.txt").exists())
        ]
        if CONFIG_FILE in filenames:
            found.append(Path(dirpath, CONFIG_FILE))
    return sorted(found)


def validate_tree(
    root: Path, project: Project | None = None, *, gpus_visible: bool | None = None
) -> list[Finding]:
    """Findings for every config under ``root``; the models ``project`` lists (the project ``root`` is in,
    when there is one) are also checked against what it expects of them (backend, decoupled, GPU), and
    every config against the rules of the project's release (without a project: tbgen's default release).
    ``gpus_visible=False`` warns about GPU instances, which a server on this machine would refuse."""
    root = Path(root)
    expectations = _project_expectations(project) if project is not None else {}
    release = project.release if project is not None else default_release()
    findings: list[Finding] = []
    for config in find_configs(root):
        expect = expectations.get(config.resolve(), Expectations())
        findings.extend(check_config(config, replace(expect, gpus_visible=gpus_visible, release=release)))
    return findings


def release_rule_findings(project: Project) -> list[Finding]:
    """The findings of the rules that change with the release (config parameters a newer server refuses) for
    each model of ``project``, each message led by its config file (for reports that print messages
    alone)."""
    findings = []
    for config, expect in _project_expectations(project).items():
        if config.is_file():
            for finding in check_config(config, expect, RELEASE_RULES):
                where = f"{config.parent.name}/{config.name}" + (f":{finding.line}" if finding.line else "")
                findings.append(replace(finding, message=f"{where}: {finding.message}"))
    return findings


def _project_expectations(project: Project) -> dict[Path, Expectations]:
    """The config path of each model the project's tbgen.toml lists -> what the project expects of it."""
    # Models for the stock python backend name "python"; a C++ or Python-based backend names its own.
    backend = "python" if project.kind is BackendKind.PYTHON else project.backend
    # GPU support is a property of the project's own (C++) backend; a Python model may use GPUs through
    # the stock python backend whatever tbgen.toml says.
    gpu = project.gpu if project.is_cpp else None
    return {
        model.config_file.resolve(): Expectations(
            backend=model.backend or backend,
            decoupled=model.decoupled,
            gpu=gpu if model.backend is None else None,
            release=project.release,
            project_argument=project.path_argument(),
            batch_strategy=model.batch_strategy,
        )
        for model in project.models
    }
