"""Write the Handwriting contact sheet, ``docs/img/handwriting-contact-sheet.png``.

    PYTHONPATH=src python scripts/handwriting_contact_sheet.py [--out PATH] [--classes 8] [--writers 8]

Rows: meta-training classes of the default build (seed 0, 32 px; built and cached on first use, about
15 s), one per alphabet, taken evenly over the split; column 1: the class's clean render (the mean
writer), then its first ``--writers`` writers; each image upscaled 3x (nearest neighbour).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from fastweights.data.sources.handwriting import contact_sheet, handwriting_arrays

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "handwriting-contact-sheet.png"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    arrays = handwriting_arrays(seed=args.seed)
    images, protos = arrays["train_images"], arrays["train_prototypes"]
    rows = np.linspace(0, len(images) - 1, args.classes).round().astype(np.int64)
    grid = np.concatenate([protos[rows, None], images[rows, : args.writers]], axis=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(contact_sheet(grid, scale=3)).save(args.out, optimize=True)
    names = ", ".join(str(arrays["train_names"][r]) for r in rows)
    print(f"wrote {args.out} ({len(rows)} classes x (clean render + {args.writers} writers)): {names}")


if __name__ == "__main__":
    main()
