"""Charts for the site's pages: inline SVG line charts on log axes.

A small function of the project's own rather than a plotting library:
matplotlib is not a dependency of mpsprobe (nor installed where a published
site runs), a JavaScript library from a CDN would leave an offline or archived
page blank, and the charts need only log axes, a few lines and one marker.
Every chart on a page comes with its numbers as a table beneath it.
"""
import html
import math

CPU_COLOUR, TARGET_COLOUR, MARK_COLOUR = "#57606a", "#0969da", "#cf222e"


def _ticks(lo, hi, values=()):
    """Tick positions on a log axis: the data's own values when up to 8, else the powers of
    ten in range (the range's ends when fewer than two)."""
    distinct = sorted(set(values))
    if 0 < len(distinct) <= 8:
        return distinct
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    powers = [10.0 ** e for e in range(first, last + 1) if lo <= 10.0 ** e <= hi]
    return powers if len(powers) >= 2 else [lo, hi]


def _label(value):
    if value >= 1e4 or value < 1e-2:
        mantissa, exponent = f"{value:.0e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    if value >= 100 or (value >= 1 and value == int(value)):
        return f"{value:.0f}"   # 6630, not .3g's 6.63e+03
    return f"{value:.3g}"


def svg_chart(series, *, x_label, y_label, marker=None, marker_label="", width=460, height=260,
              title=""):
    """An SVG line chart with log x and log y axes, or "" when there is nothing to draw.

    series: [(name, colour, [(x, y), ...])], points with a y of None (or
    not positive) left out; marker: an x where a dashed vertical line is drawn
    with `marker_label` (the crossover). Text is escaped.
    """
    points = [(x, y) for _, _, pts in series for x, y in pts if x and y and x > 0 and y > 0]
    if not points:
        return ""
    left, right, top, bottom = 64, 16, 24, 44
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    if x_lo == x_hi:
        x_lo, x_hi = x_lo / 2, x_hi * 2
    if y_lo == y_hi:
        y_lo, y_hi = y_lo / 2, y_hi * 2
    lx, ly = math.log10(x_lo), math.log10(y_lo)
    sx = (width - left - right) / (math.log10(x_hi) - lx)
    sy = (height - top - bottom) / (math.log10(y_hi) - ly)

    def px(x):
        return left + (math.log10(x) - lx) * sx

    def py(y):
        return height - bottom - (math.log10(y) - ly) * sy

    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="mp-chart" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title or y_label)}" '
           f'font-family="sans-serif" font-size="11">']
    if title:
        out.append(f'<text x="{left}" y="14" font-weight="600">{e(title)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               f'fill="none" stroke="#d0d7de"/>')
    for t in _ticks(x_lo, x_hi, xs):
        out.append(f'<line x1="{px(t):.1f}" y1="{height - bottom}" x2="{px(t):.1f}" y2="{height - bottom + 4}" '
                   f'stroke="#57606a"/><text x="{px(t):.1f}" y="{height - bottom + 16}" '
                   f'text-anchor="middle">{_label(t)}</text>')
    for t in _ticks(y_lo, y_hi):
        out.append(f'<line x1="{left - 4}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" '
                   f'stroke="#eaeef2"/><text x="{left - 6}" y="{py(t) + 4:.1f}" '
                   f'text-anchor="end">{_label(t)}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               f'{e(x_label)}</text>')
    out.append(f'<text transform="translate(14 {(top + height - bottom) / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{e(y_label)}</text>')
    if marker and x_lo <= marker <= x_hi:
        out.append(f'<line class="mp-crossover" x1="{px(marker):.1f}" y1="{top}" x2="{px(marker):.1f}" '
                   f'y2="{height - bottom}" stroke="{MARK_COLOUR}" stroke-dasharray="4 3"/>'
                   f'<text x="{px(marker) + 4:.1f}" y="{top + 12}" fill="{MARK_COLOUR}">{e(marker_label)}</text>')
    legend_x = width - right - sum(22 + 7 * len(name) for name, _, _ in series)
    for name, colour, pts in series:
        kept = sorted((x, y) for x, y in pts if x and y and x > 0 and y > 0)
        if not kept:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in kept)
        out.append(f'<polyline class="mp-series" points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in kept]
        out.append(f'<rect x="{legend_x}" y="8" width="8" height="8" fill="{colour}"/>'
                   f'<text x="{legend_x + 11}" y="16" fill="{colour}">{e(name)}</text>')
        legend_x += 22 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)


SHARE_COLOURS = ("#0969da", "#8250df", "#1a7f37", "#bc4c00", "#57606a", "#cf222e")


def svg_share_chart(series, versions, *, width=640, height=240, title=""):
    """Shares (0 to 1) against torch releases (categorical x, in `versions`' order): one line
    per series, dashed where only declared. `series`: [(label, dashed, {version: share})]."""
    if not series or not versions:
        return ""
    left, right, top, bottom = 44, 12, 12, 48
    step = (width - left - right) / max(1, len(versions) - 1)
    x = {v: left + i * step if len(versions) > 1 else (left + width - right) / 2 for i, v in enumerate(versions)}

    def py(share):
        return top + (1 - share) * (height - top - bottom)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="mp-chart mp-share" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(title)}">']
    for share in (0, 0.25, 0.5, 0.75, 1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{py(share):.1f}" y2="{py(share):.1f}" '
                   f'stroke="#eaeef2"/><text x="{left - 6}" y="{py(share) + 4:.1f}" text-anchor="end" '
                   f'font-size="11" fill="#57606a">{share:.0%}</text>')
    for v in versions:
        out.append(f'<text x="{x[v]:.1f}" y="{height - bottom + 14}" font-size="10" fill="#57606a" '
                   f'text-anchor="end" transform="rotate(-35 {x[v]:.1f} {height - bottom + 14})">'
                   f'{html.escape(v)}</text>')
    for i, (label, dashed, shares) in enumerate(series):
        colour = SHARE_COLOURS[i % len(SHARE_COLOURS)]
        points = [(x[v], py(shares[v])) for v in versions if v in shares]
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        if len(points) > 1:
            path = " ".join(f"{a:.1f},{b:.1f}" for a, b in points)
            out.append(f'<polyline class="mp-series" points="{path}" fill="none" stroke="{colour}" '
                       f'stroke-width="2"{dash}><title>{html.escape(label)}</title></polyline>')
        for a, b in points:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{colour}"><title>'
                       f'{html.escape(label)}</title></circle>')
    out.append("</svg>")
    return "\n".join(out)
