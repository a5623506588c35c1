"""``tbgen dev``: one server for the session, the project's files watched; on every save the unit tests, what
changed rebuilt and put into the running server, and the quick checks of the models it concerns.

A turn (the start, or a save) goes through phases: **build** (C++ and native sources: the incremental
build), **unit** (the project's unit tests, no server; the first failure stops the turn), **load** (the new
code into the running server through the repository API) and **check** (the quick smoke checks of the models
the change concerns). What each phase finds goes to a :class:`DevView`, one status per model.

How new code gets into a running Triton 2.51 without a restart:
- a python model: a load request through the repository API; Triton reloads a model whose files changed since
  (a fresh python stub) and ignores a load of one that did not. The session serves with
  --disable-auto-complete-config when every config.pbtxt declares its tensors: the python backend otherwise
  starts a stub of its own for the auto-complete step of every load, about a second each time.
- a C++ model: Triton opens a backend library once per path and keeps it open (server issue #4748), so every
  build is copied to a fresh name beside the installed library (``libtriton_<backend>.dev<N>.so``) and the
  model is loaded with its config.pbtxt plus ``runtime`` naming that copy. The installed library itself is
  never opened by the session's server, so ``cmake --install`` can overwrite it.
A load that fails leaves the last good version serving; the next save tries again.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from triton_backend_gen.errors import BuildError, ServerError, TbgenError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.model_config.parsing import load_model_config
from triton_backend_gen.perf.soak_report import soak_report_dir, write_soak_report
from triton_backend_gen.project import BATCH_STRATEGY_LIBRARY, BackendKind, Project, load_project
from triton_backend_gen.runtime import prepare_server
from triton_backend_gen.runtime.instance_kind import run_repository
from triton_backend_gen.runtime.load_failures import load_failure_hints
from triton_backend_gen.runtime.model_control import load_model
from triton_backend_gen.runtime.server import TritonServer
from triton_backend_gen.runtime.stub_watch import StubWatch, watch_stubs
from triton_backend_gen.smoke.checks import plan_smoke, served_configs
from triton_backend_gen.smoke.clients import Endpoints
from triton_backend_gen.smoke.model import leaves_tensors_to_backend, load_model_spec, load_model_specs
from triton_backend_gen.smoke.run import SmokeResult, run_smoke
from triton_backend_gen.smoke.soak import SoakModel, SoakOptions, run_soak, soak_results
from triton_backend_gen.smoke.stub_health import stub_health
from triton_backend_gen.toolchain.build import build_kind, build_project
from triton_backend_gen.toolchain.unit_tests import run_unit_tests

json_format = lazy_module("google.protobuf.json_format")
watchfiles = lazy_module("watchfiles")

DEV_COPY_GLOB = "libtriton_{backend}.dev*.so"  # libtriton_<backend>.dev<pid>.<n>.so: one session's copies
_DEV_COPY_PID = re.compile(r"\.dev(\d+)\.\d+\.so$")
PASS, FAIL = "pass", "FAIL"
DEFAULT_SOAK = SoakOptions(60.0)  # the key s without --soak: a minute


class DevView:
    """What a session tells the one watching it (the CLI's shows a live line per model); this one tells
    nothing."""

    def model(self, name: str, state: str, detail: str = "") -> None:
        """Model ``name`` is now ``state`` (building, unit tests, loading, checking, pass, FAIL)."""

    def note(self, text: str) -> None:
        """Something worth a line of its own (what a save changed, how the code got into the server)."""

    def verdict(self, passed: bool, seconds: float, trigger: str) -> None:
        """A turn is done: every model it concerned passed or not, ``seconds`` after ``trigger``."""


# Why a save starts the session over.
RESTARTS = {
    "restart": "tbgen.toml changed",
    # Core opens a model's batching strategy with dlopen by its path (backend_model.cc); a reload of the model
    # while its old version still holds the library would get the old code again. A fresh server opens the
    # new build.
    "rebatch": "a batching strategy changed (the server keeps the strategy library it opened)",
}


@dataclass(frozen=True)
class Turn:
    """What a set of saved files asks for."""

    build: bool = False  # C++ or native sources changed: build, then reload the models the build serves
    reload: frozenset[str] = frozenset()  # models whose files changed
    check: frozenset[str] = frozenset()  # models to check (those reloaded, and all when reference.py changed)
    restart: str = ""  # why the session starts over: tbgen.toml changed, or a batching strategy did

    @property
    def empty(self) -> bool:
        return not (self.build or self.reload or self.check or self.restart)


def plan_turn(project: Project, served: list[str], paths: Iterable[Path]) -> Turn:
    """The turn a save of ``paths`` (absolute) asks for, among the ``served`` models. Pure."""
    effects = []
    for path in paths:
        what, model = _effect(project, served, path)
        kind = what.removesuffix("-all")
        effects += [(kind, name) for name in served] if what.endswith("-all") else [(what, model)]
    reload = {model for what, model in effects if what == "reload"}
    check = {model for what, model in effects if what == "check"} | reload
    # A model that calls a reloaded one (BLS, an ensemble) is checked again too.
    check.update(m for m in served if any(name in reload for name in project.needed_by(m)))
    kinds = {what for what, _ in effects}
    restart = next((RESTARTS[what] for what in ("restart", "rebatch") if what in kinds), "")
    return Turn("build" in kinds, frozenset(reload), frozenset(check), restart)


def _effect(project: Project, served: list[str], path: Path) -> tuple[str, str]:
    """What a save of ``path`` asks for: ("restart" | "rebatch" | "build" | "reload" | "check" | "",
    model)."""
    whole = _project_effect(project, path)
    if whole:
        return whole, ""
    if path.is_relative_to(project.model_repository):
        parts = path.relative_to(project.model_repository).parts
        return ("reload", parts[0]) if len(parts) > 1 and parts[0] in served else ("", "")
    for entry in project.models:  # a model's own reference (references/<model>.py of a composed project)
        if entry.reference is not None and path == entry.reference and entry.name in served:
            return "check", entry.name
    if path.suffix == ".py" and path.parent == project.root:  # reference.py and its siblings
        return "check-all", ""
    return "", ""


def _project_effect(project: Project, path: Path) -> str:
    """What a save of ``path`` asks of the whole session ("restart", "rebatch", "build", "reload-all"), or ""
    when it concerns a model or nothing."""
    if path == project.project_file:
        return "restart"
    if project.batched_models and path.is_relative_to(project.batching_dir):
        return "rebatch"
    if any(path.is_relative_to(source) for source in _built_sources(project)):
        return "build"
    if project.python_based_dir is not None and path.is_relative_to(project.python_based_dir):
        return "reload-all"  # the backend's own model.py serves every model of the backend
    return ""


def _built_sources(project: Project) -> list[Path]:
    """What a build compiles: a C++ project's sources and CMake files, or a python project's native/."""
    if project.is_cpp:
        root = project.root
        return [root / "src", root / "CMakeLists.txt", root / "cmake", root / "third_party", root / "include"]
    if project.native is not None:
        return [project.native.source_dir]
    return []


def watched_paths_filter(project: Project) -> Callable[[object, str], bool]:
    """watchfiles' filter for a project: its sources, never the build tree or a cache (which the session's
    own builds and runs write)."""
    ignored = watchfiles.DefaultFilter(ignore_paths=[str(project.build_dir)])
    return (
        lambda change, path: (
            ignored(change, path)
            and "/build/" not in path[len(str(project.root)) :]
            and not path.endswith(f"/{BATCH_STRATEGY_LIBRARY}")
        )  # what a build installs, not a save
    )


@dataclass
class DevSession:
    """One `tbgen dev` session: its server and what is loaded there (see the module)."""

    project: Project
    view: DevView
    server: Path | None = None
    model: str | None = None
    instance_kind: str | None = None
    triton: TritonServer | None = None
    served: list[str] = field(default_factory=list)  # the session's models, each after those it calls
    library: Path | None = None  # the copy of the backend library the server serves now (C++)
    generation: int = 0
    pending: set[str] = field(default_factory=set)  # models whose new code is not loaded yet
    fresh_build: bool = False  # a build the server does not serve yet (a turn stopped before the load)
    stubs: StubWatch | None = None  # its python stubs: one that died or hung stops its model's checks

    # --- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> DevSession:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server and remove the session's library copies (safe to call more than once)."""
        if self.triton is not None:
            self.triton.stop(timeout=3.0)
        if self.library is not None:
            self.library.unlink(missing_ok=True)
            self.library = None

    def start(self) -> bool:
        """The first turn: build (when needed), the server, every model loaded, unit tests, quick checks."""
        started = time.monotonic()
        self.served = self._served_models()
        builds = build_kind(self.project) or self.project.batched_models
        built = self._build(initial=True)[0] if builds else True
        if not built and self.project.is_cpp and not self.project.library.is_file():
            self.view.verdict(False, time.monotonic() - started, "start")
            raise RestartSession("the backend has never built", wait=True)  # no library to serve yet
        # A python project's build is only its native extension or batching strategies: what is installed from
        # the last good build still serves.
        loaded = self._start_server(built or not self.project.is_cpp)
        # a model that did not load or build keeps its FAIL; the others are checked
        passed = built and self._unit_tests(loaded) and self._check(loaded) and loaded == self.served
        self.view.verdict(passed, time.monotonic() - started, "start")
        return passed

    def _start_server(self, built: bool) -> list[str]:
        """Start the session's server and load the models (when ``built``); those that loaded."""
        self.triton = self._server()
        self.triton.start()
        self.stubs = watch_stubs(self.triton)
        self.view.note(f"{self.triton.describe()} at {self.triton.http_url} (gRPC {self.triton.grpc_url})")
        if not built:
            self.pending.update(self.served)
            return []
        if self.project.is_cpp:
            self._new_copy()
        loaded = self._load(self.served)
        self.pending = set(self.served) - set(loaded)
        self.view.note(f"loaded {', '.join(loaded) or 'no model'}")
        return loaded

    def _revive_server(self) -> None:
        """A server that stopped on its own (a crash in the backend) is started again, saying so."""
        if self.triton is None or self.triton.running:
            return
        status = self.triton.stop()
        lines = "; ".join(self.triton.relevant_log_lines(limit=3))
        self.view.note(
            f"the server had stopped (exit status {status}{': ' + lines if lines else ''}); restarting it "
            f"(log: {self.triton.log_file})"
        )
        self._start_server(self.library is not None or not self.project.is_cpp)

    # --- a save --------------------------------------------------------------------------------------------
    def saved(self, paths: set[Path], trigger: str) -> bool | None:
        """The turn for a save of ``paths``: None when nothing the session serves changed, else whether the
        models it concerns pass. TbgenError (a changed tbgen.toml) asks for a fresh session."""
        started = time.monotonic()
        turn = plan_turn(self.project, self.served, paths)
        if turn.empty:
            return None
        if turn.restart:
            raise RestartSession(turn.restart)
        models = self.served if turn.build else sorted(turn.check, key=self.served.index)
        try:
            self._revive_server()
            passed = self._turn(turn, models)
        except (OSError, ValueError) as err:  # a file that vanished mid-save, a report cut short
            self.view.note(f"the turn stopped: {type(err).__name__}: {err}; the next save tries again")
            passed = False
        self.view.verdict(passed, time.monotonic() - started, trigger)
        return passed

    def _turn(self, turn: Turn, models: list[str]) -> bool:
        """Build, unit tests, load, check. What a turn that stopped early did not load stays pending: the next
        turn loads it (a save of compute.py fails its unit tests; the save of reference.py that follows
        passes them and loads the new code)."""
        if turn.build:
            built, work_done = self._build(initial=False)
            if not built:
                return False
            if work_done:
                self.fresh_build = True
                self.pending.update(self._built_models())
        self.pending.update(turn.reload)
        if not self._unit_tests(models):
            return False
        from_library = self.fresh_build and self.project.is_cpp
        if from_library:
            self._new_copy()
        self.fresh_build = False
        reloads = [m for m in self.served if m in self.pending]
        loaded = self._reload(reloads, from_library=from_library)
        self.pending.difference_update(loaded)
        return self._check([m for m in models if m in loaded or m not in reloads]) and loaded == reloads

    def _reload(self, models: list[str], *, from_library: bool) -> list[str]:
        """``models`` loaded again (the C++ ones from the session's new library copy); those that loaded."""
        if not models:
            return []
        self._refresh_run_copy()
        loaded = self._load(models)
        how = f"from {self.library.name}, " if from_library and self.library is not None else ""
        if loaded:
            self.view.note(f"reloaded {', '.join(loaded)} ({how}no restart)")
        return loaded

    def full(self) -> bool:
        """The whole smoke suite of the session's models against the running server (unit tests first)."""
        started = time.monotonic()
        self.view.note("the full smoke suite")
        self._revive_server()
        passed = self._unit_tests(self.served) and self._check(self.served, quick=False)
        self.view.verdict(passed, time.monotonic() - started, "the full suite")
        return passed

    def soak(self, options: SoakOptions) -> bool:
        """A soak of the session's models against the running server (smoke.soak): each verdict as a note, a
        failure on its model; the report written beside the project's other runtime files."""
        started = time.monotonic()
        self.view.note(f"a soak of {options.seconds:.0f} s: valid load, memory sampled")
        self._revive_server()
        assert self.triton is not None
        endpoints = Endpoints(self.triton.http_url, self.triton.grpc_url, self.triton.log_file)
        try:
            models = self._soak_models(endpoints)
        except (
            TbgenError
        ) as err:  # a reference.py or config.pbtxt mid-edit: this soak fails, the session goes on
            self.view.note(f"{FAIL}  the soak: {_told(err)}")
            self.view.verdict(False, time.monotonic() - started, "the soak")
            return False
        run = run_soak(
            models,
            endpoints,
            options,
            server_pid=self.triton.pid,
            watch=self.stubs,
            is_healthy=lambda: self.triton.running,
            progress=self.view.note,
        )
        results = soak_results(run, named=True)
        for result in results:
            self.view.note(
                f"{PASS if result.passed else FAIL}  {result.name}: {result.detail.splitlines()[0]}"
            )
        written = write_soak_report(soak_report_dir(self.project), run)
        self.view.note(f"soak report: {written[0]}")
        passed = all(r.passed for r in results)
        self.view.verdict(passed, time.monotonic() - started, "the soak")
        return passed

    def _soak_models(self, endpoints: Endpoints) -> list[SoakModel]:
        """The session's models that serve their latest code (none still pending), from the configs as served
        (a model may leave its tensors to the backend's auto-complete)."""
        models = []
        for name in self.served:
            if not self._has_entry(name) or name in self.pending:
                continue
            entry = self.project.model(name)
            served = served_configs(self.project, endpoints, entry, self._repository())
            for reference, spec, _ in load_model_specs(self.project, entry, self._repository(), served):
                models.append(SoakModel(spec, reference))
        return models

    # --- phases --------------------------------------------------------------------------------------------
    def _build(self, *, initial: bool) -> tuple[bool, bool]:
        """The incremental build: (whether it succeeded, whether it did any work); a failure shows the
        compiler's first error on every model the build serves."""
        built = self._built_models()
        for name in built:
            self.view.model(name, "building")
        try:
            result = build_project(self.project)
        except BuildError as err:
            for name in built:
                self.view.model(name, FAIL, f"build: {err.message}")
            if not initial:
                self.view.note("the server keeps serving the last good build; the next save builds again")
            return False, False
        if result.work_done:
            self.view.note(f"built in {result.seconds:.2f} s")
        return True, result.work_done

    def _unit_tests(self, models: list[str]) -> bool:
        """The project's unit tests of ``models`` (one run for all of them); False, the first failure shown on
        its model (on every model when its name does not say which), when one fails."""
        models = [m for m in models if self._has_entry(m)]
        if not models:
            return True
        for name in models:
            self.view.model(name, "unit tests")
        try:
            results = run_unit_tests(self.project, models=models)
        except TbgenError as err:
            for name in models:
                self.view.model(name, FAIL, f"unit tests: {_told(err)}")
            return False
        failed = next((r for r in results if not r.passed), None)
        if failed is None:
            return True
        owners = [m for m in models if failed.name.startswith(f"{m}:")] or models
        for name in owners:
            self.view.model(name, FAIL, f"unit test {failed.name}: {failed.detail}")
        return False

    def _load(self, models: list[str]) -> list[str]:
        """Load (or reload) ``models`` into the running server, the backend's own from the session's library
        copy; the models that loaded. A model that fails keeps its last good version, its status says why."""
        assert self.triton is not None
        loaded = []
        for name in models:
            self.view.model(name, "loading")
            logged = len(self.triton.log_text())
            try:
                load_model(self.triton.http_url, name, self._config_with_library(name))
            except TbgenError as err:
                reason = python_error_reason(err.message, self._repository() / name)
                if self.instance_kind is not None:  # name the user's files, not the run copy's
                    reason = reason.replace(str(self._repository()), str(self.project.model_repository))
                self.view.model(name, FAIL, f"load: {reason}{self._load_hints(logged)}")
                continue
            loaded.append(name)
        if self.stubs is not None:
            self.stubs.forget(loaded)  # new stubs serve them
        return loaded

    def _check(self, models: list[str], *, quick: bool = True) -> bool:
        """The quick checks (else the whole smoke suite) of ``models``; whether all passed (each model's
        status shows its verdict)."""
        assert self.triton is not None
        endpoints = Endpoints(self.triton.http_url, self.triton.grpc_url, self.triton.log_file)
        passed = True
        for name in models:
            if not self._has_entry(name):
                continue
            self.view.model(name, "checking")
            started = time.monotonic()
            entry = self.project.model(name)
            try:
                served = served_configs(self.project, endpoints, entry, self._repository())
                plan = plan_smoke(self.project, entry, self._repository(), served, quick=quick)
            except TbgenError as err:
                self.view.model(name, FAIL, _told(err))
                passed = False
                continue
            health = stub_health(self.project, self.triton, endpoints, self.stubs, self._repository(), served)
            results = run_smoke(
                plan, endpoints, is_healthy=lambda: self.triton.running, broken_models=health.after
            )
            shown = _show_checks(self.view, name, results, time.monotonic() - started, quick)
            passed = shown and passed
        return passed

    # --- what the phases share ------------------------------------------------------------------------------
    def _server(self) -> TritonServer:
        """The session's server (not started): explicit model control, no model loaded at start."""
        args = ["--model-control-mode=explicit"]
        if not self._auto_completes():
            args.append("--disable-auto-complete-config")
        triton = prepare_server(
            self.project, server=self.server, instance_kind=self.instance_kind, extra_args=tuple(args)
        )
        for note in triton.notes:
            self.view.note(note)
        return triton

    def _served_models(self) -> list[str]:
        """The session's models (``model`` and those it calls, or all), each after the models it calls."""
        names = self.project.needed_by(self.project.model(self.model).name) if self.model else None
        ordered: list[str] = []
        for entry in self.project.models:
            for name in reversed(self.project.needed_by(entry.name)):
                if name not in ordered and (names is None or name in names):
                    ordered.append(name)
        return ordered

    def _built_models(self) -> list[str]:
        """The served models a build changes: every one of a C++ project's backend, every python model of a
        project with a native extension, else those with a batching strategy."""
        if self.project.is_cpp:
            return [m for m in self.served if self._backend_of(m) == self.project.backend]
        if self.project.native is not None:
            return list(self.served)
        batched = {model.name for model in self.project.batched_models}
        return [m for m in self.served if m in batched]

    def _backend_of(self, name: str) -> str:
        try:
            return load_model_config(self._repository() / name / "config.pbtxt").backend
        except TbgenError:
            return ""

    def _auto_completes(self) -> bool:
        """Whether a model leaves its tensors to the backend's auto-complete (the server must then run it)."""
        for entry in self.project.models:
            try:
                if leaves_tensors_to_backend(load_model_spec(entry)[1]):
                    return True
            except TbgenError:
                continue
        return False

    def _has_entry(self, name: str) -> bool:
        return any(m.name == name for m in self.project.models)

    def _repository(self) -> Path:
        return (
            self.triton.options.model_repository if self.triton is not None else self.project.model_repository
        )

    def _refresh_run_copy(self) -> None:
        """With --instance-kind the server serves a rewritten copy of the models: bring it up to date."""
        if self.instance_kind is not None and self.triton is not None:
            run_repository(self.project.model_repository, self._repository(), self.instance_kind)

    def _new_copy(self) -> None:
        """A copy of the installed backend library under a name the server has not opened yet; the copy before
        it goes (the server keeps what it mapped)."""
        self.generation += 1
        installed = self.project.library
        copy = installed.with_name(f"libtriton_{self.project.backend}.dev{os.getpid()}.{self.generation}.so")
        shutil.copy2(installed, copy)
        if self.library is not None:
            self.library.unlink(missing_ok=True)
        self.library = copy

    def _config_with_library(self, name: str) -> dict | None:
        """For a model of the project's C++ backend: its config.pbtxt as JSON with ``runtime`` naming the
        session's library copy (ServerError before there is one); None (config.pbtxt as it is) otherwise."""
        if not self.project.is_cpp or self._backend_of(name) != self.project.backend:
            return None
        if self.library is None:
            raise ServerError(f"{self.project.library.name} is not built yet; the next save builds it.")
        config = load_model_config(self._repository() / name / "config.pbtxt")
        config.runtime = self.library.name
        return json_format.MessageToDict(config, preserving_proto_field_name=True)

    def _load_hints(self, logged: int) -> str:
        """tbgen's hints for a load that failed (a missing module, a libstdc++ too old), from the log after
        its first ``logged`` characters (the lines of this load)."""
        log = self.triton.log_text()[logged:] if self.triton is not None else ""
        hints = load_failure_hints(log, docker=False)
        return "".join(f"\n{hint}" for hint in hints)


_PY_SYNTAX_AT = re.compile(r"\(([\w.-]+\.py), line (\d+)\)")  # SyntaxError: ... (compute.py, line 29)
_PY_FRAME_AT = re.compile(r"^\s*(/\S+\.py)\((\d+)\): ", re.MULTILINE)  # the stub's "At:" frames


def python_error_reason(reason: str, model_dir: Path) -> str:
    """A python model's load failure as the server reports it, without the stub's frames ("At: ..."), and
    with ``path:line`` of the error in the model's files (an editor opens it) where the report names one."""
    text, _, frames = reason.partition("\n\nAt:")
    where = None
    syntax = _PY_SYNTAX_AT.search(text)
    if syntax is not None:
        found = sorted(model_dir.glob(f"*/{syntax.group(1)}")) or sorted(model_dir.glob(syntax.group(1)))
        where = f"{found[0]}:{syntax.group(2)}" if found else None
    # the stub's frames in the model's own files, the user's (not the generated model.py) first
    frames_found = _PY_FRAME_AT.findall(frames)
    mine = [(path, line) for path, line in frames_found if Path(path).is_relative_to(model_dir)]
    mine.sort(key=lambda frame: Path(frame[0]).name == "model.py")
    if where is None and mine:
        where = f"{mine[0][0]}:{mine[0][1]}"
    return text.strip().rstrip(";").strip() + (f"\n  at {where}" if where else "")


class RestartSession(TbgenError):
    """The session starts over: a save changed what it was started from (tbgen.toml), or (``wait``) it could
    not start (a C++ backend that has never built) and starts again at the next save."""

    def __init__(self, message: str, *, wait: bool = False) -> None:
        super().__init__(message)
        self.wait = wait


def _show_checks(view: DevView, name: str, results: list[SmokeResult], seconds: float, quick: bool) -> bool:
    """One model's verdict from its checks: pass with the count, or the first failure."""
    failed = next((r for r in results if not r.passed), None)
    if failed is None:
        view.model(name, PASS, f"{len(results)} {'quick ' if quick else ''}checks in {seconds:.2f} s")
        return True
    where = f" [{failed.protocol}]" if failed.protocol != "-" else ""
    view.model(name, FAIL, f"{failed.name}{where}: {failed.detail}")
    return False


def remove_stale_copies(project: Project) -> None:
    """Library copies an earlier session left (killed before it could remove them); never those of a session
    that still runs (its pid is in their names)."""
    if project.kind is BackendKind.CPP and project.installed_backend_dir.is_dir():
        for copy in project.installed_backend_dir.glob(DEV_COPY_GLOB.format(backend=project.backend)):
            owner = _DEV_COPY_PID.search(copy.name)
            if owner is None or not Path(f"/proc/{owner.group(1)}").exists():
                copy.unlink(missing_ok=True)


def _told(err: TbgenError) -> str:
    """An error's message and its hint, for a model's status."""
    return f"{err.message}\n{err.hint}" if err.hint else err.message


def run_dev(
    project: Project,
    view: DevView,
    keys: Callable[[], str | None],
    *,
    server: Path | None = None,
    model: str | None = None,
    instance_kind: str | None = None,
    full: bool = False,
    soak: SoakOptions | None = None,
) -> None:
    """Serve ``project`` and verify every save until Ctrl-C or SIGTERM (a KeyboardInterrupt, which stops the
    server on its way out) or the key ``q``; ``f`` (``keys``) or ``full`` runs the whole smoke suite, ``s``
    or ``soak`` a soak (of ``soak``'s length, else a minute)."""
    remove_stale_copies(project)
    while True:
        # The watcher starts before the first turn, so that a save made while it runs is not missed.
        changes = _changes(project)
        next(changes)
        try:
            with DevSession(project, view, server, model, instance_kind) as session:
                started = session.start()
                if full:
                    session.full()
                if soak is not None and started:  # a start that failed has nothing to soak yet: s, later
                    session.soak(soak)
                _watch(session, changes, keys, soak or DEFAULT_SOAK)
                return
        except RestartSession as err:
            if err.wait:
                view.note(f"{err.message}: the next save builds it again")
                next(changed for changed in changes if changed)
            view.note(f"{err.message}: starting over")
            project = _reloaded_project(project, changes, view)
        finally:
            changes.close()


def _reloaded_project(project: Project, changes: Iterator[set[tuple[object, str]]], view: DevView) -> Project:
    """The project as tbgen.toml says now; while it cannot be read, its error is shown and the next save of
    tbgen.toml tries again."""
    while True:
        try:
            return load_project(project.root)
        except TbgenError as err:
            view.note(f"tbgen.toml: {_told(err)}; save it again to start over")
        for changed in changes:
            if any(Path(path) == project.project_file for _, path in changed):
                break


def _changes(project: Project) -> Iterator[set[tuple[object, str]]]:
    """The saves in ``project`` as watchfiles sees them, an empty set every 100 ms without one."""
    return watchfiles.watch(
        project.root,
        watch_filter=watched_paths_filter(project),
        step=50,  # a save is handed over 50 ms after its last file event
        rust_timeout=100,  # and the keys are read ten times a second
        yield_on_timeout=True,
    )


def _watch(
    session: DevSession,
    changes: Iterator[set[tuple[object, str]]],
    keys: Callable[[], str | None],
    soak: SoakOptions,
) -> None:
    """Hand each save to ``session`` until the key ``q``; a key ``f`` runs the full suite, ``s`` a soak."""
    root = str(session.project.root)
    for changed in changes:
        key = keys()
        if key == "q":
            return
        if key == "f":
            session.full()
        if key == "s":
            session.soak(soak)
        if changed:
            paths = {Path(path) for _, path in changed}
            # an editor's temporary files come and go within a save: name what is there now
            names = sorted({path[len(root) + 1 :] for _, path in changed if Path(path).exists()})
            session.saved(paths, "saving " + ", ".join(names[:3]) + (" ..." if len(names) > 3 else ""))
