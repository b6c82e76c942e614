"""``report.md``: the document as Markdown; figures are files under ``figures/`` beside it.

Every text of the document is literal: names from the instances, planner messages and
errors cannot add markup (``<script>``, links, emphasis, table cells), see
``milp_planner.io.markdown_text``.
"""

from __future__ import annotations

from milp_planner.io import markdown_text
from milp_planner.report.document import Bullets, Document, Heading, Image, Para, Svg, Table


def _cell(text) -> str:
    return markdown_text(text)


def render_markdown(doc: Document) -> str:
    out = [f"# {markdown_text(doc.title)}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + markdown_text(b.text), ""]
        elif isinstance(b, Para):
            text = markdown_text(b.text)
            out += [f"_{text}_" if b.muted and text else text, ""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"**{markdown_text(b.caption)}**", ""]
            out.append("| " + " | ".join(_cell(h) for h in b.headers) + " |")
            out.append("|" + "|".join("---:" if i >= b.numeric_from else "---" for i in range(len(b.headers))) + "|")
            for r in b.rows:
                out.append("| " + " | ".join(_cell(c) for c in r) + " |")
            out.append("")
        elif isinstance(b, (Image, Svg)):
            out += [f"![{markdown_text(b.alt)}](figures/{b.name})", ""]
        elif isinstance(b, Bullets):
            out += [f"- {markdown_text(item)}" for item in b.items] + [""]
    return "\n".join(out).rstrip() + "\n"
