"""One-page HTML of a run report: ``report.md`` as ``report.html`` beside it, every plot embedded as a
base64 ``data:`` URI, so the one file opens in a browser anywhere (no external file, style sheet, font
or script).

The converter covers the Markdown the reports write (:mod:`fastweights.recipes.reporting`): ``#``
headings, paragraphs, pipe tables (``\\|`` escapes), ``-``/``*`` lists, fenced code blocks, images,
links, ``**bold**``, ``*italics*`` and ```code``` spans. Anything else is shown as text (escaped).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator
from pathlib import Path

from fastweights.io import PathLike, atomic_write_text

__all__ = ["markdown_to_html", "write_html_report"]

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; line-height: 1.45; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; display: block; margin: 0.6em 0; }
pre { background: #f5f5f5; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: 0.9em; }
h1, h2, h3 { margin-top: 1.4em; }
"""
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*$")
_ITEM = re.compile(r"^\s*[-*]\s+(.*)$")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MIME = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".svg": "image/svg+xml",
}


def _image(alt: str, src: str, base: Path) -> str:
    """``<img>`` with the file ``base/src`` as a data URI; the alt text in italics when it cannot be read
    (a missing plot, a remote address)."""
    path = base / html.unescape(src)
    mime = _MIME.get(path.suffix.lower())
    if mime is None or "://" in src or not path.is_file():
        return f"<em>[{alt}: {src} not embedded]</em>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{alt}" src="data:{mime};base64,{data}">'


def _inline(text: str, base: Path) -> str:
    """Inline Markdown → HTML: code spans verbatim (escaped), then images, links, bold, italics."""
    out = []
    for k, part in enumerate(re.split(r"(`[^`]+`)", text)):
        if k % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        s = html.escape(part, quote=False)
        s = _IMAGE.sub(lambda m: _image(m.group(1), m.group(2), base), s)
        s = _LINK.sub(
            lambda m: (
                f'<a href="{m.group(2)}">{m.group(1)}</a>'
                if m.group(2).startswith("#")
                else f"{m.group(1)} ({m.group(2)})"
            ),
            s,
        )
        s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
        s = re.sub(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", r"<em>\1</em>", s)
        out.append(s)
    return "".join(out)


def _cells(line: str) -> list[str]:
    """The cells of a pipe-table row (``\\|`` is a literal ``|``)."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def _blocks(lines: list[str], base: Path) -> Iterator[str]:
    """The HTML blocks of Markdown ``lines``."""
    i, para = 0, []

    def flush() -> Iterator[str]:
        if para:
            yield f"<p>{_inline(' '.join(para), base)}</p>"
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("```"):
            yield from flush()
            end = next(
                (k for k in range(i + 1, len(lines)) if lines[k].strip().startswith("```")), len(lines)
            )
            yield f"<pre><code>{html.escape(chr(10).join(lines[i + 1 : end]))}</code></pre>"
            i = end + 1
        elif not line.strip():
            yield from flush()
            i += 1
        elif m := _HEADING.match(line):
            yield from flush()
            n = len(m.group(1))
            yield f"<h{n}>{_inline(m.group(2), base)}</h{n}>"
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and _RULE.match(lines[i + 1].strip()):
            yield from flush()
            head = "".join(f"<th>{_inline(c, base)}</th>" for c in _cells(line))
            rows, i = [], i + 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(
                    "<tr>" + "".join(f"<td>{_inline(c, base)}</td>" for c in _cells(lines[i])) + "</tr>"
                )
                i += 1
            yield f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        elif _ITEM.match(line):
            yield from flush()
            items = []
            while i < len(lines) and (m := _ITEM.match(lines[i])):
                items.append(f"<li>{_inline(m.group(1), base)}</li>")
                i += 1
            yield f"<ul>{''.join(items)}</ul>"
        else:
            para.append(line.strip())
            i += 1
    yield from flush()


def markdown_to_html(text: str, base: PathLike, title: str | None = None) -> str:
    """A complete HTML page of the Markdown ``text``; images are read from paths relative to ``base``
    and embedded. ``title`` (default: the first heading) names the page."""
    lines = text.splitlines()
    if title is None:
        first = next((m.group(2) for ln in lines if (m := _HEADING.match(ln))), "report")
        title = first
    body = "\n".join(_blocks(lines, Path(base)))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def write_html_report(md_path: PathLike) -> Path:
    """Write ``report.html`` beside the Markdown report ``md_path`` (same stem, plots embedded),
    atomically; returns its path."""
    md_path = Path(md_path)
    out = md_path.with_suffix(".html")
    atomic_write_text(out, markdown_to_html(md_path.read_text(encoding="utf-8"), md_path.parent))
    return out
