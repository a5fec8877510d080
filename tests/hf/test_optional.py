"""The ``[hf]`` extra is optional: only ``fastweights.hf`` imports ``transformers``, and the rest of the
package imports without it (this module runs with or without the extra)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "fastweights"
HF = PACKAGE / "hf"


def _imports(path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at module level)`` for every import statement of ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node) if n is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, id(node) not in in_function) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, id(node) not in in_function))
    return found


def test_only_the_hf_subpackage_imports_transformers_and_others_import_it_on_use():
    for path in sorted(PACKAGE.rglob("*.py")):
        if HF in path.parents:
            continue
        for module, top_level in _imports(path):
            assert not module.startswith("transformers"), f"{path}: imports {module}"
            if module.startswith("fastweights.hf"):
                assert not top_level, f"{path}: imports {module} at module level (import it where it is used)"


def test_the_package_imports_without_transformers_and_fastweights_hf_names_the_extra():
    code = """
import importlib, pkgutil, sys
sys.modules["transformers"] = None  # as if not installed
import fastweights
names = [m.name for m in pkgutil.walk_packages(fastweights.__path__, "fastweights.")]
for name in names:
    if not name.startswith("fastweights.hf"):
        importlib.import_module(name)
try:
    import fastweights.hf
except ImportError as err:
    print("ImportError:", err)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "ImportError: fastweights.hf needs the Hugging Face extra: pip install 'fastweights[hf]'" in (
        res.stdout
    )
