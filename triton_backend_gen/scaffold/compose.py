"""Composed models: BLS models and ensembles over other models of the project (``--pattern``), and models
added to a project (``tbgen add model``).

A composed project is rendered from its template like any other (the template's model is a callee, or the
ensemble's core), then grown in the staging directory before it is moved into place:

    model_repository/<callee or core>/     the template's model, rendered once per name
    model_repository/<top>/                the BLS model (Python) or the ensemble's config
    model_repository/<pre>/, <post>/       an ensemble's Python steps
    reference.py                           the top model's reference, built from the others'
    references/<model>.py                  every other model's reference
    tbgen.toml                             a [[models]] entry each, the top model first

The C++ BLS is the exception: the cpp-backend template renders it (pattern=bls) and its callees are Python
add/sub models. ``tbgen add model`` does the same into an existing project and writes only new files and
tbgen.toml's new entries (after its last [[models]] entry: scaffold.model_entries); a model the project's C++
library would serve must have the tensors the library was generated for.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from triton_backend_gen import signature
from triton_backend_gen.errors import ScaffoldError, UsageError
from triton_backend_gen.model_config import load_model_config
from triton_backend_gen.project import Project
from triton_backend_gen.scaffold import model_entries, naming
from triton_backend_gen.scaffold.answers import resolve_answers
from triton_backend_gen.scaffold.render import render_into
from triton_backend_gen.scaffold.templates import Template, get_template, templates_dir

PATTERNS = ("bls", "bls-async", "bls-decoupled", "ensemble")
# The templates whose models each pattern composes.
PATTERN_TEMPLATES = {
    "bls": ("python-backend", "cpp-backend"),
    "bls-async": ("python-backend", "cpp-backend"),
    "bls-decoupled": ("decoupled-backend",),
    "ensemble": ("python-backend", "cpp-backend"),
}
TOP_NAMES = {"bls": "bls_sync", "bls-async": "bls_async", "bls-decoupled": "bls_decoupled", "ensemble": "ensemble"}
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
            raise UsageError("--set callees names the models a composed model calls.", "Add --pattern bls (or "
                             "bls-async, bls-decoupled, ensemble), or drop --set callees.")
        return None, {**rest, **({"pattern": "none"} if _takes(template, "pattern") else {})}
    if pattern not in PATTERNS:
        raise UsageError(f"--pattern {pattern!r} is not one of {', '.join(PATTERNS)}.", "Example: --pattern bls")
    if template not in PATTERN_TEMPLATES[pattern]:
        which = " or ".join(PATTERN_TEMPLATES[pattern])
        raise UsageError(f"--pattern {pattern} composes models of {which}, not of {template}.",
                         f"Use --template {PATTERN_TEMPLATES[pattern][0]}.")
    callees = _callees(pattern, callees_text)
    top = naming.check_model_name(str(rest.pop("model_name", None) or TOP_NAMES[pattern]).strip())
    if top in callees:
        raise UsageError(f"The top model {top!r} is also named as a callee.", "Choose another --model-name or callees.")
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
            raise UsageError(f"--pattern {composition.pattern} cannot be combined with {key}=yes: a composed model "
                             "reads its callees' tensors from their config.pbtxt.", f"Drop --set {key}.")
    if answers.get("framework", "none") != "none":
        raise UsageError(f"--pattern {composition.pattern} cannot be combined with --framework.", "Drop one of them.")


def _takes(template: str, key: str) -> bool:
    return get_template(template).option(key) is not None


def _callees(pattern: str, text: Any) -> tuple[str, ...]:
    names = DEFAULT_CALLEES[pattern] if text is None else tuple(n.strip() for n in str(text).split(",") if n.strip())
    wanted = CALLEE_COUNT[pattern]
    count_ok = {"one or more": len(names) >= 1, "two or more": len(names) >= 2, "one": len(names) == 1,
                "three": len(names) == 3}[wanted]
    if not count_ok:
        example = ",".join(DEFAULT_CALLEES[pattern])
        what = "pre-processing, core and post-processing models" if pattern == "ensemble" else "callee models"
        raise UsageError(f"--pattern {pattern} takes {wanted} {what} in --set callees, got {len(names)}.",
                         f"Example: --set callees={example}")
    for name in names:
        naming.check_model_name(name)
    if len(set(names)) != len(names):
        raise UsageError(f"--set callees names a model twice: {','.join(names)}.", "Give each model its own name.")
    return names


# ---- Growing a rendered project -------------------------------------------------------------------------


@dataclass
class Grower:
    """Adds a composition's models to the project at ``root`` (a staging directory or an existing project)."""

    composition: Composition
    answers: dict[str, Any]  # the template's resolved answers (model_name: the first template model)
    existing: Mapping[str, str]  # models already in the project -> their reference, relative to the root
    fresh_project: bool  # the project is being created: its template model's reference is reference.py

    def grow(self, root: Path) -> None:
        comp = self.composition
        references = dict(self.existing)
        entries: list[str] = []
        first = comp.template_models[0]
        if self.fresh_project and not comp.cpp_bls:
            # The template's model becomes a callee: its reference moves to references/, the top's takes its place.
            _move(root / "reference.py", root / "references" / f"{first}.py")
            _set_entry_line(root, first, f'reference = "references/{first}.py"')
            references[first] = f"references/{first}.py"
        elif self.fresh_project:
            references[first] = "reference.py"
        template = get_template(comp.template)
        for name in comp.template_models:
            if name not in references:
                entries.append(_graft(root, template, {**self.answers, "model_name": name}, name))
                references[name] = f"references/{name}.py"
        if comp.cpp_bls:
            python = get_template("python-backend")
            for name in comp.callees:
                if name not in references:
                    entries.append(_graft(root, python, _python_answers(python, self.answers, name), name))
                    references[name] = f"references/{name}.py"
            if self.fresh_project:
                _set_entry_line(root, comp.top, f"calls = {json.dumps(list(comp.callees))}")
            _add_entries(root, entries)
            return
        top_reference = "reference.py" if self.fresh_project else f"references/{comp.top}.py"
        top = self._ensemble if comp.pattern == "ensemble" else self._bls
        _add_entries(root, top(root, references, top_reference) + entries, first=self.fresh_project)

    def _bls(self, root: Path, references: dict[str, str], top_reference: str) -> list[str]:
        comp = self.composition
        callee = load_model_config(root / "model_repository" / comp.callees[0] / "config.pbtxt")
        config = model_config_pb2.ModelConfig(name=comp.top, backend="python", max_batch_size=callee.max_batch_size)
        if comp.pattern == "bls":
            config.input.add(name=comp.selector, data_type=model_config_pb2.TYPE_STRING, dims=[1])
        config.input.extend(callee.input)
        config.output.extend(callee.output)
        config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
        inputs = [t.name for t in callee.input]
        outputs = [t.name for t in callee.output]
        if comp.selector in inputs and comp.pattern == "bls":
            raise UsageError(f"The selector {comp.selector!r} is also an input of {comp.callees[0]}.",
                             "Choose another with --set selector=NAME.")
        context: dict[str, Any] = {
            "name": comp.top, "callees": list(comp.callees), "selector": comp.selector, "inputs": inputs,
            "outputs": outputs, "take": {o: comp.callees[i % len(comp.callees)] for i, o in enumerate(outputs)},
            "callee": comp.callees[0], "output_tensors": [_tensor_context(t) for t in callee.output],
            **_loader_context(references, top_reference, comp.callees),
        }
        if comp.pattern == "bls-decoupled":
            blocked = [t.name for t in callee.output if t.data_type == model_config_pb2.TYPE_STRING]
            if blocked:
                raise UsageError(f"--pattern bls-decoupled sums the responses of {comp.callees[0]}, but "
                                 f"{', '.join(blocked)} is BYTES.", "Give the decoupled model numeric outputs.")
        kind = comp.pattern.replace("-", "_")
        header = {"bls": f"routes each request to the model its {comp.selector} input names",
                  "bls-async": f"sends each request to {', '.join(comp.callees)} at once",
                  "bls-decoupled": f"sums the responses {comp.callees[0]} streams"}[comp.pattern]
        _write_model(root, config, f"BLS model {comp.top}: {header} (1/model.py).",
                     _render(f"{kind}.py.j2", context))
        _write_new(root / top_reference, _render(f"reference_{kind}.py.j2", context))
        return [model_entries.entry(comp.top, pattern=comp.pattern, reference=top_reference, calls=comp.callees)]

    def _ensemble(self, root: Path, references: dict[str, str], top_reference: str) -> list[str]:
        comp = self.composition
        pre, core_name, post = comp.callees
        core = load_model_config(root / "model_repository" / core_name / "config.pbtxt")
        problems = [t.name for t in core.input if t.optional]
        if problems:
            raise UsageError(f"--pattern ensemble: {core_name}'s input {', '.join(problems)} is optional; an "
                             "ensemble's steps take every tensor they declare.", "Make the inputs required.")
        bf16 = [t.name for t in (*core.input, *core.output) if t.data_type == model_config_pb2.TYPE_BF16]
        if bf16:
            raise UsageError(f"--pattern ensemble: {', '.join(bf16)} is BF16, which the Python steps cannot "
                             "handle (numpy has no bfloat16).", "Use FP16 or FP32 for the tensors between steps.")
        mbs = core.max_batch_size
        to_core = {t.name: PRE_PREFIX + t.name for t in core.input}  # core input <- pre's output
        to_post = {POST_PREFIX + t.name: t.name for t in core.output}  # post's input <- core output
        entries = []
        # Each step takes the tensors under the names its mapping's keys give them, and returns them under the
        # names of its values (pre: INPUT0 -> PREPROCESSED_INPUT0; post: RAW_OUTPUT0 -> OUTPUT0).
        for step, role, tensors, mapping in ((pre, "pre-processing", core.input, to_core),
                                             (post, "post-processing", core.output, to_post)):
            if step in references:
                continue
            config = model_config_pb2.ModelConfig(name=step, backend="python", max_batch_size=mbs)
            for t, (source, target) in zip(tensors, mapping.items(), strict=True):
                config.input.add(name=source, data_type=t.data_type, dims=t.dims)
                config.output.add(name=target, data_type=t.data_type, dims=t.dims)
            config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
            if mbs > 0:
                config.dynamic_batching.SetInParent()
            context = {"name": step, "role": role, "ensemble": comp.top, "core": core_name, "mapping": mapping,
                       "sources": to_post, **_loader_context(references, f"references/{step}.py", (core_name,))}
            _write_model(root, config, f"The {role} step of ensemble {comp.top} (1/model.py).",
                         _render("step.py.j2", context))
            _write_new(root / "references" / f"{step}.py", _render("reference_step.py.j2", context))
            references[step] = f"references/{step}.py"
            entries.append(model_entries.entry(step, reference=f"references/{step}.py"))
        config = model_config_pb2.ModelConfig(name=comp.top, platform="ensemble", max_batch_size=mbs)
        for t in core.input:
            config.input.add(name=t.name, data_type=t.data_type, dims=t.dims)
        for t in core.output:
            config.output.add(name=t.name, data_type=t.data_type, dims=t.dims)
        # Ensemble tensors take the names the steps give their outputs.
        first, middle, last = (config.ensemble_scheduling.step.add(model_name=m, model_version=-1)
                               for m in (pre, core_name, post))
        for name, preprocessed in to_core.items():
            first.input_map[name] = name
            first.output_map[preprocessed] = preprocessed
            middle.input_map[name] = preprocessed
        for raw, name in to_post.items():
            middle.output_map[name] = raw
            last.input_map[raw] = raw
            last.output_map[name] = name
        _write_model(root, config, f"Ensemble {comp.top}: {pre} -> {core_name} -> {post}; each step's input_map "
                     "reads ensemble tensors by the step's own input names, output_map names what it writes.", None)
        context = {"name": comp.top, "pre": pre, "core": core_name, "post": post, "to_core": to_core,
                   "to_post": to_post, **_loader_context(references, top_reference, comp.callees)}
        _write_new(root / top_reference, _render("reference_ensemble.py.j2", context))
        top = model_entries.entry(comp.top, pattern="ensemble", reference=top_reference, calls=comp.callees)
        return [top, *entries]


def _graft(root: Path, template: Template, answers: dict[str, Any], name: str) -> str:
    """Render ``template`` for model ``name`` aside and take its model directory and reference."""
    with tempfile.TemporaryDirectory(prefix=".tbgen-model-") as scratch:
        rendered = render_into(template, answers, Path(scratch))
        source = rendered / "model_repository" / name
        if not source.is_dir():
            raise ScaffoldError(f"Template {template.name} rendered no model_repository/{name}.",
                                "This is a bug in the template.")
        _copy_new(source, root / "model_repository" / name)
        _copy_new(rendered / "reference.py", root / "references" / f"{name}.py")
        decoupled = template.name == "decoupled-backend"
        python = template.name == "python-backend" or answers.get("language") == "python"
        rendered_entry = tomllib.loads((rendered / "tbgen.toml").read_text()).get("models", [{}])[0]
    return model_entries.entry(name, decoupled=decoupled, reference=f"references/{name}.py", python=python,
                               metrics=tuple(rendered_entry.get("metrics", ())))


def _python_answers(python: Template, answers: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The python-backend answers of an add/sub callee with the C++ model's tensors."""
    keep = {o.key for o in python.options} - {"native", "python_based_backend", "auto_complete", "batching"}
    chosen = {key: value for key, value in answers.items() if key in keep}
    return {**chosen, "model_name": name, "instance_kind": "KIND_CPU"}


def _tensor_context(tensor: Any) -> dict[str, Any]:
    wire = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    wire = "BYTES" if wire == "STRING" else wire
    return {"name": tensor.name, "np": signature.datatype(wire).numpy,
            "empty_shape": [1 if d == -1 else d for d in tensor.dims]}


def _loader_context(references: Mapping[str, str], own: str, needed: tuple[str, ...]) -> dict[str, Any]:
    """What step_loader.j2 needs: where the references of the ``needed`` models are (only those: a model that
    comes or goes changes no other's reference), from the reference at ``own``."""
    return {"paths": {model: references[model] for model in needed}, "depth": own.count("/")}


def _render(name: str, context: Mapping[str, Any]) -> str:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir() / "_patterns"), keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined)
    environment.filters["tojson"] = lambda value: json.dumps(value)
    return environment.get_template(name).render(**context)


def _write_model(root: Path, config: Any, comment: str, model_py: str | None) -> None:
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
    if model_py is None:
        _write_new(directory / "1" / ".gitkeep", "")
    else:
        _write_new(directory / "1" / "model.py", model_py)


def _write_new(path: Path, text: str) -> None:
    if path.exists():
        raise UsageError(f"{path} already exists; tbgen does not write over it.", "Move it away or choose other names.")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _copy_new(source: Path, dest: Path) -> None:
    if dest.exists():
        raise UsageError(f"{dest} already exists; tbgen does not write over it.", "Move it away or choose other names.")
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
    """Add [[models]] entries to the tbgen.toml being grown under ``root`` (``first``: the first of them before
    the template's model)."""
    file = root / "tbgen.toml"
    file.write_text(model_entries.add_entries(file.read_text(), entries, first=first))


# ---- tbgen add model ------------------------------------------------------------------------------------


def add_model(project: Project, name: str, template: str | None, given: Mapping[str, Any]) -> list[Path]:
    """Add model ``name`` (with ``given['pattern']``: a composed model and the callees the project lacks) to
    ``project``; returns the files written. Only new files are written, and tbgen.toml gains their entries;
    nothing is written when anything fails."""
    spec = get_template(template or project.template)
    recorded = tomllib.loads(project.project_file.read_text()).get("answers", {})
    base = {k: v for k, v in recorded.items() if spec.option(k) is not None and k not in ("model_name", "pattern")}
    composition, rest = plan(spec.name, {**given, "model_name": name})
    if composition is None and any(m.name == name for m in project.models):
        raise UsageError(f"{project.name} has a model {name!r} already.", "Choose another name.")
    answers = resolve_answers(spec, {**base, **rest, "project_name": project.name, "backend_name": project.backend})
    if composition is not None:
        check_answers(composition, answers)
    _check_served_by(project, spec, answers, recorded)
    existing = {m.name: str((m.reference or project.reference_file).relative_to(project.root))
                for m in project.models}
    for model in (composition.callees if composition else ()):
        if (project.model_repository / model).is_dir() and model not in existing:
            raise UsageError(f"Model {model} is in the repository but not in tbgen.toml, so it has no reference.",
                             f'Add a [[models]] entry for it with reference = "references/{model}.py".')
    with tempfile.TemporaryDirectory(prefix=".tbgen-add-", dir=project.root) as scratch:
        staging = Path(scratch)
        written = _grow_staging(project, staging, composition, answers, existing, spec, name)
        _check_library_tensors(project, staging, written, AddCommand(name, template, dict(given)))
        clashes = [dest for dest in (project.root / p.relative_to(staging) for p in written) if dest.exists()]
        if clashes:
            raise UsageError(f"{clashes[0]} already exists; `tbgen add model` writes only new files.",
                             "Choose other model names, or move the file away.")
        for file in written:
            dest = project.root / file.relative_to(staging)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, dest)
        shutil.copy2(staging / "tbgen.toml", project.project_file)
        return [project.root / p.relative_to(staging) for p in written]


def _grow_staging(project: Project, staging: Path, composition: Composition | None, answers: dict[str, Any],
                  existing: Mapping[str, str], spec: Template, name: str) -> list[Path]:
    """Grow a copy of the project's tbgen.toml and configs in ``staging`` by the new models; the files written."""
    shutil.copy2(project.project_file, staging / "tbgen.toml")
    for model in project.models:
        if model.config_file.is_file():
            (staging / "model_repository" / model.name).mkdir(parents=True)
            shutil.copy2(model.config_file, staging / "model_repository" / model.name / "config.pbtxt")
    before = {p for p in staging.rglob("*") if p.is_file()}
    if composition is not None:
        Grower(composition, answers, existing, fresh_project=False).grow(staging)
    else:
        _add_entries(staging, [_graft(staging, spec, answers, name)])
    return sorted(p for p in staging.rglob("*") if p.is_file() and p not in before)


def _check_served_by(project: Project, spec: Template, answers: Mapping[str, Any], recorded: Mapping[str, Any]) -> None:
    """A model of a C++ template is served by the project's own library: only one of the same tensors fits."""
    cpp = spec.name == "cpp-backend" or (spec.name == "decoupled-backend" and answers.get("language") == "cpp")
    if not cpp:
        return
    if not project.is_cpp or spec.name != project.template:
        raise UsageError(f"A {spec.name} model is served by a C++ backend library of its own; {project.name} does "
                         "not build one of that template.",
                         f"Create it with `tbgen new ... --template {spec.name}`, or add a python-backend model.")
    differ = sorted(k for k, v in answers.items()
                    if k in recorded and k not in ("model_name", "project_name", "backend_name") and recorded[k] != v)
    if differ:
        raise UsageError(f"{project.name}'s library is built for its own tensors; this model differs in "
                         f"{', '.join(differ)}.", "Add it with the project's answers, or as a python-backend model.")


# ---- the tensors of the project's C++ library -------------------------------------------------------------


@dataclass(frozen=True)
class AddCommand:
    """A `tbgen add model` command as the user gave it (to print it again with other tensors)."""

    name: str
    template: str | None
    given: dict[str, Any]

    def line(self, project: Project, tensors: signature.Signature, template: str | None = None,
             settings: Mapping[str, str] | None = None) -> str:
        """The command with ``tensors`` as its --input/--output flags (and ``template`` and ``settings`` instead of
        the user's)."""
        template = template or self.template
        words = ["tbgen", "add", "model", self.name, *(["--template", template] if template else [])]
        if self.given.get("pattern"):
            words += ["--pattern", str(self.given["pattern"])]
        spec = get_template(template or project.template)
        kept = {key: _flag_value(value) for key, value in self.given.items()
                if key in ("callees", "selector") or (key not in ("pattern", "signature") and spec.option(key))}
        for key, value in {**kept, **(settings or {})}.items():
            words += ["--set", f"{key}={value}"]
        for side, flag in ((tensors.inputs, "--input"), (tensors.outputs, "--output")):
            for tensor in side:
                words += [flag, tensor.flag()]
        here = Path.cwd().resolve()
        if project.root.resolve() != here:
            words += ["--project", os.path.relpath(project.root.resolve(), here)]
        return shlex.join(words)


def _flag_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _check_library_tensors(project: Project, staging: Path, written: list[Path], command: AddCommand) -> None:
    """A model served by the project's C++ library must have the library's tensors: the library was generated for
    those of the project's own model, and refuses a config.pbtxt with any others when the model loads."""
    if not project.is_cpp:
        return
    served = [m.name for m in project.models if _library_signature(project, staging, m.name) is not None]
    if not served:
        return
    library = _library_signature(project, staging, served[0])
    new_models = sorted({p.relative_to(staging).parts[1] for p in written
                         if p.relative_to(staging).parts[0] == "model_repository"})
    for model in new_models:
        tensors = _library_signature(project, staging, model)
        if tensors is None or _same_tensors(tensors, library):
            continue
        raise UsageError(
            f"Model {model!r} would be served by {project.name}'s C++ library (backend {project.backend!r}), "
            f"which was generated for the tensors of model {served[0]!r}: {library.describe()}; {model!r} has "
            f"{tensors.describe()}, and the library would refuse it when it loads. A model of the project's C++ "
            "library must have the library's tensors.",
            f"Give it the library's tensors: `{command.line(project, library)}`\n"
            f"or serve it with Triton's python backend: `{command.line(project, tensors, *_python_twin(project))}`")


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
    return signature.Signature(tuple(_flag_tensor(t, output=False) for t in config.input),
                               tuple(_flag_tensor(t, output=True) for t in config.output))


def _flag_tensor(tensor: Any, *, output: bool) -> signature.Tensor:
    wire = model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return signature.Tensor(tensor.name, "BYTES" if wire == "STRING" else wire, tuple(tensor.dims),
                            optional=bool(not output and tensor.optional),
                            reshape=tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None)


def _same_tensors(a: signature.Signature, b: signature.Signature) -> bool:
    """The same tensors, in any order (the library looks each one up by name)."""
    return all(sorted(x, key=lambda t: t.name) == sorted(y, key=lambda t: t.name)
               for x, y in ((a.inputs, b.inputs), (a.outputs, b.outputs)))
