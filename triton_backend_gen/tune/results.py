"""``build/tbgen/tune/results.jsonl``: one JSON object per measurement, appended as each is made (a search cut
short keeps what it measured), and ``search.json`` beside it: what was searched (model, start configuration,
whether the grid) and whether the search ran to its end, so that ``--resume`` continues the same search, or
decides a finished one again from its measurements.

Each line: ``config`` (the settings that differ from the model's config.pbtxt), ``settings`` (every tuned
dimension's value), ``label``, ``concurrency``, ``throughput`` (inferences/s), ``p50_us``, ``p99_us``,
``batch`` (mean rows per execution), ``exec_us``, ``queue_us``, ``elapsed_s`` (since the search started),
``meets`` (within the constraints) and ``role``: ``"start"`` for the model's own configuration,
``"recommended"`` for the one tune recommends (a copy of its measurement, written once decided), else
``"point"``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from triton_backend_gen.errors import TuneError, UsageError
from triton_backend_gen.tune.search import Constraints, Point
from triton_backend_gen.tune.space import OFF, Batching, Settings

RESULTS = "results.jsonl"
SEARCH = "search.json"
_BATCHING = re.compile(r"(\d+)us( full)?")


def record(point: Point, start: Settings, constraints: Constraints, role: str | None = None) -> dict:
    """``point`` as a results.jsonl object."""
    return {
        "config": point.settings.differences(start),
        "settings": point.settings.as_dict(),
        "label": point.settings.label(),
        "concurrency": point.concurrency,
        "throughput": round(point.throughput, 3),
        "p50_us": round(point.p50_us, 1),
        "p99_us": round(point.p99_us, 1),
        "batch": round(point.batch, 3),
        "exec_us": round(point.exec_us, 1),
        "queue_us": round(point.queue_us, 1),
        "elapsed_s": round(point.elapsed_s, 2),
        "meets": constraints.meets(point.throughput, point.p99_us),
        "role": role or ("start" if point.settings == start else "point"),
    }


def point_of(entry: dict) -> Point:
    """A results.jsonl object back as a Point (ValueError, KeyError, TypeError or AttributeError when it is
    not one)."""
    values = entry["settings"]
    point = Point(
        Settings(
            int(values["instances"]),
            int(values["max_batch_size"]),
            parse_batching(values["batching"]),
            int(values["strategy_limit"]) if values.get("strategy_limit") is not None else None,
        ),
        int(entry["concurrency"]),
        float(entry["throughput"]),
        float(entry["p50_us"]),
        float(entry["p99_us"]),
        float(entry["batch"]),
        float(entry["exec_us"]),
        float(entry["queue_us"]),
        float(entry["elapsed_s"]),
    )
    figures = (point.concurrency, point.throughput, point.p50_us, point.p99_us, point.settings.instances)
    if not all(math.isfinite(value) and value > 0 for value in figures):
        raise ValueError(f"a measurement needs positive figures: {entry}")
    return point


def parse_batching(text: str) -> Batching:
    """A Batching from its text ("off", "500us", "2000us full")."""
    if text == "off":
        return OFF
    match = _BATCHING.fullmatch(text)
    if match is None:
        raise ValueError(f"not a batching setting: {text!r}")
    return Batching(True, int(match.group(1)), bool(match.group(2)))


class ResultsFile:
    """results.jsonl and search.json of one tune directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / RESULTS
        self.search_path = directory / SEARCH

    def begin(self, search: dict) -> None:
        """A new search: results.jsonl emptied, search.json written."""
        with _writing(self.directory):
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_atomically(self.search_path, json.dumps(search, indent=2) + "\n")
            _write_atomically(self.path, "")

    def read_search(self) -> dict:
        """search.json of the earlier search (UsageError when there is none, or it is not one)."""
        try:
            search = json.loads(self.search_path.read_text())
        except FileNotFoundError:
            raise UsageError(
                f"There is no earlier search to resume in {self.directory}.",
                "Run `tbgen tune` without --resume.",
            ) from None
        except (OSError, ValueError) as err:
            raise _not_resumable(self.search_path, err) from None
        if not isinstance(search, dict):
            raise _not_resumable(self.search_path, "not a JSON object")
        return search

    def resumable(self, search: dict) -> list[Point]:
        """The points of the earlier search, which must have tuned the same model from the same start
        (UsageError otherwise, or when its files are not a search's)."""
        earlier = self.read_search()
        for key in ("model", "start"):
            if earlier.get(key) != search.get(key):
                raise UsageError(
                    f"The search in {self.directory} tuned {key} {earlier.get(key)!r}, "
                    f"not {search.get(key)!r} (config.pbtxt changed since?).",
                    "Run `tbgen tune` without --resume to start a new search.",
                )
        try:
            entries = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
            return [point_of(entry) for entry in entries if entry.get("role") != "recommended"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise _not_resumable(self.path, err) from None

    def finished(self) -> bool:
        """Whether the search on disk ran to its end (converged, or measured the whole space); one cut short
        by Ctrl-C or by its budget is not."""
        return bool(self.read_search().get("finished"))

    def finish(self) -> None:
        """Mark the search on disk as run to its end."""
        with _writing(self.search_path):
            search = {**self.read_search(), "finished": True}
            _write_atomically(self.search_path, json.dumps(search, indent=2) + "\n")

    def append(self, entry: dict) -> None:
        with _writing(self.path), self.path.open("a") as out:
            out.write(json.dumps(entry) + "\n")

    def decide(self, entries: Iterable[dict], recommended: dict | None) -> None:
        """Rewrite results.jsonl with ``entries`` and the ``recommended`` line (when there is one)."""
        lines = [json.dumps(entry) for entry in entries]
        if recommended is not None:
            lines.append(json.dumps(recommended))
        with _writing(self.path):
            _write_atomically(self.path, "".join(line + "\n" for line in lines))


def _not_resumable(path: Path, why) -> UsageError:
    return UsageError(
        f"{path} is not a search that --resume can continue ({why}).",
        "Run `tbgen tune` without --resume: it starts a new search.",
    )


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """OSError while writing ``path`` as a TuneError naming it."""
    try:
        yield
    except OSError as err:
        raise TuneError(
            f"Could not write {path}: {err.strerror or err}",
            "Make build/tbgen/tune writable: tune writes there.",
        ) from err


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)
