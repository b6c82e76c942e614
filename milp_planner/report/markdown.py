"""``report.md``: the document as Markdown; figures are files under ``figures/`` beside it."""

from __future__ import annotations

from milp_planner.report.document import Bullets, Document, Heading, Image, Para, Table


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            out += [f"_{b.text}_" if b.muted else b.text, ""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"**{b.caption}**", ""]
            out.append("| " + " | ".join(_cell(h) for h in b.headers) + " |")
            out.append("|" + "|".join("---:" if i >= b.numeric_from else "---" for i in range(len(b.headers))) + "|")
            for r in b.rows:
                out.append("| " + " | ".join(_cell(c) for c in r) + " |")
            out.append("")
        elif isinstance(b, Image):
            out += [f"![{b.alt}](figures/{b.name})", ""]
        elif isinstance(b, Bullets):
            out += [f"- {item}" for item in b.items] + [""]
    return "\n".join(out).rstrip() + "\n"
