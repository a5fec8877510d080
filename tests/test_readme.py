"""The README's Python snippets run as written (so they cannot rot)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_readme_has_the_layer_and_op_snippets():
    assert len(BLOCKS) >= 2
    assert any("SRWMLayer" in b for b in BLOCKS) and any("fastweights.ops" in b for b in BLOCKS)
    assert all("assert" in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_snippet_runs(index, monkeypatch):
    if "fastweights.hf" in BLOCKS[index]:  # the Hugging Face section needs the [hf] extra
        pytest.importorskip("transformers")
    monkeypatch.chdir(README.parent)  # from the checkout's root, as a reader runs them (pretrained/…)
    code = compile(BLOCKS[index], f"{README}:python-block-{index + 1}", "exec")
    exec(code, {"__name__": f"readme_block_{index + 1}"})


# --- the "Reproduce the papers" commands (the README's links: tests/test_docs_links.py) --------------

ROOT = README.parent


def _reproduce_commands() -> list[list[str]]:
    """The `fastweights …` command lines of the section "Reproduce the papers", `$DATA` and the `for run in`
    loop expanded, comments dropped."""
    import shlex

    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Reproduce the papers") :]
    section = section[: section.index("\n## ", 1)]
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```$", section, flags=re.S | re.M):
        loop: list[str] = []
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("#") or not line:
                continue
            if m := re.match(r"for run in (.+); do$", line):
                loop = m.group(1).split()
                continue
            if line == "done":
                loop = []
                continue
            line = line.replace("$DATA", "/data").split("&& ")[-1]
            if not line.startswith("fastweights "):
                continue
            for run in loop or [None]:
                commands.append(shlex.split(line.replace("$run", run) if run else line)[1:])
    return commands


def test_reproduce_commands_parse_and_configs_load():
    """Each command of "Reproduce the papers" parses, and its preset + overrides make a valid config (no
    data is read); an `eval` takes the config of the run folder a `train` line of the README writes, and a
    5-task preset starts from a folder a `train` line writes (or a shipped model)."""
    from fastweights.cli import _parser
    from fastweights.config import load_config, preset_path
    from fastweights.recipes.cl_baselines.config import BaselinesConfig
    from fastweights.recipes.contract import get_recipe

    commands = _reproduce_commands()
    assert len(commands) >= 20
    runs: dict[str, tuple[str, str, list[str]]] = {}  # run folder -> (recipe, preset, overrides)
    seen = set()
    for argv in commands:
        args = _parser().parse_args(argv)
        seen.add((args.recipe, args.verb))
        if args.recipe == "cl-baselines":
            if args.verb == "run":
                load_config(BaselinesConfig, preset_path("cl_baselines", args.preset), args.overrides)
            continue
        config = get_recipe(args.recipe).CONFIG
        if args.verb == "eval":
            assert str(args.run_dir) in runs, f"{' '.join(argv)}: no train line writes {args.run_dir}"
            recipe, preset, overrides = runs[str(args.run_dir)]
            load_config(config, preset_path(recipe, preset), overrides + args.overrides)
            continue
        cfg = load_config(config, preset_path(args.recipe, args.preset), args.overrides)
        for model in (getattr(args, "models", None) or "").split(","):
            if model:  # compare --models: one run per value of the recipe's MODEL_KEY
                pick = f"{get_recipe(args.recipe).MODEL_KEY}={model}"
                load_config(config, preset_path(args.recipe, args.preset), [*args.overrides, pick])
        if args.verb == "train":
            run_dir = args.run_dir or Path("runs") / f"{args.recipe}-{args.preset}"
            runs[str(run_dir)] = (args.recipe, args.preset, list(args.overrides))
            init = getattr(cfg.train, "init_from", "")
            if init:
                folder = str(Path(init).parent.parent) if init.endswith(".pt") else init
                assert folder in runs or (ROOT / init).exists(), f"{' '.join(argv)}: nothing makes {init}"
    assert {("acl", "train"), ("acl", "eval"), ("fewshot", "compare"), ("sequential", "compare")} <= seen
    assert {("rl", "compare"), ("lm", "compare"), ("cl-baselines", "run")} <= seen
    assert ("cl-baselines", "compare") in seen
