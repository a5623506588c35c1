"""Reports a person would rather look at than read: PNG plots and one self-contained HTML file, for
`tbgen tune` (every measured point, the Pareto front, concurrency, what each tuned dimension did) and for
`tbgen bench --report`.

The plots are drawn with matplotlib's object API (a ``Figure`` on an Agg canvas), never pyplot: no global
state, no display, nothing to reset between reports. The HTML holds the PNGs as ``data:`` URIs and its CSS
inline, so it opens offline and alone (a CI artifact, a mail attachment). Every file is written under a
temporary name in its directory and renamed, so no reader sees half a report.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from triton_backend_gen.errors import TbgenError, UsageError
from triton_backend_gen.lazy import lazy_module
from triton_backend_gen.perf.stats import BenchReport, Level

mfigure = lazy_module("matplotlib.figure")
backend_agg = lazy_module("matplotlib.backends.backend_agg")
mcolors = lazy_module("matplotlib.colors")
mlines = lazy_module("matplotlib.lines")
mpatches = lazy_module("matplotlib.patches")
mticker = lazy_module("matplotlib.ticker")

MOST_CONFIGURATIONS = 5  # lines in concurrency.png
LOG_SPAN = 20  # latencies spanning more than this ratio get a log axis
GREY, FRONT, START, BEST, LIMIT = "#b5b5b5", "#1f5f99", "#222222", "#f5b700", "#c0392b"
BAR, BAR_START = "#2a9d8f", "#e76f51"
DPI = 100


class ReportError(TbgenError):
    """A report's files could not be written."""


# ---- Files ------------------------------------------------------------------------------------------------


def check_report_dir(out_dir: Path) -> None:
    """UsageError when ``out_dir`` exists and is not a directory (said before a long run, not after it)."""
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise UsageError(
            f"{out_dir} is a file: a report is a directory of files.",
            "Pass a directory for the report (it is created when missing).",
        )


def write_report_files(out_dir: Path, files: dict[str, bytes]) -> list[Path]:
    """Write ``files`` (name -> content) into ``out_dir``, created when missing; the paths, in order."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            _write_atomically(out_dir / name, data)
    except OSError as err:
        raise ReportError(
            f"Could not write the report into {out_dir}: {err.strerror or err}",
            "Pass a directory you can write to.",
        ) from err
    return [out_dir / name for name in files]


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)  # mkstemp's files are the owner's only; a report is to be shared
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def new_figure(width: float, height: float):
    """A figure on an Agg canvas, laid out by matplotlib's constrained layout (no pyplot)."""
    figure = mfigure.Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    backend_agg.FigureCanvasAgg(figure)
    return figure


def png_bytes(figure) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, facecolor="white")
    return buffer.getvalue()


def empty_panel(axes, text: str) -> None:
    """A panel that says why it has nothing to show."""
    axes.set_axis_off()
    axes.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, color="#555555", wrap=True)


# ---- Numbers as a person reads them ---------------------------------------------------------------------


def _ms(microseconds: float) -> str:
    """Microseconds as milliseconds with 3 significant digits or so: 0.052, 1.25, 37.1, 1,250."""
    ms = microseconds / 1000
    return (
        f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3f}"
    )


def _rate(value: float) -> str:
    """A throughput: 1,234.5, or 0.25 for slow models."""
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def _settings_text(settings: dict) -> str:
    """{"instances": 2, "batching": "on"} -> "instances=2, batching=on"."""
    return ", ".join(f"{key}={value}" for key, value in settings.items())


def _short(text: str, most: int = 42) -> str:
    """``text`` cut to ``most`` characters with an ellipsis (legend entries)."""
    return text if len(text) <= most else text[: most - 1] + "…"


# ---- Tune: which records are what -----------------------------------------------------------------------


def _is_start(record: dict) -> bool:
    """Whether ``record`` measured the model's own configuration."""
    return record.get("role") == "start" or record.get("config") == {}


def _same_point(a: dict | None, b: dict | None) -> bool:
    """Whether two records measured the same configuration at the same concurrency."""
    return (
        a is not None and b is not None and (a["label"], a["concurrency"]) == (b["label"], b["concurrency"])
    )


def _start_point(records: Sequence[dict]) -> dict | None:
    """The start configuration's point to name on the plot: its best one meeting the constraints, else its
    best."""
    starts = [r for r in records if _is_start(r)]
    if not starts:
        return None
    return max(starts, key=lambda r: (bool(r["meets"]), r["throughput"]))


def _best_labels(records: Sequence[dict], recommended: dict | None, most: int) -> list[str]:
    """The configurations to draw against concurrency: the recommended one, the start, then the others by
    their best throughput among points meeting the constraints (those with none after, by their best)."""
    best: dict[str, tuple[bool, float]] = {}
    for record in records:
        key = (bool(record["meets"]), record["throughput"])
        best[record["label"]] = max(best.get(record["label"], key), key)
    ranked = sorted(best, key=lambda label: best[label], reverse=True)
    start = _start_point(records)
    first = [r["label"] for r in (recommended, start) if r is not None]
    return list(dict.fromkeys(first + ranked))[:most]


def _dimensions(records: Sequence[dict]) -> dict[str, list]:
    """Each settings key with more than one value across ``records``: its values, sorted when all are
    integers, else in the order first measured."""
    values: dict[str, list] = {}
    for record in records:
        for key, value in record.get("settings", {}).items():
            seen = values.setdefault(key, [])
            if value not in seen:
                seen.append(value)
    return {
        key: sorted(seen) if all(isinstance(v, int) and not isinstance(v, bool) for v in seen) else seen
        for key, seen in values.items()
        if len(seen) > 1
    }


# ---- Tune: the plots ------------------------------------------------------------------------------------


def _draw_points(figure, axes, records: Sequence[dict]) -> None:
    """Every measured point: grey when outside the constraints, coloured by concurrency when within."""
    outside = [r for r in records if not r["meets"]]
    within = [r for r in records if r["meets"]]
    if outside:
        axes.scatter(
            [r["p99_us"] / 1000 for r in outside],
            [r["throughput"] for r in outside],
            s=16,
            color=GREY,
            label="outside the constraints",
            zorder=2,
        )
    if within:
        concurrencies = sorted({r["concurrency"] for r in within})
        norm = _concurrency_norm(concurrencies)
        dots = axes.scatter(
            [r["p99_us"] / 1000 for r in within],
            [r["throughput"] for r in within],
            s=30,
            c=[r["concurrency"] for r in within],
            cmap="viridis",
            norm=norm,
            edgecolors="white",
            linewidths=0.5,
            label="meets the constraints (colour: concurrency)",
            zorder=3,
        )
        if len(concurrencies) > 1:
            bar = figure.colorbar(dots, ax=axes, pad=0.01, aspect=30)
            bar.set_label("concurrency")
            bar.set_ticks(concurrencies[:: max(1, len(concurrencies) // 8)])
            bar.ax.yaxis.set_major_formatter(mticker.FormatStrFormatter("%d"))
            bar.ax.yaxis.set_minor_locator(mticker.NullLocator())


def _concurrency_norm(concurrencies: Sequence[int]):
    """A colour norm that tells concurrency levels apart: logarithmic when they span 4x or more."""
    low, high = min(concurrencies), max(concurrencies)
    if low >= 1 and high / low >= 4:
        return mcolors.LogNorm(vmin=low, vmax=high)
    return mcolors.Normalize(vmin=low - 0.5, vmax=high + 0.5)


def _draw_front(axes, front: Sequence[dict]) -> None:
    """The Pareto front as a step line: the best throughput to be had within each p99 latency."""
    ordered = sorted(front, key=lambda r: (r["p99_us"], -r["throughput"]))
    if len(ordered) > 1:
        axes.step(
            [r["p99_us"] / 1000 for r in ordered],
            [r["throughput"] for r in ordered],
            where="post",
            color=FRONT,
            linewidth=1.8,
            alpha=0.85,
            label="Pareto front",
            zorder=4,
        )


def _mark(axes, record: dict, text: str, style: dict, offset: tuple[int, int]) -> None:
    """A marker on ``record``'s point with ``text`` beside it, an arrow pointing at it."""
    x, y = record["p99_us"] / 1000, record["throughput"]
    axes.scatter([x], [y], zorder=6, **style)
    axes.annotate(
        text,
        (x, y),
        xytext=offset,
        textcoords="offset points",
        ha="left" if offset[0] >= 0 else "right",
        fontsize=10,
        fontweight="bold",
        arrowprops={"arrowstyle": "-", "color": "#444444", "linewidth": 0.8},
        bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "#999999", "alpha": 0.9},
        zorder=7,
    )


def _mark_start_and_recommended(axes, records: Sequence[dict], recommended: dict | None) -> None:
    """The start configuration (hollow squares, its best point named) and the recommended point (a star)."""
    starts = [r for r in records if _is_start(r)]
    if starts:
        axes.scatter(
            [r["p99_us"] / 1000 for r in starts],
            [r["throughput"] for r in starts],
            s=90,
            marker="s",
            facecolors="none",
            edgecolors=START,
            linewidths=1.4,
            label="start configuration",
            zorder=5,
        )
    start = _start_point(records)
    both = _same_point(start, recommended)
    if start is not None and not both:
        _mark(axes, start, "start", {"s": 0}, (14, -22))
    if recommended is not None:
        star = {"s": 280, "marker": "*", "color": BEST, "edgecolors": START, "linewidths": 0.8}
        _mark(axes, recommended, "recommended (start)" if both else "recommended", star, (-16, 14))
        axes.scatter([], [], label="recommended", **star)


def _draw_limits(axes, max_p99_us: float | None, min_throughput: float | None, *, vertical: bool) -> None:
    """The constraints as dashed lines: the p99 budget (vertical, or horizontal on a latency axis) and the
    least throughput."""
    if max_p99_us is not None:
        line = axes.axvline if vertical else axes.axhline
        line(
            max_p99_us / 1000, color=LIMIT, linestyle="--", linewidth=1.2, label=f"p99 ≤ {_ms(max_p99_us)} ms"
        )
    if min_throughput is not None and vertical:
        axes.axhline(
            min_throughput,
            color=LIMIT,
            linestyle=":",
            linewidth=1.4,
            label=f"throughput ≥ {min_throughput:,g}/s",
        )


def _latency_axis(axes, latencies_ms: Iterable[float]) -> None:
    """A logarithmic x axis when the latencies span more than LOG_SPAN."""
    positive = [value for value in latencies_ms if value > 0]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        axes.set_xscale("log")
        axes.xaxis.set_major_locator(mticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes.xaxis.set_major_formatter(mticker.FuncFormatter(lambda value, _: f"{value:g}"))


def _front_png(records, front, recommended, max_p99_us, min_throughput) -> bytes:
    """front.png: throughput against p99 latency of every point, the front, the start, the pick, the
    limits."""
    figure = new_figure(11.5, 6.6)
    axes = figure.add_subplot()
    if not records:
        empty_panel(axes, "Nothing was measured.")
        return png_bytes(figure)
    _draw_points(figure, axes, records)
    _draw_front(axes, front)
    _mark_start_and_recommended(axes, records, recommended)
    _draw_limits(axes, max_p99_us, min_throughput, vertical=True)
    _latency_axis(axes, [r["p99_us"] / 1000 for r in records])
    axes.set_xlabel("p99 latency (ms)")
    axes.set_ylabel("throughput (inferences/s)")
    axes.set_title("Throughput against p99 latency: every measured point", loc="left")
    axes.grid(True, alpha=0.3)
    axes.margins(x=0.06, y=0.1)
    axes.set_ylim(bottom=0)
    if axes.get_xscale() == "linear":
        axes.set_xlim(left=0)
    handles, labels = axes.get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), frameon=False)
    return png_bytes(figure)


def _concurrency_axis(axes, concurrencies: Sequence[int]) -> None:
    """An x axis with a tick at each measured concurrency: base-2 logarithmic when they span 8x or more."""
    if concurrencies and min(concurrencies) >= 1 and max(concurrencies) / min(concurrencies) >= 8:
        axes.set_xscale("log", base=2)
    shown = concurrencies[:: max(1, math.ceil(len(concurrencies) / 12))]
    axes.set_xticks(shown, [str(c) for c in shown])
    axes.xaxis.set_minor_locator(mticker.NullLocator())
    axes.set_xlabel("concurrency (requests in flight)")
    axes.grid(True, alpha=0.3)


def _draw_configuration(panels, points: Sequence[dict], name: str, colour) -> None:
    """One configuration's throughput and p99 against concurrency; hollow markers outside the constraints."""
    ordered = sorted({r["concurrency"]: r for r in points}.values(), key=lambda r: r["concurrency"])
    x = [r["concurrency"] for r in ordered]
    for axes, y in zip(
        panels, ([r["throughput"] for r in ordered], [r["p99_us"] / 1000 for r in ordered]), strict=True
    ):
        axes.plot(x, y, color=colour, marker="o", markersize=6, linewidth=1.8, label=name)
        outside = [(c, v) for c, v, r in zip(x, y, ordered, strict=True) if not r["meets"]]
        if outside:
            axes.plot(*zip(*outside, strict=True), linestyle="none", marker="o", markersize=6)[0].set(
                markerfacecolor="white", markeredgecolor=colour, markeredgewidth=1.5
            )


def _legend_name(label: str, records: Sequence[dict], recommended: dict | None) -> str:
    """A configuration's legend entry: its label, and whether it is the start or the recommended one."""
    roles = []
    if recommended is not None and recommended["label"] == label:
        roles.append("recommended")
    if any(_is_start(r) and r["label"] == label for r in records):
        roles.append("start")
    return _short(label) + (f" ({', '.join(roles)})" if roles else "")


def _concurrency_png(records, recommended, max_p99_us, min_throughput) -> bytes:
    """concurrency.png: throughput and p99 against concurrency of the best few configurations."""
    figure = new_figure(12, 5.4)
    panels = figure.subplots(1, 2, sharex=True)
    if not records:
        for axes in panels:
            empty_panel(axes, "Nothing was measured.")
        return png_bytes(figure)
    labels = _best_labels(records, recommended, MOST_CONFIGURATIONS)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    for index, label in enumerate(labels):
        points = [r for r in records if r["label"] == label]
        _draw_configuration(panels, points, _legend_name(label, records, recommended), palette[index])
    _draw_concurrency_limits(panels, max_p99_us, min_throughput)
    concurrencies = sorted({r["concurrency"] for r in records if r["label"] in labels})
    for axes, title, unit in zip(panels, ("Throughput", "p99 latency"), ("inferences/s", "ms"), strict=True):
        _concurrency_axis(axes, concurrencies)
        axes.set_ylabel(f"{title.lower()} ({unit})")
        axes.set_title(title, loc="left")
        axes.set_ylim(bottom=0)
    handles, names = panels[0].get_legend_handles_labels()
    extra = [h for h, n in zip(*panels[1].get_legend_handles_labels(), strict=True) if n.startswith("p99")]
    if any(not r["meets"] for r in records if r["label"] in labels):
        extra.append(_hollow_handle())
    figure.legend(
        handles + extra, names + [h.get_label() for h in extra], loc="outside lower center", ncols=3
    )
    many = f"{len(labels)} configurations" if len(labels) > 1 else "1 configuration"
    figure.suptitle(f"Against concurrency: {many}", x=0.01, ha="left")
    return png_bytes(figure)


def _draw_concurrency_limits(panels, max_p99_us: float | None, min_throughput: float | None) -> None:
    """The least throughput on the throughput panel, the p99 budget on the latency panel."""
    if min_throughput is not None:
        panels[0].axhline(
            min_throughput,
            color=LIMIT,
            linestyle=":",
            linewidth=1.4,
            label=f"throughput ≥ {min_throughput:,g}/s",
        )
    _draw_limits(panels[1], max_p99_us, None, vertical=False)


def _hollow_handle():
    """A legend entry for the hollow markers of points outside the constraints."""
    return mlines.Line2D(
        [],
        [],
        linestyle="none",
        marker="o",
        markerfacecolor="white",
        markeredgecolor="#555555",
        label="hollow: outside the constraints",
    )


def _best_by_value(records: Sequence[dict], key: str, values: Sequence) -> list[float | None]:
    """The best throughput at each of ``values`` of ``key`` (None where no record has it)."""
    best: dict = {}
    for record in records:
        value = record.get("settings", {}).get(key)
        if value in values:
            best[value] = max(best.get(value, 0.0), record["throughput"])
    return [best.get(value) for value in values]


def _draw_dimension(axes, key: str, values: Sequence, best: Sequence[float | None], start_value) -> None:
    """One dimension's panel: a bar per value, the start's value in its own colour."""
    names = [str(value) for value in values]
    heights = [value or 0.0 for value in best]
    colours = [BAR_START if value == start_value else BAR for value in values]
    bars = axes.bar(range(len(values)), heights, color=colours, width=0.65)
    axes.bar_label(bars, [_rate(h) if h is not None else "none" for h in best], fontsize=8, padding=2)
    long = max(map(len, names)) > 14 or sum(len(name) + 3 for name in names) > 36
    axes.set_xticks(range(len(values)), names, rotation=30 if long else 0, ha="right" if long else "center")
    axes.set_title(key, loc="left", fontsize=11)
    axes.set_ylim(0, max(heights + [1e-9]) * 1.18)
    axes.grid(True, axis="y", alpha=0.3)
    axes.set_axisbelow(True)


def _dimensions_png(records: Sequence[dict]) -> bytes:
    """dimensions.png: for each tuned dimension, the best throughput at each of its values."""
    dimensions = _dimensions(records)
    columns = min(len(dimensions), 3) or 1
    rows = max(1, math.ceil(len(dimensions) / columns))
    figure = new_figure(max(7.5, 4.3 * columns + 0.8), 3.4 * rows + 1.2)
    panels = figure.subplots(rows, columns, squeeze=False).ravel()
    if not dimensions:
        empty_panel(panels[0], "Every measured point had the same settings: no dimension to compare.")
        return png_bytes(figure)
    within = [r for r in records if r["meets"]]
    start = _start_point(records)
    for axes, (key, values) in zip(panels, dimensions.items(), strict=False):
        best = _best_by_value(within or records, key, values)
        _draw_dimension(axes, key, values, best, start.get("settings", {}).get(key) if start else None)
    for axes in panels[len(dimensions) :]:
        axes.set_axis_off()
    panels[0].set_ylabel("best throughput (inferences/s)")
    which = (
        "among points meeting the constraints" if within else "among all points (none met the constraints)"
    )
    figure.suptitle(
        f"What each dimension did: the best throughput at each value,\n{which}", x=0.01, ha="left"
    )
    patches = [
        mpatches.Patch(color=BAR_START, label="the start's value"),
        mpatches.Patch(color=BAR, label="other values"),
    ]
    figure.legend(handles=patches, loc="outside lower center", ncols=2, frameon=False)
    return png_bytes(figure)


# ---- HTML -----------------------------------------------------------------------------------------------

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f; margin: 0;
  background: #fafafa; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; background: white; }
h1 { font-size: 1.6em; margin: 0 0 6px; } h2 { font-size: 1.2em; margin: 32px 0 8px; }
p.lead { color: #444; margin: 4px 0; } p.explain { color: #555; max-width: 60em; }
.box { border-radius: 8px; padding: 12px 16px; margin: 16px 0; }
.good { background: #eef8f1; border: 1px solid #9fd3ad; }
.bad { background: #fff6e0; border: 1px solid #e8c66a; }
.box dl { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; margin: 6px 0 0; }
.box dt { color: #555; } .box dd { margin: 0; font-weight: 600; }
figure { margin: 12px 0 24px; } figure img { max-width: 100%; height: auto; border: 1px solid #e5e5e5; }
figcaption { color: #555; font-size: 0.92em; margin-top: 4px; }
table { border-collapse: collapse; font-size: 0.9em; margin: 8px 0; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e6e6e6; text-align: left; white-space: nowrap; }
th { background: #f3f4f6; position: sticky; top: 0; } td.n, th.n { text-align: right;
  font-variant-numeric: tabular-nums; }
tr.miss td { color: #999; } tr.pick td { background: #fff8d6; font-weight: 600; }
code { background: #f3f4f6; padding: 1px 4px; border-radius: 4px; }
"""


def html_page(title: str, body: Iterable[str]) -> bytes:
    """A whole HTML page: ``title`` (escaped here) and ``body`` (HTML already escaped)."""
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    ).encode()


def html_image(png: bytes, alt: str, caption: str) -> str:
    """An embedded PNG with its caption."""
    data = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(alt, quote=True)}'>"
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def html_table(headers: Sequence[str], rows: Iterable[Sequence], numeric: set[int], classes=()) -> str:
    """An HTML table; every cell escaped, the ``numeric`` columns right-aligned, row ``classes`` by index."""
    classes = list(classes)
    head = "".join(
        f"<th{' class=n' if i in numeric else ''}>{html.escape(h)}</th>" for i, h in enumerate(headers)
    )
    lines = []
    for index, row in enumerate(rows):
        cells = "".join(
            f"<td{' class=n' if i in numeric else ''}>{html.escape(str(cell))}</td>"
            for i, cell in enumerate(row)
        )
        style = f" class='{classes[index]}'" if index < len(classes) and classes[index] else ""
        lines.append(f"<tr{style}>{cells}</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(lines) + "\n</tbody>\n</table>"


# ---- Tune: the page -------------------------------------------------------------------------------------


def _constraints_text(objective: str, max_p99_us: float | None, min_throughput: float | None) -> str:
    """ "Objective: throughput. Constraints: p99 ≤ 5.00 ms, throughput ≥ 100/s." (not escaped)."""
    limits = []
    if max_p99_us is not None:
        limits.append(f"p99 latency ≤ {_ms(max_p99_us)} ms")
    if min_throughput is not None:
        limits.append(f"throughput ≥ {min_throughput:,g} inferences/s")
    return f"Objective: {objective}. Constraints: {', '.join(limits) if limits else 'none'}."


def _recommended_box(recommended: dict | None) -> str:
    """The recommended configuration's figures, or why there is none."""
    if recommended is None:
        return (
            "<div class='box bad'><strong>No configuration met the constraints.</strong> "
            "The plots and tables show every point measured: loosen the constraints, or look at the "
            "points nearest to them.</div>"
        )
    config = recommended.get("config") or {}
    fields = [
        ("configuration", recommended["label"]),
        ("settings", _settings_text(recommended.get("settings", {}))),
        ("changes to config.pbtxt", json.dumps(config, sort_keys=True, default=str) if config else "none"),
        ("concurrency", recommended["concurrency"]),
        ("throughput", f"{_rate(recommended['throughput'])} inferences/s"),
        ("latency", f"p50 {_ms(recommended['p50_us'])} ms, p99 {_ms(recommended['p99_us'])} ms"),
    ]
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>" for k, v in fields)
    return f"<div class='box good'><strong>Recommended</strong><dl>{rows}</dl></div>"


def _front_table(front: Sequence[dict], recommended: dict | None) -> str:
    """The Pareto front, from the lowest latency up."""
    ordered = sorted(front, key=lambda r: (r["p99_us"], -r["throughput"]))
    return html_table(
        ["configuration", "concurrency", "throughput (/s)", "p50 (ms)", "p99 (ms)"],
        [
            (r["label"], r["concurrency"], _rate(r["throughput"]), _ms(r["p50_us"]), _ms(r["p99_us"]))
            for r in ordered
        ],
        numeric={1, 2, 3, 4},
        classes=["pick" if _same_point(r, recommended) else "" for r in ordered],
    )


def _measurements_table(records: Sequence[dict], recommended: dict | None) -> str:
    """Every measurement in the order measured; those outside the constraints greyed."""
    return html_table(
        [
            "#",
            "elapsed (s)",
            "role",
            "configuration",
            "concurrency",
            "throughput (/s)",
            "p50 (ms)",
            "p99 (ms)",
        ]
        + ["meets"],
        [
            (
                index,
                f"{r.get('elapsed_s', 0.0):.1f}",
                r.get("role", ""),
                r["label"],
                r["concurrency"],
                _rate(r["throughput"]),
                _ms(r["p50_us"]),
                _ms(r["p99_us"]),
                "yes" if r["meets"] else "no",
            )
            for index, r in enumerate(records, 1)
        ],
        numeric={0, 1, 4, 5, 6, 7},
        classes=["pick" if _same_point(r, recommended) else "" if r["meets"] else "miss" for r in records],
    )


def _summary_text(records: Sequence[dict]) -> str:
    """ "12 measurements of 3 configurations in 84 s." (not escaped)."""
    configurations = len({r["label"] for r in records})
    seconds = max((r.get("elapsed_s", 0.0) for r in records), default=0.0)
    return (
        f"{len(records)} measurement{'s' * (len(records) != 1)} of {configurations} "
        f"configuration{'s' * (configurations != 1)} in {seconds:,.0f} s."
    )


TUNE_EXPLANATION = (
    "Each point is one measurement: one configuration of the model at one client concurrency (requests kept "
    "in flight). The Pareto front joins the points no other point beats on both throughput and p99 latency: "
    "the most throughput to be had within each latency. The recommended point is the one the objective picks "
    "among the points that meet the constraints."
)

FRONT_CAPTION = (
    "Grey dots: points outside the constraints; coloured: within them (the colour is the concurrency). "
    "Hollow squares: the model's own configuration."
)
CONCURRENCY_CAPTION = (
    "The recommended configuration, the start and the best others. Hollow markers: outside the constraints."
)
DIMENSIONS_CAPTION = (
    "The best throughput reached with each value of each tuned setting, whatever the other settings were."
)


def write_tune_report(
    out_dir: Path,
    records: list[dict],
    *,
    model: str,
    objective: str,
    max_p99_us: float | None,
    min_throughput: float | None,
    front: list[dict],
    recommended: dict | None,
    notes: Sequence[str] = (),
) -> list[Path]:
    """Write `tbgen tune`'s report into ``out_dir`` (created when missing): report.html (self-contained)
    and front.png, concurrency.png, dimensions.png; the paths written, the HTML first.

    ``records`` are the measurements in the order measured (dicts as in tune's results.jsonl: label,
    settings, config, concurrency, throughput, p50_us, p99_us, role, elapsed_s, meets), ``front`` those on
    the Pareto front, ``recommended`` the one chosen or None."""
    pngs = {
        "front.png": _front_png(records, front, recommended, max_p99_us, min_throughput),
        "concurrency.png": _concurrency_png(records, recommended, max_p99_us, min_throughput),
        "dimensions.png": _dimensions_png(records),
    }
    body = [
        f"<h1>Tuning {html.escape(model)}</h1>",
        f"<p class='lead'>{html.escape(_constraints_text(objective, max_p99_us, min_throughput))} "
        f"{html.escape(_summary_text(records))}</p>",
        f"<p class='explain'>{html.escape(TUNE_EXPLANATION)}</p>",
        _recommended_box(recommended),
        "<h2>Throughput against latency</h2>",
        html_image(pngs["front.png"], "throughput against p99 latency", FRONT_CAPTION),
        "<h2>Against concurrency</h2>",
        html_image(pngs["concurrency.png"], "throughput and p99 against concurrency", CONCURRENCY_CAPTION),
        "<h2>What each dimension did</h2>",
        html_image(pngs["dimensions.png"], "best throughput per value of each dimension", DIMENSIONS_CAPTION),
        "<h2>Pareto front</h2>",
        _front_table(front, recommended),
        "<h2>Every measurement</h2>",
        _measurements_table(records, recommended),
    ]
    if notes:
        items = "".join(f"<li>{html.escape(note)}</li>" for note in notes)
        body += ["<h2>Notes</h2>", f"<ul>{items}</ul>"]
    page = html_page(f"Tuning {model}", body)
    return write_report_files(out_dir, {"report.html": page, **pngs})


# ---- Bench ----------------------------------------------------------------------------------------------


def _latency_unit(levels: Sequence[Level]) -> tuple[float, str]:
    """(divisor, unit) for the levels' latencies: ms when p99 reaches 2 ms, else µs."""
    return (1000.0, "ms") if max((lv.p99_us for lv in levels), default=0.0) >= 2000 else (1.0, "µs")


def _bench_throughput(axes, levels: Sequence[Level]) -> None:
    """Throughput (and responses/s of a decoupled model) against concurrency."""
    x = [level.concurrency for level in levels]
    axes.plot(x, [lv.throughput for lv in levels], marker="o", color="#1f77b4", label="inferences/s")
    if any(level.responses_per_s for level in levels):
        axes.plot(x, [lv.responses_per_s for lv in levels], marker="s", color="#9467bd", label="responses/s")
    failed = [lv for lv in levels if lv.errors]
    if failed:
        axes.scatter(
            [lv.concurrency for lv in failed],
            [lv.throughput for lv in failed],
            marker="x",
            s=90,
            color=LIMIT,
            zorder=5,
            label="level with errors",
        )
    axes.set_ylabel("per second")
    axes.set_title("Throughput", loc="left")
    axes.set_ylim(bottom=0)
    axes.legend(loc="lower right", fontsize=9)


def _bench_latency(axes, levels: Sequence[Level], scale: float, unit: str) -> None:
    """The client's p50, p90 and p99 latency against concurrency."""
    x = [level.concurrency for level in levels]
    for name, colour in (("p50", "#2ca02c"), ("p90", "#ff7f0e"), ("p99", "#d62728")):
        y = [getattr(level, f"{name}_us") / scale for level in levels]
        axes.plot(x, y, marker="o", color=colour, label=name)
    axes.set_ylabel(f"latency ({unit})")
    axes.set_title("Latency (client)", loc="left")
    axes.set_ylim(bottom=0)
    axes.legend(loc="upper left", fontsize=9)


def _bench_server_time(axes, levels: Sequence[Level], scale: float, unit: str) -> None:
    """The server's queue and compute time per request at each level (stacked), the client's p50 beside."""
    positions = range(len(levels))
    queue = [level.server_queue_us / scale for level in levels]
    compute = [level.server_compute_us / scale for level in levels]
    axes.bar(positions, compute, width=0.6, color="#2a9d8f", label="compute")
    axes.bar(positions, queue, width=0.6, bottom=compute, color="#e9c46a", label="queue")
    axes.plot(
        positions,
        [level.p50_us / scale for level in levels],
        linestyle="none",
        marker="_",
        markersize=22,
        markeredgewidth=2,
        color="#333333",
        label="client p50",
    )
    axes.set_xticks(positions, [str(level.concurrency) for level in levels])
    axes.set_xlabel("concurrency (requests in flight)")
    axes.set_ylabel(f"{unit} per request")
    axes.set_title("Server time per request", loc="left")
    axes.legend(loc="best", fontsize=9)


def _bench_png(report: BenchReport) -> bytes:
    """bench.png: throughput, latency percentiles and the server's queue/compute time against concurrency."""
    figure = new_figure(12.5, 4.5)
    panels = figure.subplots(1, 3)
    levels = sorted(report.levels, key=lambda level: level.concurrency)
    if not levels:
        for axes in panels:
            empty_panel(axes, "No level was measured.")
        return png_bytes(figure)
    scale, unit = _latency_unit(levels)
    _bench_throughput(panels[0], levels)
    _bench_latency(panels[1], levels, scale, unit)
    _bench_server_time(panels[2], levels, scale, unit)
    for axes in panels[:2]:
        _concurrency_axis(axes, [level.concurrency for level in levels])
    for axes in panels:
        axes.grid(True, axis="y", alpha=0.3)
        axes.set_axisbelow(True)
    figure.suptitle(f"{report.model}: {report.protocol}, batch {report.batch_size}", x=0.01, ha="left")
    return png_bytes(figure)


def _bench_table(report: BenchReport, scale: float, unit: str) -> str:
    """One row per level, as `tbgen bench` prints them (latencies and server times in ``unit``)."""
    decoupled = any(level.responses_per_s for level in report.levels)
    headers = ["concurrency", "inferences/s", *(["responses/s"] if decoupled else [])]
    headers += [f"{name} ({unit})" for name in ("p50", "p90", "p99", "queue", "compute")]
    headers += ["client CPU", "server CPU", "errors"]
    rows = [
        (
            level.concurrency,
            _rate(level.throughput),
            *([_rate(level.responses_per_s)] if decoupled else []),
            *(_ms(value) if scale > 1 else f"{value:,.1f}" for value in _times(level)),
            f"{level.client_cpu:.0%}",
            f"{level.server_cpu:.0%}",
            level.errors,
        )
        for level in sorted(report.levels, key=lambda level: level.concurrency)
    ]
    return html_table(headers, rows, numeric=set(range(len(headers))))


def _times(level: Level) -> tuple[float, ...]:
    """A level's p50, p90 and p99 latency and the server's queue and compute time, in microseconds."""
    return level.p50_us, level.p90_us, level.p99_us, level.server_queue_us, level.server_compute_us


BENCH_CAPTION = (
    "Left: throughput. Middle: the client's latency percentiles. Right: where the server spent each "
    "request's time (stacked), the dash the client's p50 latency."
)


BENCH_EXPLANATION = (
    "Each level keeps that many requests in flight for the measurement time. Throughput counts inferences "
    "(requests x batch size) per second; latencies are the client's, from sending a request to its whole "
    "answer. Queue and compute are the server's own statistics per request: where the server spent the "
    "time (what the client's latency adds beyond them is the network and the client). CPU is the share of "
    "one core over the level (client and server share this machine's cores when both run here)."
)


def _errors_box(errors: int) -> str:
    """A warning when requests failed, else nothing."""
    if not errors:
        return ""
    failed = f"{errors} request{'s' * (errors != 1)} failed"
    return f"<div class='box bad'><strong>{failed}</strong> (the errors column says at which levels).</div>"


def write_bench_report(out_dir: Path, report: BenchReport) -> list[Path]:
    """Write `tbgen bench --report`'s files into ``out_dir`` (created when missing): bench-report.html
    (self-contained) and bench.png; the paths written, the HTML first."""
    png = _bench_png(report)
    scale, unit = _latency_unit(report.levels)
    errors = sum(level.errors for level in report.levels)
    line = (
        f"{report.protocol}, batch size {report.batch_size}, load from {report.tool}, "
        f"against {report.server}."
    )
    body = [
        f"<h1>Benchmark of {html.escape(report.model)}</h1>",
        f"<p class='lead'>{html.escape(line)}</p>",
        f"<p class='explain'>{html.escape(BENCH_EXPLANATION)}</p>",
        _errors_box(errors),
        html_image(png, "throughput, latency and server time against concurrency", BENCH_CAPTION),
        "<h2>Levels</h2>",
        _bench_table(report, scale, unit),
    ]
    page = html_page(f"Benchmark of {report.model}", body)
    return write_report_files(out_dir, {"bench-report.html": page, "bench.png": png})
