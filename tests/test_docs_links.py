"""Every relative link and image of the Markdown pages (``README.md`` and everything under ``docs/``)
names a file of the repository, and a ``page.md#anchor`` link (or a page's own ``#anchor``) a heading
of that page, so moving or renaming a file, a figure or a section cannot leave a dead link behind.

Links are read as Markdown writes them — ``[text](target)`` and ``![alt](target)``, outside fenced and
inline code; ``http(s)://`` and ``mailto:`` targets are not followed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
EXTERNAL = ("http://", "https://", "mailto:")

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\S\n]*$", flags=re.S | re.M)
_INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", flags=re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks and inline code spans (whose brackets are not links)."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images of ``text`` (code left out), in order."""
    return _LINK.findall(_prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of the headings of the Markdown file ``path`` (``-1``, ``-2`` … for repeats)."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^ {0,3}#{1,6} (.+?)(?: #+)?$", text, flags=re.M):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def dead_links(page: Path) -> list[str]:
    """The links of ``page`` whose file (relative to the page's folder) or heading does not exist."""
    dead = []
    for link in links(page.read_text(encoding="utf-8")):
        if link.startswith(EXTERNAL):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            dead.append(f"{link} (no file {path})")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            dead.append(f"{link} (no heading with that anchor in {path})")
    return dead


def test_the_reader_sees_links_and_images_and_skips_code() -> None:
    text = (
        'See [a](a.md) and ![b](img/b.png "title"), [c [d]](c.md#x).\n'
        "`[not](a link)` and\n```\n![nor](this.png)\n```\n[e](<e.md>)"
    )
    assert links(text) == ["a.md", "img/b.png", "c.md#x", "e.md"]
    assert slug("ACL, `standard` preset (the shipped checkpoint `pretrained/acl-standard`)") == (
        "acl-standard-preset-the-shipped-checkpoint-pretrainedacl-standard"
    )


def test_a_dead_file_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "ok.png").write_bytes(b"")
    (tmp_path / "other.md").write_text("# A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n![ok](img/ok.png) ![gone](plots/gone.png) [o](other.md#a-heading) [x](other.md#nope)\n"
        "[self](#top) [web](https://example.org/x.png)\n",
        encoding="utf-8",
    )
    found = dead_links(page)
    assert [d.split(" (")[0] for d in found] == ["plots/gone.png", "other.md#nope"]


def test_there_are_pages_with_links() -> None:
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "results.md" in PAGES
    assert sum(len(links(p.read_text(encoding="utf-8"))) for p in PAGES) > 50


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert dead_links(page) == [], f"{page.relative_to(ROOT)}: dead links"
