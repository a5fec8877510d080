"""Write the EmojiImages subgroup split, ``src/fastweights/data/splits/emoji/{train,val,test}.json``.

Run once (the files ship with the package; rerunning on the same emoji-test.txt rewrites them
byte for byte):

    PYTHONPATH=src python scripts/make_emoji_splits.py [--emoji-test /usr/share/unicode/emoji/emoji-test.txt]

Procedure (deterministic, font-independent): the base-emoji classes of emoji-test.txt
(:func:`fastweights.data.sources.emoji.emoji_catalog`: Component group and skin-tone / hair-style /
gendered variants dropped) are counted per ``(group, subgroup)``, and
:func:`fastweights.data.sources._emoji_build.assign_subgroups` gives each group's subgroups, largest
first, to the split furthest below its target share (70 / 10 / 20 %) of that
group's classes. Each file is ``{group: [subgroup, ...]}``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from fastweights.data.sources._emoji_build import assign_subgroups
from fastweights.data.sources.emoji import EMOJI_TEST, emoji_catalog

SHARES = {"train": 0.7, "val": 0.1, "test": 0.2}
OUT = Path(__file__).resolve().parents[1] / "src" / "fastweights" / "data" / "splits" / "emoji"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emoji-test", type=Path, default=EMOJI_TEST)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    classes, _ = emoji_catalog(args.emoji_test)
    counts = Counter((e.group, e.subgroup) for e in classes)
    splits = assign_subgroups(counts, SHARES)
    args.out.mkdir(parents=True, exist_ok=True)
    for split, tree in splits.items():
        (args.out / f"{split}.json").write_text(json.dumps(tree, indent=1) + "\n", encoding="utf-8")
        n = sum(counts[(g, s)] for g, subs in tree.items() for s in subs)
        print(f"{split}: {sum(map(len, tree.values()))} subgroups in {len(tree)} groups, {n} classes")


if __name__ == "__main__":
    main()
