"""scripts/seed_table.py on the evidence of the 1x layer ablation (docs/evidence/acl-lr-grid/)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "docs" / "evidence" / "acl-lr-grid"


def _script():
    spec = importlib.util.spec_from_file_location("seed_table", ROOT / "scripts" / "seed_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_objective_and_paired_difference_match_the_recorded_runs(tmp_path, capsys):
    out = tmp_path / "t.md"
    rc = _script().main(
        [
            f"SRWM={EVIDENCE}/srwm/lr=3e-3/seed{{seed}}",
            f"DeltaNet={EVIDENCE}/deltanet/lr=1e-3/seed{{seed}}",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = out.read_text()
    # best val_objective per seed: SRWM 88.9, 89.4, 88.3; DeltaNet 90.8, 91.2, 91.9 (docs/results.md)
    row = next(line for line in text.splitlines() if line.startswith("| selection objective"))
    assert "88.89 ± 1.41" in row and "91.31 ± 1.43" in row and "2.42 ± 2.61 (not distinguishable)" in row
    within = (
        "| A after A→B, FontGlyphs → FontGlyphs (%) | 85.87 ± 1.00 | 74.80 ± 0.50 | -11.07 ± 1.27 (worse) |"
    )
    assert within in text


def test_only_seeds_every_arm_has(tmp_path):
    out = tmp_path / "t.md"
    # SR-DeltaNet at lr 1e-3 was evaluated for seed 0 only
    assert (
        _script().main(
            [
                f"A={EVIDENCE}/srwm/lr=3e-3/seed{{seed}}",
                f"B={EVIDENCE}/sr_deltanet-qk30/lr=1e-3/seed{{seed}}",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "Training seeds: 0 (n = 1)" in out.read_text()


@pytest.mark.parametrize("arm", ["nolabel", "=x{seed}", "A=no-seed-field"])
def test_bad_arm_is_one_line_error(arm, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().main([arm])
    assert exit_info.value.code == 2
    assert "expected LABEL=PATTERN" in capsys.readouterr().err


def test_no_common_seed(tmp_path, capsys):
    assert _script().main([f"A={tmp_path}/none{{seed}}"]) == 2
    assert "no seed has results.json in every arm" in capsys.readouterr().err
