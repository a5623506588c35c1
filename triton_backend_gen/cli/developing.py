"""The command of the edit-and-verify loop: dev."""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from triton_backend_gen.cli.app import app
from triton_backend_gen.cli.options import (
    InstanceKindOption,
    ServerPath,
    SoakConcurrencyOption,
    SoakOption,
    SoakRateOption,
    soak_options,
)
from triton_backend_gen.cli.options import instance_kind as instance_kind_option
from triton_backend_gen.cli.output import console, on_terminal, say, user_errors
from triton_backend_gen.commands.dev import FAIL, PASS, DevView, run_dev
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.project import load_project
from triton_backend_gen.signals import stop_on_signals

rich_live = lazy_module("rich.live")
termios = lazy_module("termios")
tty = lazy_module("tty")

_STYLES = {PASS: "green", FAIL: "red"}


@app.command()
def dev(
    project: Annotated[Path, typer.Argument(help="The project to serve and watch.")] = Path("."),
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="Serve and check this model (and those it calls) only."),
    ] = None,
    instance_kind: InstanceKindOption = None,
    full: Annotated[
        bool, typer.Option("--full", help="Run the whole smoke suite once the models are loaded.")
    ] = False,
    server: ServerPath = None,
    soak: SoakOption = None,
    concurrency: SoakConcurrencyOption = None,
    rate: SoakRateOption = None,
) -> None:
    """Serve the project and verify every save: unit tests, rebuild, reload, quick checks (f: the whole suite,
    s: a soak, q or Ctrl-C: stop)."""
    with user_errors(), stop_on_signals():
        soaked = soak_options(soak, concurrency, rate)
        loaded = load_project(project)
        kind = instance_kind_option(instance_kind)
        with DevScreen(loaded.root) as view, KeyReader() as keys:
            run_dev(
                loaded,
                view,
                keys.read,
                server=server,
                model=model,
                instance_kind=kind,
                full=full,
                soak=soaked,
            )
    say("Stopped: the server and the watcher.")


class DevScreen(DevView):
    """On a terminal a live table, a line per model (its state and the first failure), under the lines of
    what happened; off a terminal a line per event. A failure's whole detail (the compiler's first error with
    its file and line, the server's reason to refuse a model) is printed once, in full."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rows: dict[str, tuple[str, str]] = {}
        self.footer = ""
        self.live = (
            rich_live.Live(console=console, auto_refresh=False, transient=True) if on_terminal() else None
        )

    def __enter__(self) -> DevScreen:
        if self.live is not None:
            self.live.__enter__()
        say(
            f"Watching {self.root}: save a file to verify it; f: the whole smoke suite; s: a soak; "
            "q or Ctrl-C: stop."
        )
        return self

    def __exit__(self, *exc_info) -> None:
        if self.live is not None:
            self.live.__exit__(*exc_info)

    def model(self, name: str, state: str, detail: str = "") -> None:
        self.rows[name] = (state, detail)
        if state == FAIL or self.live is None:
            text = f"{name}: {state}" + (f"  {detail}" if detail else "")
            say(text, style=_STYLES.get(state, ""))
        self._refresh()

    def note(self, text: str) -> None:
        say(text, label="note:", style="dim")

    def verdict(self, passed: bool, seconds: float, trigger: str) -> None:
        verdict = PASS if passed else FAIL
        self.footer = f"{verdict} in {seconds:.2f} s after {trigger}"
        say(f"verdict: {self.footer}", style=_STYLES[verdict])
        self._refresh()

    def _refresh(self) -> None:
        if self.live is None:
            return
        table = Table.grid(padding=(0, 2))
        for name, (state, detail) in self.rows.items():
            first = detail.splitlines()[0] if detail else ""
            table.add_row(
                f"[bold]{escape(name)}[/]",
                f"[{_STYLES.get(state, 'yellow')}]{escape(state)}[/]",
                escape(first[: max(20, console.width - len(name) - 16)]),
            )
        table.add_row("", "", f"[dim]{escape(self.footer)}  (f: whole suite, s: soak, q: stop)[/]")
        self.live.update(table, refresh=True)


class KeyReader:
    """The keys pressed in the terminal, one at a time and without Enter (cbreak mode, restored on exit;
    Ctrl-C still interrupts). Off a terminal there are none."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        self.saved = None

    def __enter__(self) -> KeyReader:
        if self.fd is not None:
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.fd is not None and self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def read(self) -> str | None:
        """A key pressed since the last call (lower case), or None."""
        if self.fd is None or not select.select([self.fd], [], [], 0)[0]:
            return None
        return os.read(self.fd, 1).decode(errors="replace").lower() or None
