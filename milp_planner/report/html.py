"""``report.html``: one self-contained file (inline CSS, figures as base64 PNG or inline SVG; no
links, no scripts). Every text is escaped here (``html.escape``); an SVG block comes from
``milp_planner.trace.timeline_svg``, which escapes every name in it."""

from __future__ import annotations

import base64
from html import escape

from milp_planner.report.document import Bullets, Document, Heading, Image, Para, Svg, Table

CSS = """
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 0;
       color: #1d2330; background: #f4f5f7; line-height: 1.45; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; min-height: 100vh;
       box-sizing: border-box; }
h1 { font-size: 26px; margin: 4px 0 6px; }
h2 { font-size: 20px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #dfe3ea; }
h3 { font-size: 16px; margin: 24px 0 8px; color: #2d4a7a; }
p { margin: 8px 0; max-width: 80em; }
p.muted { color: #5b6475; font-size: 13px; }
nav { font-size: 13px; margin: 6px 0 12px; }
nav a { color: #2d4a7a; margin-right: 14px; text-decoration: none; }
.scroll { overflow-x: auto; margin: 4px 0 14px; }
table { border-collapse: collapse; font-size: 13px; }
p.cap { font-weight: 600; font-size: 13px; margin: 14px 0 2px; }
th, td { border: 1px solid #d5dae3; padding: 4px 9px; vertical-align: top; }
th { background: #e9edf4; text-align: left; white-space: nowrap; }
td:first-child { white-space: nowrap; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #f8f9fb; }
figure { margin: 12px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e6ec; }
figure svg { max-width: 100%; height: auto; border: 1px solid #e3e6ec; background: #fff; }
figcaption { font-size: 12px; color: #5b6475; }
ul { margin: 6px 0 10px; padding-left: 22px; font-size: 14px; }
"""


def _table(b: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in b.headers)
    body = []
    for r in b.rows:
        tds = "".join(f'<td class="num">{escape(str(c))}</td>' if i >= b.numeric_from else f"<td>{escape(str(c))}</td>"
                      for i, c in enumerate(r))
        body.append(f"<tr>{tds}</tr>")
    cap = f'<p class="cap">{escape(b.caption)}</p>' if b.caption else ""
    return f'{cap}<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def render_html(doc: Document) -> str:
    parts = []
    toc = []
    for b in doc.blocks:
        if isinstance(b, Heading):
            anchor = f' id="{escape(b.anchor)}"' if b.anchor else ""
            parts.append(f"<h{b.level}{anchor}>{escape(b.text)}</h{b.level}>")
            if b.level == 2 and b.anchor:
                toc.append(f'<a href="#{escape(b.anchor)}">{escape(b.text)}</a>')
        elif isinstance(b, Para):
            parts.append(f'<p class="muted">{escape(b.text)}</p>' if b.muted else f"<p>{escape(b.text)}</p>")
        elif isinstance(b, Table):
            parts.append(_table(b))
        elif isinstance(b, Image):
            data = base64.b64encode(b.png).decode("ascii")
            parts.append(f'<figure><img alt="{escape(b.alt)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{escape(b.alt)}</figcaption></figure>")
        elif isinstance(b, Svg):
            parts.append(f'<figure>{b.inline}<figcaption>{escape(b.alt)}</figcaption></figure>')
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{escape(i)}</li>" for i in b.items) + "</ul>")
    nav = f"<nav>{''.join(toc)}</nav>" if toc else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{escape(doc.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        f"<h1>{escape(doc.title)}</h1>\n{nav}\n" + "\n".join(parts) + "\n</main>\n</body>\n</html>\n"
    )
