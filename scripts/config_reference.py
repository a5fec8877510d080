"""Write the configuration key reference, ``docs/config/<recipe>.md``, one file per recipe with presets.

Each file lists the recipe's presets (the first sentence of each preset's comment) and every config key
with its type, default and the comments of its dataclass field, read from the config dataclasses and
their source. Rerun it after changing a config class or a preset's comment (``tests/test_config.py``
fails while a file differs from what it writes):

    PYTHONPATH=src python scripts/config_reference.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fastweights.config import (
    ConfigSection,
    available_presets,
    config_sections,
    deprecated_keys,
    preset_description,
)
from fastweights.recipes.contract import PRESET_FOLDERS, config_class

OUT = Path(__file__).resolve().parents[1] / "docs" / "config"
COMMAND = "PYTHONPATH=src python scripts/config_reference.py"


def _cell(text: str) -> str:
    """``text`` inside a Markdown table cell (``|`` escaped)."""
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return _cell(f"`{text}`")


def _section(section: ConfigSection) -> list[str]:
    title = f"`{section.key}`" if section.key else "Top level"
    lines = [f"### {title}", ""]
    if section.doc:
        lines += [section.doc, ""]
    if section.key.endswith("[]"):
        lines += [f"Each item of `{section.key[:-2]}` is a mapping of these keys.", ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [
        f"| {_code(k.key)} | {_code(k.type)} | {_code(k.default)} | {_cell(k.doc)} |" for k in section.keys
    ]
    return [*lines, ""]


def reference(name: str) -> str:
    """The Markdown key reference of the command-line recipe ``name`` (a key of ``PRESET_FOLDERS``)."""
    cls, folder = config_class(name), PRESET_FOLDERS[name]
    lines = [
        f"# `fastweights {name}`: configuration keys",
        "",
        f"Written by `{COMMAND}` from `{cls.__module__}.{cls.__qualname__}`; do not edit by hand.",
        "",
        f"A run's config is the dataclass defaults below, then a preset (`--preset NAME`, or a YAML file of "
        f"your own), then `key=value` overrides on the command line. "
        f"`fastweights {name} config [--preset NAME] [key=value ...]` prints the result as YAML, checked "
        "as a run checks it; a run folder keeps it as `config.yaml`.",
        "",
        "## Presets",
        "",
        "| preset | what |",
        "|---|---|",
        *(f"| `{p}` | {_cell(preset_description(folder, p))} |" for p in available_presets(folder)),
        "",
        "## Keys",
        "",
        "Defaults are those of the dataclasses (a preset changes some of them), as YAML.",
        "",
    ]
    for section in config_sections(cls):
        lines += _section(section)
    renamed = deprecated_keys(cls)
    if renamed:
        lines += [
            "## Renamed keys",
            "",
            "The old spellings are still read for one release, with a one-line warning on stderr:",
            "",
            *(f"- `{old}` → `{new}`" for old, new in renamed.items()),
            "",
        ]
    return "\n".join(lines).rstrip("\n") + "\n"


def references() -> dict[str, str]:
    """File name → text of every reference file: one per command-line recipe with presets."""
    return {f"{name}.md": reference(name) for name in PRESET_FOLDERS}


def main() -> None:
    """Write every reference file into ``--out`` (default ``docs/config/``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for file_name, text in references().items():
        (args.out / file_name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / file_name}")


if __name__ == "__main__":
    main()
