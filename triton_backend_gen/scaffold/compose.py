"""Composed models: BLS models and ensembles over other models of the project (``--pattern``), and models
added to a project (``tbgen add model``).

A composed project is rendered from its template like any other (the template's model is a callee, or the
ensemble's core), then grown in the staging directory (``compose_into_tree``) before it is moved into
place:

    model_repository/<callee or core>/     the template's model, rendered once per name
    model_repository/<top>/                the BLS model (Python) or the ensemble's config
    model_repository/<pre>/, <post>/       an ensemble's Python steps
    reference.py                           the top model's reference, built from the others'
    references/<model>.py                  every other model's reference
    tbgen.toml                             a [[models]] entry each, the top model first

The C++ BLS is the exception: the cpp-backend template renders it (pattern=bls) and its callees are Python
add/sub models. ``tbgen add model`` (``compose_into_project``) does the same into an existing project and
writes only new files and tbgen.toml's new entries (after its last [[models]] entry: scaffold.model_entries);
a model the project's C++ library would serve must have the tensors the library was generated for.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_backend_gen import signature
from triton_backend_gen.errors import ScaffoldError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.project import Project, load_project
from triton_backend_gen.scaffold import model_entries, naming
from triton_backend_gen.scaffold.answers import resolve_answers
from triton_backend_gen.scaffold.render import render_into, template_context
from triton_backend_gen.scaffold.templates import Template, get_template, templates_dir

jinja2 = lazy_module("jinja2")
text_format = lazy_module("google.protobuf.text_format")
model_config_pb2 = lazy_module("tritonclient.grpc.model_config_pb2")

PATTERNS = ("bls", "bls-async", "bls-decoupled", "ensemble")
# The templates whose models each pattern composes.
PATTERN_TEMPLATES = {
    "bls": ("python-backend", "cpp-backend"),
    "bls-async": ("python-backend", "cpp-backend"),
    "bls-decoupled": ("decoupled-backend",),
    "ensemble": ("python-backend", "cpp-backend"),
}
TOP_NAMES = {
    "bls": "bls_sync",
    "bls-async": "bls_async",
    "bls-decoupled": "bls_decoupled",
    "ensemble": "ensemble",
}
DEFAULT_CALLEES = {
    "bls": ("add_sub", "add_sub_2"),
    "bls-async": ("add_sub", "add_sub_2"),
    "bls-decoupled": ("repeat_int32",),
    "ensemble": ("preprocess", "add_sub", "postprocess"),
}
CALLEE_COUNT = {"bls": "one or more", "bls-async": "two or more", "bls-decoupled": "one", "ensemble": "three"}
PRE_PREFIX, POST_PREFIX = "PREPROCESSED_", "RAW_"


@dataclass(frozen=True)
class Composition:
    """What ``--pattern`` asks for: the top model and the models it calls."""

    pattern: str
    template: str
    top: str
    callees: tuple[str, ...]
    selector: str = "MODEL_NAME"

    @property
    def cpp_bls(self) -> bool:
        """The C++ BLS: the cpp-backend template's backend is the router; its callees are Python models."""
        return self.pattern == "bls" and self.template == "cpp-backend"

    @property
    def template_models(self) -> tuple[str, ...]:
        """The models rendered from the template (for the C++ BLS: the router itself)."""
        if self.cpp_bls:
            return (self.top,)
        return (self.callees[1],) if self.pattern == "ensemble" else self.callees


def plan(template: str, given: Mapping[str, Any]) -> tuple[Composition | None, dict[str, Any]]:
    """The composition ``given`` asks for (None without a pattern) and the answers left for the template."""
    rest = dict(given)
    pattern = str(rest.pop("pattern", "") or "none").strip()
    callees_text, selector = rest.pop("callees", None), str(rest.pop("selector", "MODEL_NAME")).strip()
    if pattern == "none":
        if callees_text is not None:
            raise UsageError(
                "--set callees names the models a composed model calls.",
                "Add --pattern bls (or bls-async, bls-decoupled, ensemble), or drop --set callees.",
            )
        return None, {**rest, **({"pattern": "none"} if _takes(template, "pattern") else {})}
    _check_pattern(pattern, template)
    callees = _callees(pattern, callees_text)
    top = naming.check_model_name(str(rest.pop("model_name", None) or TOP_NAMES[pattern]).strip())
    if top in callees:
        raise UsageError(
            f"The top model {top!r} is also named as a callee.", "Choose another --model-name or callees."
        )
    signature.check_tensor_name(selector)
    composition = Composition(pattern, template, top, callees, selector)
    answers = {**rest, "model_name": composition.template_models[0]}
    if composition.cpp_bls:
        answers.update(pattern="bls", callees=",".join(callees), selector=selector)
    elif _takes(template, "pattern"):
        answers["pattern"] = "none"
    return composition, answers


def check_answers(composition: Composition, answers: Mapping[str, Any]) -> None:
    """UsageError for a template answer (resolved, typed) that a composition cannot honour."""
    for key in ("native", "python_based_backend", "auto_complete"):
        if answers.get(key) is True:
            raise UsageError(
                f"--pattern {composition.pattern} cannot be combined with {key}=yes: a composed model "
                "reads its callees' tensors from their config.pbtxt.",
                f"Drop --set {key}.",
            )
    if answers.get("framework", "none") != "none":
        raise UsageError(
            f"--pattern {composition.pattern} cannot be combined with --framework.", "Drop one of them."
        )


def _check_pattern(pattern: str, template: str) -> None:
    """UsageError for a pattern that is none of PATTERNS, or that composes no models of ``template``."""
    if pattern not in PATTERNS:
        raise UsageError(
            f"--pattern {pattern!r} is not one of {', '.join(PATTERNS)}.", "Example: --pattern bls"
        )
    if template not in PATTERN_TEMPLATES[pattern]:
        which = " or ".join(PATTERN_TEMPLATES[pattern])
        raise UsageError(
            f"--pattern {pattern} composes models of {which}, not of {template}.",
            f"Use --template {PATTERN_TEMPLATES[pattern][0]}.",
        )


def _takes(template: str, key: str) -> bool:
    """Whether ``template`` has the option ``key``."""
    return get_template(template).option(key) is not None


def _callees(pattern: str, text: Any) -> tuple[str, ...]:
    names = (
        DEFAULT_CALLEES[pattern]
        if text is None
        else tuple(n.strip() for n in str(text).split(",") if n.strip())
    )
    wanted = CALLEE_COUNT[pattern]
    count_ok = {
        "one or more": len(names) >= 1,
        "two or more": len(names) >= 2,
        "one": len(names) == 1,
        "three": len(names) == 3,
    }[wanted]
    if not count_ok:
        example = ",".join(DEFAULT_CALLEES[pattern])
        what = "pre-processing, core and post-processing models" if pattern == "ensemble" else "callee models"
        raise UsageError(
            f"--pattern {pattern} takes {wanted} {what} in --set callees, got {len(names)}.",
            f"Example: --set callees={example}",
        )
    for name in names:
        naming.check_model_name(name)
    if len(set(names)) != len(names):
        raise UsageError(
            f"--set callees names a model twice: {','.join(names)}.", "Give each model its own name."
        )
    return names


# ---- Growing a rendered project -------------------------------------------------------------------------


def compose_into_tree(
    root: Path,
    composition: Composition,
    answers: dict[str, Any],
    existing: Mapping[str, str],
    *,
    fresh_project: bool,
) -> None:
    """Add ``composition``'s models to the project tree at ``root`` (a staging directory: a project being
    rendered, or a copy of an existing one's tbgen.toml and configs) and their entries to its tbgen.toml.
    ``answers``: the template's resolved answers (model_name: the first template model); ``existing``: the
    models the project has -> their reference, relative to the root (they are not written again);
    ``fresh_project``: the project is being created, so its template model's reference is reference.py."""
    references = dict(existing)
    if fresh_project:
        _place_template_reference(root, composition, references)
    entries = _graft_missing(
        root,
        get_template(composition.template),
        composition.template_models,
        references,
        lambda name: {**answers, "model_name": name},
    )
    if composition.cpp_bls:
        python = get_template("python-backend")
        entries += _graft_missing(
            root, python, composition.callees, references, lambda name: _python_answers(python, answers, name)
        )
        if fresh_project:
            _set_entry_line(root, composition.top, f"calls = {json.dumps(list(composition.callees))}")
        _add_entries(root, entries)
        return
    top_reference = "reference.py" if fresh_project else f"references/{composition.top}.py"
    write_top = _write_ensemble if composition.pattern == "ensemble" else _write_bls
    _add_entries(root, write_top(root, composition, references, top_reference) + entries, first=fresh_project)


def _place_template_reference(root: Path, composition: Composition, references: dict[str, str]) -> None:
    """In a project being created, place the reference of the template's (first) model: reference.py for the
    C++ BLS router; else it moves to references/, as a callee's, and the top model's takes its place."""
    first = composition.template_models[0]
    if composition.cpp_bls:
        references[first] = "reference.py"
        return
    _move(root / "reference.py", root / "references" / f"{first}.py")
    _set_entry_line(root, first, f'reference = "references/{first}.py"')
    references[first] = f"references/{first}.py"


def _graft_missing(
    root: Path,
    template: Template,
    names: tuple[str, ...],
    references: dict[str, str],
    answers_of: Callable[[str], dict[str, Any]],
) -> list[str]:
    """Graft the models of ``names`` that ``references`` lacks (rendered from ``template`` with
    ``answers_of(name)``) and record their references; their [[models]] entries."""
    entries = []
    for name in names:
        if name not in references:
            entries.append(_graft(root, template, answers_of(name), name))
            references[name] = f"references/{name}.py"
    return entries


def _write_bls(root: Path, comp: Composition, references: dict[str, str], top_reference: str) -> list[str]:
    """Write the BLS model over its first callee's tensors (config.pbtxt, model.py, reference); its entry."""
    callee = load_model_config(root / "model_repository" / comp.callees[0] / "config.pbtxt")
    _check_bls_callee(comp, callee)
    outputs = [t.name for t in callee.output]
    context: dict[str, Any] = {
        "name": comp.top,
        "callees": list(comp.callees),
        "selector": comp.selector,
        "inputs": [t.name for t in callee.input],
        "outputs": outputs,
        "take": {o: comp.callees[i % len(comp.callees)] for i, o in enumerate(outputs)},
        "callee": comp.callees[0],
        "output_tensors": [_tensor_context(t) for t in callee.output],
        **_loader_context(references, top_reference, comp.callees),
    }
    kind = comp.pattern.replace("-", "_")
    _write_model(
        root,
        _bls_config(comp, callee),
        f"BLS model {comp.top}: {_bls_summary(comp)} (1/model.py, your logic in 1/compute.py).",
        _python_model(kind, context, comp),
    )
    _write_new(root / top_reference, _render(f"reference_{kind}.py.j2", context))
    return [model_entries.entry(comp.top, pattern=comp.pattern, reference=top_reference, calls=comp.callees)]


def _check_bls_callee(comp: Composition, callee: Any) -> None:
    """UsageError when the BLS model cannot take the tensors of its first callee (config ``callee``): a
    selector that is one of its inputs, or, summing a decoupled model's responses, a BYTES output."""
    if comp.pattern == "bls" and comp.selector in {t.name for t in callee.input}:
        raise UsageError(
            f"The selector {comp.selector!r} is also an input of {comp.callees[0]}.",
            "Choose another with --set selector=NAME.",
        )
    if comp.pattern == "bls-decoupled":
        blocked = [t.name for t in callee.output if t.data_type == model_config_pb2.TYPE_STRING]
        if blocked:
            raise UsageError(
                f"--pattern bls-decoupled sums the responses of {comp.callees[0]}, but "
                f"{', '.join(blocked)} is BYTES.",
                "Give the decoupled model numeric outputs.",
            )


def _bls_config(comp: Composition, callee: Any) -> Any:
    """The BLS model's configuration: the first callee's tensors (the router's selector input first), one CPU
    instance."""
    config = model_config_pb2.ModelConfig(
        name=comp.top, backend="python", max_batch_size=callee.max_batch_size
    )
    if comp.pattern == "bls":
        config.input.add(name=comp.selector, data_type=model_config_pb2.TYPE_STRING, dims=[1])
    config.input.extend(callee.input)
    config.output.extend(callee.output)
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    return config


def _bls_summary(comp: Composition) -> str:
    """What the BLS model does, for the comment heading its config.pbtxt."""
    return {
        "bls": f"routes each request to the model its {comp.selector} input names",
        "bls-async": f"sends each request to {', '.join(comp.callees)} at once",
        "bls-decoupled": f"sums the responses {comp.callees[0]} streams",
    }[comp.pattern]


def _write_ensemble(
    root: Path, comp: Composition, references: dict[str, str], top_reference: str
) -> list[str]:
    """Write the ensemble (config.pbtxt, reference) and the Python steps around its core that ``references``
    lacks; their entries, the ensemble's first."""
    pre, core_name, post = comp.callees
    core = load_model_config(root / "model_repository" / core_name / "config.pbtxt")
    _check_ensemble_core(core_name, core)
    to_core = {t.name: PRE_PREFIX + t.name for t in core.input}  # core input <- pre's output
    to_post = {POST_PREFIX + t.name: t.name for t in core.output}  # post's input <- core output
    entries = []
    # Each step takes the tensors under the names its mapping's keys give them, and returns them under the
    # names of its values (pre: INPUT0 -> PREPROCESSED_INPUT0; post: RAW_OUTPUT0 -> OUTPUT0).
    for step, role, tensors, mapping in (
        (pre, "pre-processing", core.input, to_core),
        (post, "post-processing", core.output, to_post),
    ):
        if step in references:
            continue
        context = {
            "name": step,
            "role": role,
            "ensemble": comp.top,
            "core": core_name,
            "mapping": mapping,
            "sources": to_post,
            **_loader_context(references, f"references/{step}.py", (core_name,)),
        }
        _write_model(
            root,
            _step_config(step, tensors, mapping, core.max_batch_size),
            f"The {role} step of ensemble {comp.top} (1/model.py, your logic in 1/compute.py).",
            _python_model("step", context, comp),
        )
        _write_new(root / "references" / f"{step}.py", _render("reference_step.py.j2", context))
        references[step] = f"references/{step}.py"
        entries.append(model_entries.entry(step, reference=f"references/{step}.py"))
    _write_model(
        root,
        _ensemble_config(comp, core, to_core, to_post),
        f"Ensemble {comp.top}: {pre} -> {core_name} -> {post}; each step's input_map reads ensemble "
        "tensors by the step's own input names, output_map names what it writes.",
        None,
    )
    context = {
        "name": comp.top,
        "pre": pre,
        "core": core_name,
        "post": post,
        "to_core": to_core,
        "to_post": to_post,
        **_loader_context(references, top_reference, comp.callees),
    }
    _write_new(root / top_reference, _render("reference_ensemble.py.j2", context))
    top = model_entries.entry(comp.top, pattern="ensemble", reference=top_reference, calls=comp.callees)
    return [top, *entries]


def _check_ensemble_core(name: str, core: Any) -> None:
    """UsageError for a core model (config ``core``) the ensemble's Python steps cannot feed: an optional
    input, a BF16 tensor."""
    problems = [t.name for t in core.input if t.optional]
    if problems:
        raise UsageError(
            f"--pattern ensemble: {name}'s input {', '.join(problems)} is optional; an "
            "ensemble's steps take every tensor they declare.",
            "Make the inputs required.",
        )
    bf16 = [t.name for t in (*core.input, *core.output) if t.data_type == model_config_pb2.TYPE_BF16]
    if bf16:
        raise UsageError(
            f"--pattern ensemble: {', '.join(bf16)} is BF16, which the Python steps cannot "
            "handle (numpy has no bfloat16).",
            "Use FP16 or FP32 for the tensors between steps.",
        )


def _step_config(name: str, tensors: Any, mapping: Mapping[str, str], max_batch_size: int) -> Any:
    """A Python step's configuration: each of ``tensors`` in under its ``mapping`` key and out under its
    value, one CPU instance, dynamic batching when it batches."""
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=max_batch_size)
    for t, (source, target) in zip(tensors, mapping.items(), strict=True):
        config.input.add(name=source, data_type=t.data_type, dims=t.dims)
        config.output.add(name=target, data_type=t.data_type, dims=t.dims)
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    if max_batch_size > 0:
        config.dynamic_batching.SetInParent()
    return config


def _ensemble_config(
    comp: Composition, core: Any, to_core: Mapping[str, str], to_post: Mapping[str, str]
) -> Any:
    """The ensemble's configuration: the core's tensors, and its three steps wired by the steps' tensor
    names."""
    pre, core_name, post = comp.callees
    config = model_config_pb2.ModelConfig(
        name=comp.top, platform="ensemble", max_batch_size=core.max_batch_size
    )
    for t in core.input:
        config.input.add(name=t.name, data_type=t.data_type, dims=t.dims)
    for t in core.output:
        config.output.add(name=t.name, data_type=t.data_type, dims=t.dims)
    # Ensemble tensors take the names the steps give their outputs.
    first, middle, last = (
        config.ensemble_scheduling.step.add(model_name=m, model_version=-1) for m in (pre, core_name, post)
    )
    for name, preprocessed in to_core.items():
        first.input_map[name] = name
        first.output_map[preprocessed] = preprocessed
        middle.input_map[name] = preprocessed
    for raw, name in to_post.items():
        middle.output_map[name] = raw
        last.input_map[raw] = raw
        last.output_map[name] = name
    return config


def _graft(root: Path, template: Template, answers: dict[str, Any], name: str) -> str:
    """Render ``template`` for model ``name`` aside and take its model directory and reference."""
    with tempfile.TemporaryDirectory(prefix=".tbgen-model-") as scratch:
        rendered = render_into(template, answers, Path(scratch))
        source = rendered / "model_repository" / name
        if not source.is_dir():
            raise ScaffoldError(
                f"Template {template.name} rendered no model_repository/{name}.",
                "This is a bug in the template.",
            )
        _copy_new(source, root / "model_repository" / name)
        _copy_new(rendered / "reference.py", root / "references" / f"{name}.py")
        decoupled = template.name == "decoupled-backend"
        python = template.name == "python-backend" or answers.get("language") == "python"
        rendered_models = load_project(rendered).models
    metrics = rendered_models[0].metrics if rendered_models else ()
    return model_entries.entry(
        name, decoupled=decoupled, reference=f"references/{name}.py", python=python, metrics=metrics
    )


def _python_answers(python: Template, answers: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The python-backend answers of an add/sub callee with the C++ model's tensors."""
    keep = {o.key for o in python.options} - {"native", "python_based_backend", "auto_complete", "batching"}
    chosen = {key: value for key, value in answers.items() if key in keep}
    return {**chosen, "model_name": name, "instance_kind": "KIND_CPU"}


def _tensor_context(tensor: Any) -> dict[str, Any]:
    wire = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    wire = "BYTES" if wire == "STRING" else wire
    return {
        "name": tensor.name,
        "np": signature.datatype(wire).numpy,
        "empty_shape": [1 if d == -1 else d for d in tensor.dims],
    }


def _loader_context(references: Mapping[str, str], own: str, needed: tuple[str, ...]) -> dict[str, Any]:
    """What step_loader.j2 needs: where the references of the ``needed`` models are (only those: a model that
    comes or goes changes no other's reference), from the reference at ``own``."""
    return {"paths": {model: references[model] for model in needed}, "depth": own.count("/")}


def _python_model(kind: str, context: Mapping[str, Any], comp: Composition) -> dict[str, str]:
    """A composed Python model's files: model.py, generated plumbing headed as such (tbgen's version, the
    project's template and its version, from the context the template's own files are rendered with), and
    compute.py, the user's."""
    context = {**context, "cookiecutter": template_context(get_template(comp.template), {})["cookiecutter"]}
    return {
        "model.py": _render(f"{kind}.py.j2", context),
        "compute.py": _render(f"{kind}_compute.py.j2", context),
    }


def _render(name: str, context: Mapping[str, Any]) -> str:
    environment = jinja2.Environment(
        # _shared/ for the generated files' header (generated_header.j2)
        loader=jinja2.FileSystemLoader([templates_dir() / "_patterns", templates_dir() / "_shared"]),
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["tojson"] = lambda value: json.dumps(value)
    return environment.get_template(name).render(**context)


def _write_model(root: Path, config: Any, comment: str, files: Mapping[str, str] | None) -> None:
    """Write a composed model's config.pbtxt (headed by ``comment``) and the ``files`` of its version
    directory (name -> text; None: an ensemble's, empty)."""
    directory = root / "model_repository" / config.name
    head = model_config_pb2.ModelConfig()
    head.CopyFrom(config)
    rest = model_config_pb2.ModelConfig()
    rest.CopyFrom(config)
    for field in ("name", "backend", "platform", "max_batch_size"):
        rest.ClearField(field)
    for field in ("input", "output", "instance_group", "dynamic_batching", "ensemble_scheduling"):
        head.ClearField(field)
    # name, backend (or platform) and max_batch_size first, as Triton's examples write them
    text = f"# {comment}\n" + text_format.MessageToString(head) + text_format.MessageToString(rest)
    _write_new(directory / "config.pbtxt", text)
    if files is None:
        _write_new(directory / "1" / ".gitkeep", "")
    for name, text in (files or {}).items():
        _write_new(directory / "1" / name, text)


def _write_new(path: Path, text: str) -> None:
    if path.exists():
        raise UsageError(
            f"{path} already exists; tbgen does not write over it.", "Move it away or choose other names."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _copy_new(source: Path, dest: Path) -> None:
    if dest.exists():
        raise UsageError(
            f"{dest} already exists; tbgen does not write over it.", "Move it away or choose other names."
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, dest)
    else:
        shutil.copy2(source, dest)


def _move(source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    source.rename(dest)


def _set_entry_line(root: Path, model: str, line: str) -> None:
    """Add ``line`` to the [[models]] entry of ``model`` in the tbgen.toml being grown under ``root``."""
    file = root / "tbgen.toml"
    file.write_text(model_entries.set_entry_line(file.read_text(), model, line))


def _add_entries(root: Path, entries: list[str], *, first: bool = False) -> None:
    """Add [[models]] entries to the tbgen.toml being grown under ``root`` (``first``: the first of them
    before the template's model)."""
    file = root / "tbgen.toml"
    file.write_text(model_entries.add_entries(file.read_text(), entries, first=first))


# ---- tbgen add model ------------------------------------------------------------------------------------


def compose_into_project(
    project: Project, name: str, template: str | None, given: Mapping[str, Any]
) -> list[Path]:
    """Add model ``name`` (with ``given['pattern']``: a composed model and the callees the project lacks) to
    ``project``; returns the files written. Only new files are written, and tbgen.toml gains their entries;
    nothing is written when anything fails."""
    spec = get_template(template or project.template)
    _refuse_strategy(project, name, given)
    composition, rest = plan(spec.name, {**given, "model_name": name})
    if composition is None and any(m.name == name for m in project.models):
        raise UsageError(f"{project.name} has a model {name!r} already.", "Choose another name.")
    answers = resolve_answers(
        spec,
        {
            **_project_answers(project, spec),
            **{key: value for key, value in NO_STRATEGY.items() if spec.option(key) is not None},
            **rest,
            "project_name": project.name,
            "backend_name": project.backend,
        },
    )
    if composition is not None:
        check_answers(composition, answers)
    _check_served_by(project, spec, answers)
    existing = {
        m.name: str((m.reference or project.reference_file).relative_to(project.root)) for m in project.models
    }
    _check_callees_listed(project, composition, existing)
    with tempfile.TemporaryDirectory(prefix=".tbgen-add-", dir=project.root) as scratch:
        staging = Path(scratch)
        written = _grow_staging(project, staging, composition, answers, existing, spec, name)
        _check_library_tensors(project, staging, written, AddCommand(name, template, dict(given)))
        return _copy_into_project(project, staging, written)


# A model `tbgen add model` adds has Triton's own batching, whatever strategy the project's model has.
NO_STRATEGY = {"batch_strategy": "none", "batch_limit": 0, "batch_input": ""}


def _refuse_strategy(project: Project, name: str, given: Mapping[str, Any]) -> None:
    """UsageError for a batching strategy given to `tbgen add model`: `tbgen add batcher` gives one."""
    strategy = str(given.get("batch_strategy", "none"))
    if strategy != "none" or any(key in given for key in ("batch_limit", "batch_input")):
        raise UsageError(
            "`tbgen add model` adds a model with Triton's own batching; a strategy of its own comes after.",
            f"Drop --set batch_*, then: `tbgen add batcher {name} --strategy "
            f"{strategy if strategy != 'none' else 'volume'}{project.project_option()}`",
        )


# How a model batches is its template's when it is of another template than the project: a decoupled model
# (the repeat example streams one request at a time: max_batch_size 0) added to a python-backend project
# (max_batch_size 8) takes its own default, not the project's.
OWN_BATCHING = ("max_batch_size", "dynamic_batching")


def _project_answers(project: Project, spec: Template) -> dict[str, Any]:
    """The answers ``project`` was rendered with that a model of ``spec`` takes too (not its model's name and
    pattern, nor its batching when ``spec`` is another template than the project's): the new model's
    defaults."""
    skipped = {"model_name", "pattern", *(OWN_BATCHING if spec.name != project.template else ())}
    return {
        key: value
        for key, value in project.answers.items()
        if spec.option(key) is not None and key not in skipped
    }


def _check_callees_listed(
    project: Project, composition: Composition | None, existing: Mapping[str, str]
) -> None:
    """UsageError for a callee the model repository holds but tbgen.toml does not list (it has no
    reference)."""
    for model in composition.callees if composition else ():
        if (project.model_repository / model).is_dir() and model not in existing:
            raise UsageError(
                f"Model {model} is in the repository but not in tbgen.toml, so it has no reference.",
                f'Add a [[models]] entry for it with reference = "references/{model}.py".',
            )


def _grow_staging(
    project: Project,
    staging: Path,
    composition: Composition | None,
    answers: dict[str, Any],
    existing: Mapping[str, str],
    spec: Template,
    name: str,
) -> list[Path]:
    """Grow a copy of the project's tbgen.toml and configs in ``staging`` by the new models; the files
    written."""
    shutil.copy2(project.project_file, staging / "tbgen.toml")
    for model in project.models:
        if model.config_file.is_file():
            (staging / "model_repository" / model.name).mkdir(parents=True)
            shutil.copy2(model.config_file, staging / "model_repository" / model.name / "config.pbtxt")
    before = {p for p in staging.rglob("*") if p.is_file()}
    if composition is not None:
        compose_into_tree(staging, composition, answers, existing, fresh_project=False)
    else:
        _add_entries(staging, [_graft(staging, spec, answers, name)])
    return sorted(p for p in staging.rglob("*") if p.is_file() and p not in before)


def _copy_into_project(project: Project, staging: Path, written: list[Path]) -> list[Path]:
    """Copy the new files ``written`` under ``staging`` into ``project``, then the grown tbgen.toml over its
    own; where they went. UsageError, with nothing copied, when a file is there already."""
    destinations = [project.root / file.relative_to(staging) for file in written]
    clashes = [dest for dest in destinations if dest.exists()]
    if clashes:
        raise UsageError(
            f"{clashes[0]} already exists; `tbgen add model` writes only new files.",
            "Choose other model names, or move the file away.",
        )
    for file, dest in zip(written, destinations, strict=True):
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, dest)
    shutil.copy2(staging / "tbgen.toml", project.project_file)
    return destinations


def _check_served_by(project: Project, spec: Template, answers: Mapping[str, Any]) -> None:
    """A model of a C++ template is served by the project's own library: only one of the same tensors fits."""
    if not _served_by_library(spec, answers):
        return
    if not project.is_cpp or spec.name != project.template:
        raise UsageError(
            f"A {spec.name} model is served by a C++ backend library of its own; {project.name} does "
            "not build one of that template.",
            f"Create it with `tbgen new ... --template {spec.name}`, or add a python-backend model.",
        )
    differ = sorted(
        key
        for key, value in answers.items()
        if key in project.answers
        and key not in ("model_name", "project_name", "backend_name", *NO_STRATEGY)  # a model's own batching
        and project.answers[key] != value
    )
    if differ:
        raise UsageError(
            f"{project.name}'s library is built for its own tensors; this model differs in "
            f"{', '.join(differ)}.",
            "Add it with the project's answers, or as a python-backend model.",
        )


def _served_by_library(spec: Template, answers: Mapping[str, Any]) -> bool:
    """Whether a model of ``spec`` with ``answers`` is served by a C++ backend library (not Triton's python
    backend)."""
    decoupled_cpp = spec.name == "decoupled-backend" and answers.get("language") == "cpp"
    return spec.name == "cpp-backend" or decoupled_cpp


# ---- the tensors of the project's C++ library -------------------------------------------------------------


@dataclass(frozen=True)
class AddCommand:
    """A `tbgen add model` command as the user gave it (to print it again with other tensors)."""

    name: str
    template: str | None
    given: dict[str, Any]

    def line(
        self,
        project: Project,
        tensors: signature.Signature,
        template: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> str:
        """The command with ``tensors`` as its --input/--output flags (and ``template`` and ``settings``
        instead of the user's)."""
        template = template or self.template
        words = ["tbgen", "add", "model", self.name, *(["--template", template] if template else [])]
        if self.given.get("pattern"):
            words += ["--pattern", str(self.given["pattern"])]
        kept = self._settings(get_template(template or project.template))
        for key, value in {**kept, **(settings or {})}.items():
            words += ["--set", f"{key}={value}"]
        return shlex.join(words + _tensor_flags(tensors) + _project_flag(project))

    def _settings(self, spec: Template) -> dict[str, str]:
        """The user's --set answers a model of ``spec`` takes (a composition's callees and selector too), as
        flag values."""
        return {
            key: _flag_value(value)
            for key, value in self.given.items()
            if key in ("callees", "selector") or (key not in ("pattern", "signature") and spec.option(key))
        }


def _tensor_flags(tensors: signature.Signature) -> list[str]:
    """``tensors`` as --input and --output flags."""
    words = []
    for side, flag in ((tensors.inputs, "--input"), (tensors.outputs, "--output")):
        for tensor in side:
            words += [flag, tensor.flag()]
    return words


def _project_flag(project: Project) -> list[str]:
    """``--project PATH`` (relative to the current directory) unless the project is the current directory."""
    here, root = Path.cwd().resolve(), project.root.resolve()
    return [] if root == here else ["--project", os.path.relpath(root, here)]


def _flag_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _check_library_tensors(project: Project, staging: Path, written: list[Path], command: AddCommand) -> None:
    """A model served by the project's C++ library must have the library's tensors: the library was generated
    for those of the project's own model, and refuses a config.pbtxt with any others when the model loads."""
    if not project.is_cpp:
        return
    served = [m.name for m in project.models if _library_signature(project, staging, m.name) is not None]
    if not served:
        return
    library = _library_signature(project, staging, served[0])
    new_models = sorted(
        {
            p.relative_to(staging).parts[1]
            for p in written
            if p.relative_to(staging).parts[0] == "model_repository"
        }
    )
    for model in new_models:
        tensors = _library_signature(project, staging, model)
        if tensors is None or _same_tensors(tensors, library):
            continue
        raise UsageError(
            f"Model {model!r} would be served by {project.name}'s C++ library (backend {project.backend!r}), "
            f"which was generated for the tensors of model {served[0]!r}: {library.describe()}; {model!r} "
            f"has {tensors.describe()}, and the library would refuse it when it loads. A model of the "
            "project's C++ library must have the library's tensors.",
            f"Give it the library's tensors: `{command.line(project, library)}`\n"
            "or serve it with Triton's python backend: "
            f"`{command.line(project, tensors, *_python_twin(project))}`",
        )


def _python_twin(project: Project) -> tuple[str, dict[str, str]]:
    """The template (and its settings) of a model like the project's, served by Triton's python backend: a
    decoupled one for a decoupled project."""
    if project.template == "decoupled-backend":
        return "decoupled-backend", {"language": "python"}
    return "python-backend", {}


def _library_signature(project: Project, staging: Path, model: str) -> signature.Signature | None:
    """The tensors of ``model`` (in ``staging``) when the project's C++ library serves it, else None."""
    file = staging / "model_repository" / model / "config.pbtxt"
    if not file.is_file():
        return None
    config = load_model_config(file)
    if config.backend != project.backend:
        return None
    return signature.Signature(
        tuple(_flag_tensor(t, output=False) for t in config.input),
        tuple(_flag_tensor(t, output=True) for t in config.output),
    )


def _flag_tensor(tensor: Any, *, output: bool) -> signature.Tensor:
    wire = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return signature.Tensor(
        tensor.name,
        "BYTES" if wire == "STRING" else wire,
        tuple(tensor.dims),
        optional=bool(not output and tensor.optional),
        reshape=tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None,
    )


def _same_tensors(a: signature.Signature, b: signature.Signature) -> bool:
    """The same tensors, in any order (the library looks each one up by name)."""
    return all(
        sorted(x, key=lambda t: t.name) == sorted(y, key=lambda t: t.name)
        for x, y in ((a.inputs, b.inputs), (a.outputs, b.outputs))
    )
