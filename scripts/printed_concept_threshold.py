"""Measure the printed sources' image-rule threshold, ``concepts.PRINTED_CONCEPT_NCC``.

    PYTHONPATH=src python scripts/printed_concept_threshold.py [--examples 20] [--seed 0]

Real digits 0-9 and capitals A-J drawn by every installed font that covers all twenty and is not a
template font of ``concepts.concept_templates`` (by file name, so a second copy of a template font is
left out too), as FontGlyphs draws a class (``_render.examples_job``: distorted renders at 64 px,
box-averaged to 32 px). Left out as drawing no digit or letter there: LastResort (placeholder boxes),
cmex10 (delimiters) and cmsy10's digits (symbols). Prints the fonts, the percentiles of each image's
correlation with its own character's best template and with any template, and the share flagged at the
threshold (about 30 s on one core).
"""

from __future__ import annotations

import argparse
import glob
import os

import numpy as np

from fastweights.data.concepts import PRINTED_CONCEPT_NCC, concept_templates, ink_vectors
from fastweights.data.sources._fonts import dejavu_dir, read_cmap
from fastweights.data.sources._render import examples_job
from fastweights.data.sources.font_classes import DIGITS, LETTERS, _latin_fonts

#: font file -> the code points it draws as something else (not counted)
NOT_DRAWN = {
    "LastResortHE-Regular.ttf": DIGITS + LETTERS,
    "cmex10.ttf": DIGITS + LETTERS,
    "cmsy10.ttf": DIGITS,
}


def reference_fonts() -> dict[str, str]:
    """File name -> path of every installed non-template font covering 0-9 and A-J."""
    templates = {os.path.basename(f.path) for fs in _latin_fonts(DIGITS + LETTERS).values() for f in fs}
    paths = glob.glob("/usr/share/fonts/**/*.[ot]tf", recursive=True) + glob.glob(str(dejavu_dir() / "*.ttf"))
    out: dict[str, str] = {}
    for path in sorted(set(paths)):
        name = os.path.basename(path)
        if name in templates or name in out:
            continue
        try:
            cmap = read_cmap(path)
        except Exception:  # noqa: BLE001 - a font fontTools cannot read covers nothing here
            continue
        if set(DIGITS + LETTERS) <= cmap:
            out[name] = path
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    templates, names = concept_templates()
    kinds = np.array([n.split(" (")[0] for n in names])  # "digit 7", "letter C"
    own, best, classes, used = [], [], [], []
    for name, path in reference_fonts().items():
        cps = [cp for cp in DIGITS + LETTERS if cp not in NOT_DRAWN.get(name, ())]
        if not cps:
            continue
        used.append(name)
        images = examples_job([(cp, [path]) for cp in cps], seed=args.seed, m=args.examples, res=64, size=32)
        for cp, examples in zip(cps, images, strict=True):
            ncc = ink_vectors(examples) @ templates.T
            kind = f"{'digit' if cp in DIGITS else 'letter'} {chr(cp)}"
            own.append(ncc[:, kinds == kind].max(1))
            best.append(ncc.max(1))
            classes.append(np.sort(best[-1])[len(examples) // 2])  # the class rule: the upper median
    print(f"{len(used)} fonts: {', '.join(used)}")
    own_all, best_all = np.concatenate(own), np.concatenate(best)
    print(f"{len(classes)} font x character classes, {len(own_all)} images")
    for label, v in (("own character's best template", own_all), ("any template", best_all)):
        pct = ", ".join(f"p{q} {np.percentile(v, q):.3f}" for q in (5, 10, 25, 50))
        print(f"{label}: {pct}; >= {PRINTED_CONCEPT_NCC}: {np.mean(v >= PRINTED_CONCEPT_NCC):.1%}")
    flagged = int(np.sum(np.asarray(classes) >= PRINTED_CONCEPT_NCC))
    print(f"classes flagged (half of their examples): {flagged} of {len(classes)}")


if __name__ == "__main__":
    main()
