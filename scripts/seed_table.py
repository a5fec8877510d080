"""Seed tables of evaluated ACL runs: mean ± 95% CI over training seeds and paired differences.

    PYTHONPATH=src python scripts/seed_table.py \
        SRWM=runs/acl-lr-grid/srwm/lr=3e-3/seed{seed} DeltaNet=runs/acl-lr-grid/deltanet/lr=1e-3/seed{seed} \
        [--seeds 0,1,2] [--out table.md]

Each ``LABEL=PATTERN`` names an arm; ``{seed}`` in the pattern is replaced by each seed. A run folder
counts when it holds ``results.json`` (``fastweights acl eval``); its numbers are the recipe's headline
(``fastweights.recipes.acl.headline``: the few-shot accuracy, the forgetting table, every split
benchmark's ACC, in percent) plus the best ``val_objective`` of its ``metrics.jsonl`` (the selection
objective, meta-validation). Only the seeds every arm has are used (a table line says which). The
first arm is the reference: the other arms' differences are paired seed by seed
(``fastweights.recipes.compare.summarize_seeds``, ``fastweights.cl.metrics.paired_difference``). Prints
Markdown (or writes it to ``--out``): the table, then the per-seed values.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastweights.io import read_jsonl
from fastweights.recipes.acl import headline
from fastweights.recipes.compare import Score, parse_seeds, seed_markdown, summarize_seeds

OBJECTIVE = "selection objective, meta-validation (%)"


def best_objective(run: Path) -> float:
    """The highest ``val_objective`` in ``run/metrics.jsonl``, in percent.

    Raises:
        ValueError: naming the file when it has no ``val_objective``.
    """
    path = run / "metrics.jsonl"
    values = [r["val_objective"] for r in read_jsonl(path) if "val_objective" in r]
    if not values:
        raise ValueError(f"{path}: expected lines with val_objective, found none")
    return 100 * max(values)


def run_scores(run: Path) -> dict[str, Score]:
    """The objective and the headline numbers of one evaluated run folder."""
    results = json.loads((run / "results.json").read_text())
    return {OBJECTIVE: Score(best_objective(run)), **headline(results)}


def parse_arm(text: str) -> tuple[str, str]:
    """``"LABEL=PATTERN"`` → ``(LABEL, PATTERN)``.

    Raises:
        ValueError: for a missing ``=``, an empty label, or a pattern without ``{seed}``.
    """
    label, sep, pattern = text.partition("=")
    if not sep or not label or "{seed}" not in pattern:
        raise ValueError(f"arm: expected LABEL=PATTERN with {{seed}} in PATTERN, given {text!r}")
    return label, pattern


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="+", help="LABEL=PATTERN ({seed} in PATTERN); the first: reference")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds (default 0,1,2)")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of printing it")
    args = parser.parse_args(argv)
    try:
        arms = [parse_arm(a) for a in args.arms]
        seeds = parse_seeds(args.seeds)
    except ValueError as err:
        parser.error(str(err))
    found = {
        label: [s for s in seeds if Path(pattern.format(seed=s), "results.json").is_file()]
        for label, pattern in arms
    }
    common = [s for s in seeds if all(s in have for have in found.values())]
    if not common:
        have = "; ".join(f"{label}: {found[label] or 'none'}" for label, _ in arms)
        print(f"seed_table: no seed has results.json in every arm ({have})", file=sys.stderr)
        return 2
    scores = {
        label: {s: run_scores(Path(pattern.format(seed=s))) for s in common} for label, pattern in arms
    }
    lines = [
        "Arms: " + "; ".join(f"{label} = `{pattern}`" for label, pattern in arms) + ".",
        "",
        *seed_markdown(summarize_seeds(scores)),
    ]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
