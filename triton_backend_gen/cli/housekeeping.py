"""Commands about tbgen itself and its surroundings: doctor, deps (Triton's sources), clean, versions,
templates."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from triton_backend_gen import versions
from triton_backend_gen.cli.app import app, deps_app, templates_app
from triton_backend_gen.cli.options import ReleaseOption, ServerPath, project_here, release_option
from triton_backend_gen.cli.output import Column, records, say, user_errors
from triton_backend_gen.commands.doctor import FAIL, OK, diagnose
from triton_backend_gen.commands.templates_check import check_templates
from triton_backend_gen.docker_engine import connect, remove_containers, tbgen_containers
from triton_backend_gen.errors import UsageError
from triton_backend_gen.scaffold import list_templates
from triton_backend_gen.toolchain import sources


@templates_app.command("list")
def templates_list() -> None:
    """Show the templates, their options and defaults."""
    for spec in list_templates():
        records(
            f"{spec.name} {spec.version}: {spec.description}",
            [Column("option"), Column("default"), Column("choices / type", wide=True)],
            [
                (
                    option.key,
                    str(option.default),
                    ", ".join(option.choices) if option.choices else option.kind.__name__,
                )
                for option in spec.options
            ],
        )


@templates_app.command("check")
def templates_check(
    template: Annotated[
        Optional[list[str]], typer.Option("--template", "-t", help="Only these templates (repeatable).")
    ] = None,
    build: Annotated[
        bool,
        typer.Option(
            "--build",
            help="Also build each variant that has something to build "
            "(C++ from the Triton source cache, native Python extensions).",
        ),
    ] = False,
    smoke: Annotated[
        bool,
        typer.Option("--smoke", help="Also build and run the smoke suite on each variant in a real server."),
    ] = False,
    triton_version: Annotated[
        Optional[list[str]],
        typer.Option(
            "--triton-version",
            help="Render the matrix for these releases "
            "(repeatable; default: the server's with --smoke, else the newest).",
        ),
    ] = None,
) -> None:
    """Render every template over its option matrix and check the results."""
    with user_errors():
        releases = [versions.resolve(v).container for v in triton_version or []]
        report = check_templates(template or None, build=build, smoke=smoke, releases=releases, progress=say)
    for skipped in report.notes:
        say(f"{skipped.subject}: {skipped.message}", label="SKIP", style="yellow")
    for failure in report.errors:
        say(f"{failure.subject}: {failure.message}", label="FAIL", style="red")
    counts, failed, skipped = report.counts, len(report.errors), len(report.notes)
    say(
        f"{counts['variants']} variants, {counts['files']} files, {failed} failures"
        f"{f', {skipped} not built' if skipped else ''}",
        style="red" if failed else "green",
    )
    raise typer.Exit(1 if failed else 0)


@app.command("versions")
def versions_() -> None:
    """Show the supported Triton releases and what each implies."""
    records(
        "Triton releases (newest is the default)",
        [
            Column(c)
            for c in (
                "release",
                "branch",
                "server",
                "python",
                "CUDA",
                "backend API",
                "server API",
                "CUDA archs",
                "CMake",
                "new in this release",
            )
        ],
        [
            (
                r.container,
                r.branch,
                r.server_version,
                r.python,
                r.cuda,
                "{:d}.{:d}".format(*r.backend_api),
                "{:d}.{:d}".format(*r.server_api),
                ";".join(r.cuda_architectures),
                f">= {r.min_cmake}",
                "; ".join(f.what for f in versions.FEATURES.values() if f.since == r.container),
            )
            for r in versions.RELEASES
        ],
    )


@app.command()
def doctor(
    server: ServerPath = None,
    triton_version: Annotated[
        Optional[str],
        typer.Option(
            "--triton-version",
            help="Release to check for (default: the project's, else $TBGEN_TRITON_VERSION, else the "
            "newest).",
        ),
    ] = None,
) -> None:
    """Check what tbgen needs (CMake, compiler, Ninja, RapidJSON, googletest, nvcc, Triton's sources, servers,
    Docker) and print the command that fixes each missing piece."""
    with user_errors():
        diagnoses = diagnose(server, project_here(), triton_version)
    colours = {OK: "green", FAIL: "red"}
    records(
        "What tbgen needs, and how to fix what is missing",
        [Column("check"), Column("status"), Column("found", wide=True), Column("fix", wide=True)],
        [(d.name, d.status, d.found, d.fix) for d in diagnoses],
        styles=[colours.get(d.status, "yellow") for d in diagnoses],
    )
    failed = [d.name for d in diagnoses if d.failed]
    if failed:
        say(f"Missing what tbgen requires: {', '.join(failed)}; run the fix shown for each.", style="red")
        raise typer.Exit(1)


@deps_app.command("fetch")
def deps_fetch(
    triton_version: ReleaseOption = None,
    organization: Annotated[
        Optional[str],
        typer.Option(
            "--organization",
            help="URL or directory holding core.git, common.git and "
            "backend.git (default: $TRITON_REPO_ORGANIZATION, else Triton's GitHub).",
        ),
    ] = None,
    googletest_url: Annotated[
        Optional[str],
        typer.Option("--googletest-url", help="A mirror of the googletest archive common asks for."),
    ] = None,
    googletest: Annotated[
        bool, typer.Option("--googletest/--no-googletest", help="Also fetch googletest.")
    ] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace a cached release.")] = False,
) -> None:
    """Clone core, common and backend at the release branch (and googletest) into tbgen's cache."""
    with user_errors():
        release = release_option(triton_version)
        entry = sources.fetch_sources(
            release,
            organization=organization,
            force=force,
            googletest=googletest,
            googletest_url=googletest_url,
            progress=say,
        )
    say(f"{release.branch} in {entry}", label="Cached", style="green")


@deps_app.command("add")
def deps_add(
    from_: Annotated[Path, typer.Option("--from", help="A directory holding core/, common/ and backend/.")],
    triton_version: ReleaseOption = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a cached release.")] = False,
) -> None:
    """Register Triton sources you already have (air-gapped sites): checked, then copied into the cache."""
    with user_errors():
        release = release_option(triton_version)
        entry = sources.add_sources(from_, release, force=force)
    say(f"{release.branch} in {entry}", label="Cached", style="green")


@deps_app.command("list")
def deps_list() -> None:
    """Show the cached releases, each repository's commit (or "archive" for a tree without git)."""
    entries = sources.list_sources()
    repositories, googletest = sources.REPOSITORIES, sources.GOOGLETEST
    if not entries:
        say(
            f"No Triton sources cached in {sources.sources_dir()}. Fill it with `tbgen deps fetch` "
            "(online), or register sources you have (`tbgen deps add --help`)."
        )
        return
    records(
        f"Triton sources in {sources.sources_dir()}",
        [Column(c) for c in ("release", *repositories, googletest, "complete")],
        [
            (
                entry.branch,
                *(entry.repositories.get(name) or "missing" for name in repositories),
                entry.repositories.get(googletest) or "system",
                "yes" if entry.complete else "no",
            )
            for entry in entries
        ],
        styles=["" if entry.complete else "red" for entry in entries],
    )


@app.command()
def clean(
    containers: Annotated[
        bool,
        typer.Option(
            "--containers",
            help="Stop and remove every container with tbgen's label (left behind by a killed tbgen).",
        ),
    ] = False,
) -> None:
    """Remove what tbgen left behind."""
    with user_errors():
        if not containers:
            raise UsageError("Say what to clean.", "`tbgen clean --containers`")
        removed = remove_containers(tbgen_containers(connect()))
    say(f"Removed {len(removed)} container(s){': ' + ', '.join(removed) if removed else ''}.")
