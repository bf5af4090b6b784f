"""Inline SVG charts for the report: no scripts, no external assets, so the
report opens anywhere (and prints) exactly as generated."""
from __future__ import annotations

import time
from typing import Iterable, Mapping, Sequence

from markupsafe import Markup, escape

COLORS = {"block": "#c0392b", "steer": "#8e44ad", "drop_documents": "#16a085", "rerank": "#2980b9",
          "flag": "#e08e0b", "allow": "#6a9f58", "error": "#7f8c8d", "triggered": "#c0392b", "clear": "#6a9f58"}
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 48, 16, 16, 42


def color(name: str) -> str:
    return COLORS.get(name, "#555")


def _frame(kind: str, width: int, height: int, label: str, body: list[str]) -> Markup:
    return Markup(
        f'<svg class="chart {kind}" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def _nice(top: float) -> int:
    """A count axis top that gives whole-number ticks."""
    return max(4, -(-int(top) // 4) * 4)


def _y_axis(top: float, plot_h: float, width: int, body: list[str]) -> None:
    for i in range(5):
        y = _PAD_T + plot_h - plot_h * i / 4
        body.append(f'<line x1="{_PAD_L}" x2="{width - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        body.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{top * i // 4}</text>')


def _legend(names: Iterable[str], x: float, y: float, body: list[str]) -> None:
    for name in names:
        body.append(f'<rect x="{x:.0f}" y="{y - 9}" width="10" height="10" fill="{color(name)}"/>'
                    f'<text x="{x + 14:.0f}" y="{y}" class="legend">{escape(name)}</text>')
        x += 22 + 7 * len(name)


def timeline(buckets: Sequence[tuple[float, Mapping[str, int]]], step: float, actions: Sequence[str],
             width: int = 1240, height: int = 260) -> Markup:
    """Stacked bars: decisions per time bucket, by action."""
    body: list[str] = []
    plot_w, plot_h = width - _PAD_L - _PAD_R, height - _PAD_T - _PAD_B
    top = _nice(max((sum(c.values()) for _, c in buckets), default=1))
    _y_axis(top, plot_h, width, body)
    bar = plot_w / max(len(buckets), 1)
    for i, (start, counts) in enumerate(buckets):
        y = _PAD_T + plot_h
        for action in actions:
            n = counts.get(action, 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            body.append(f'<rect class="bar" data-action="{escape(action)}" x="{_PAD_L + i * bar + 0.5:.1f}" y="{y:.1f}" '
                        f'width="{max(bar - 1, 0.5):.1f}" height="{h:.1f}" fill="{color(action)}">'
                        f'<title>{_stamp(start)} {escape(action)}: {n}</title></rect>')
    for i in range(0, len(buckets), max(1, len(buckets) // 6)):
        x = _PAD_L + i * bar
        body.append(f'<text x="{x:.1f}" y="{height - _PAD_B + 14}" class="tick">{_stamp(buckets[i][0], step)}</text>')
    _legend(actions, _PAD_L, height - 8, body)
    return _frame("timeline", width, height, "decisions over time by action", body)


def histogram(name: str, triggered: Sequence[float], clear: Sequence[float], thresholds: Iterable[tuple[str, float]],
              bins: int = 30, width: int = 600, height: int = 230) -> Markup:
    """A signal's values, split by whether they met a rule's condition, with
    each threshold as a vertical line."""
    thresholds = sorted(set(thresholds), key=lambda t: t[1])
    values = list(triggered) + list(clear)
    lo = min(values + [t for _, t in thresholds])
    hi = max(values + [t for _, t in thresholds])
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    span = (hi - lo) * 1.02
    counts = {k: [0] * bins for k in ("triggered", "clear")}
    for key, series in (("triggered", triggered), ("clear", clear)):
        for v in series:
            counts[key][min(int((v - lo) / span * bins), bins - 1)] += 1
    body: list[str] = []
    plot_w, plot_h = width - _PAD_L - _PAD_R, height - _PAD_T - _PAD_B
    top = _nice(max(a + b for a, b in zip(counts["triggered"], counts["clear"])))
    _y_axis(top, plot_h, width, body)
    bar = plot_w / bins
    for i in range(bins):
        y = _PAD_T + plot_h
        for key in ("clear", "triggered"):
            n = counts[key][i]
            if n:
                h = plot_h * n / top
                y -= h
                body.append(f'<rect class="bin" x="{_PAD_L + i * bar + 0.5:.1f}" y="{y:.1f}" width="{max(bar - 1, 0.5):.1f}" '
                            f'height="{h:.1f}" fill="{color(key)}"><title>{lo + i * span / bins:.3g}–{lo + (i + 1) * span / bins:.3g}: {n} {key}</title></rect>')
    for i, (op, t) in enumerate(thresholds):
        x = _PAD_L + (t - lo) / span * plot_w
        y = _PAD_T + 8 + 13 * (i % 3)  # staggered: thresholds are often close together
        body.append(f'<line class="threshold" data-threshold="{t:g}" x1="{x:.1f}" x2="{x:.1f}" y1="{_PAD_T - 4}" '
                    f'y2="{_PAD_T + plot_h}"/><text x="{x + 3:.1f}" y="{y}" class="threshold-label">{escape(op)} {t:g}</text>')
    for i in range(5):
        v = lo + span * i / 4
        v = 0.0 if abs(v) < span * 1e-3 else v
        body.append(f'<text x="{_PAD_L + plot_w * i / 4:.1f}" y="{height - _PAD_B + 14}" class="tick" text-anchor="middle">{v:.3g}</text>')
    _legend(("triggered", "clear"), _PAD_L, height - 8, body)
    return _frame("histogram", width, height, f"distribution of {name} against its thresholds", body)


def _stamp(ts: float, step: float = 0) -> str:
    fmt = "%Y-%m-%d" if step >= 86400 else "%m-%d %H:%M" if step >= 60 else "%H:%M:%S"
    return time.strftime(fmt, time.gmtime(ts))
