"""Running a plan of checks against a server, and reporting the results as JUnit XML."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from triton_backend_gen.smoke.clients import Endpoints, error_text


@dataclass(frozen=True)
class SmokeCheck:
    name: str
    protocol: str  # "http", "grpc" or "-" (no server contact)
    run: Callable[[Endpoints], str]  # a short detail on success; raises with a clear message on failure
    waits: str = ""  # a check that waits on purpose says so ("waits 6.5 s on purpose: ..."), for the output
    quick: bool = True  # part of the quick checks `tbgen dev` runs on every save (False: the full suite only)
    model: str = ""  # the model it checks ("": none in particular), whose checks stop when it breaks


@dataclass(frozen=True)
class SmokeResult:
    name: str
    protocol: str
    passed: bool
    detail: str
    seconds: float


# Asked after each check with its result: the models found broken since (e.g. a python stub of theirs died),
# each with why.
BrokenModels = Callable[[SmokeCheck, SmokeResult], Mapping[str, str]]


def run_smoke(
    plan: list[SmokeCheck],
    endpoints: Endpoints,
    is_healthy: Callable[[], bool] | None = None,
    progress: Callable[[SmokeResult], None] | None = None,
    on_start: Callable[[SmokeCheck], None] | None = None,
    broken_models: BrokenModels | None = None,
) -> list[SmokeResult]:
    """Run every check in order (``on_start`` hears of each before it runs, ``progress`` of its result).
    ``is_healthy`` (e.g. "the server process is alive and answers") is asked after each check; once it says
    no, that check fails and the remaining ones are reported as not run. ``broken_models`` is asked after
    each check too: a model it names fails that check and its remaining checks are reported as not run (the
    other models' checks go on)."""
    results = []
    broken_after: str | None = None
    broken: dict[str, str] = {}
    for check in plan:
        if broken_after is not None or check.model in broken:
            why = broken.get(check.model) or f"the server stopped being healthy during '{broken_after}'"
            result = SmokeResult(check.name, check.protocol, False, f"not run: {why}", 0.0)
        else:
            if on_start is not None:
                on_start(check)
            result, healthy = _run_check(check, endpoints, is_healthy)
            broken_after = None if healthy else check.name
            if healthy and broken_models is not None:
                result = _judged_broken(check, result, broken_models, broken)
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def _run_check(
    check: SmokeCheck, endpoints: Endpoints, is_healthy: Callable[[], bool] | None
) -> tuple[SmokeResult, bool]:
    """(result, whether the server is healthy afterwards) of one check, timed: an exception is a failure with
    its reason, and so is a server found unhealthy afterwards (whatever the check said)."""
    start = time.monotonic()
    try:
        passed, detail = True, check.run(endpoints)
    except AssertionError as err:
        passed, detail = False, str(err) or "assertion failed"
    except Exception as err:  # noqa: BLE001 - a check that breaks is a failed check, with its reason
        passed, detail = False, f"{type(err).__name__}: {error_text(err)}"
    healthy = is_healthy is None or is_healthy()
    if not healthy:
        passed, detail = False, f"the server is not healthy after this check ({detail})"
    return SmokeResult(check.name, check.protocol, passed, detail, time.monotonic() - start), healthy


def _judged_broken(
    check: SmokeCheck, result: SmokeResult, broken_models: BrokenModels, broken: dict[str, str]
) -> SmokeResult:
    """``result``, failed when ``broken_models`` finds the check's model broken now (``broken`` learns of
    every model it names)."""
    found = broken_models(check, result)
    broken.update(found)
    if check.model not in found:
        return result
    was = "passed" if result.passed else "failed"
    detail = f"{found[check.model]}; the check itself {was}: {result.detail}"
    return SmokeResult(result.name, result.protocol, False, detail, result.seconds)


def write_junit_xml(results: list[SmokeResult], path: Path, suite: str) -> None:
    """``results`` as a JUnit XML report (one testcase per result) at ``path``."""
    failures = sum(1 for r in results if not r.passed)
    root = ET.Element("testsuites", tests=str(len(results)), failures=str(failures))
    node = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(results)),
        failures=str(failures),
        errors="0",
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        name = f"{result.name} [{result.protocol}]" if result.protocol != "-" else result.name
        case = ET.SubElement(node, "testcase", classname=suite, name=name, time=f"{result.seconds:.3f}")
        if result.passed:
            ET.SubElement(case, "system-out").text = result.detail
        else:
            failure = ET.SubElement(
                case, "failure", message=result.detail.splitlines()[0][:500] if result.detail else ""
            )
            failure.text = result.detail
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
