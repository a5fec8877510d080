"""The package's import graph: floors that only import downwards, recipes that never import each other.

Every ``import`` / ``from … import`` statement of ``src/fastweights`` (module level and inside
functions, relative imports resolved) is read with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "fastweights"
RECIPES = PACKAGE / "recipes"

# Floors of the package: a unit may import only units on a strictly lower floor (or itself).
FLOORS = {
    "checks": 0,
    "io": 0,
    "resources": 0,
    "config": 1,
    "ops": 1,
    "data": 1,
    "train": 1,
    "layers": 2,
    "models": 3,
    "rl": 3,
    "cl": 4,
    "hf": 4,  # the Hugging Face models (optional extra): models + train's folder rules
    "recipes": 5,
    "cli": 6,
    "__main__": 7,
}
# Floors inside ``recipes/``: the shared modules, then the recipe packages above them.
SHARED_FLOORS = {
    "reporting": 0,
    "plots": 1,
    "contract": 1,
    "run": 2,
    "classifier": 3,
    "compare": 3,
}
RECIPE_PACKAGES = {"acl", "fewshot", "sequential", "lm", "rl", "cl_baselines"}
# The one allowed sibling import: cl-baselines' compare evaluates ACL run folders.
ALLOWED_SIBLING = {("fastweights.recipes.cl_baselines.compare", "acl")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the ``fastweights`` modules (or packages) imported by ``path``."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            names = [name]
            if name in ("fastweights", "fastweights.recipes"):  # `from fastweights.recipes import acl`
                names = [f"{name}.{alias.name}" for alias in node.names]
            found.update(n for n in names if n.startswith("fastweights"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("fastweights"))
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _recipe_part(module: str) -> str:
    """``fastweights.recipes.acl.report`` → ``acl``; ``fastweights.recipes.run`` → ``run``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def test_every_unit_has_a_floor():
    units = {_unit(m) for m in _graph()} - {""}
    assert units <= set(FLOORS), f"add a floor for {sorted(units - set(FLOORS))}"
    shared = {p.stem for p in RECIPES.glob("*.py")} - {"__init__"}
    assert shared == set(SHARED_FLOORS), sorted(shared ^ set(SHARED_FLOORS))
    packages = {p.name for p in RECIPES.iterdir() if (p / "__init__.py").is_file()}
    assert packages == RECIPE_PACKAGES, sorted(packages ^ RECIPE_PACKAGES)


def test_no_upward_import_between_units():
    upward = [
        (a, b)
        for a, targets in _graph().items()
        for b in targets
        if _unit(a) and _unit(b) and _unit(a) != _unit(b) and FLOORS[_unit(b)] >= FLOORS[_unit(a)]
    ]
    assert upward == [], "imports that run up or sideways between floors: " + repr(upward)


def test_recipes_top_level_is_small():
    modules = [p for p in RECIPES.iterdir() if p.suffix == ".py" and p.name != "__init__.py"]
    packages = [p for p in RECIPES.iterdir() if (p / "__init__.py").is_file()]
    assert len(modules) + len(packages) <= 12, sorted(p.name for p in modules + packages)


def test_shared_recipe_modules_import_downwards_only():
    bad = []
    for a, targets in _graph().items():
        if _unit(a) != "recipes" or _recipe_part(a) not in SHARED_FLOORS:
            continue
        for b in targets:
            if _unit(b) != "recipes" or not _recipe_part(b):
                continue
            target = _recipe_part(b)
            if target in RECIPE_PACKAGES or SHARED_FLOORS[target] >= SHARED_FLOORS[_recipe_part(a)]:
                bad.append((a, b))
    assert bad == [], "shared recipe modules importing up or sideways: " + repr(bad)


@pytest.mark.parametrize("recipe", sorted(RECIPE_PACKAGES))
def test_recipe_never_imports_a_sibling_recipe(recipe):
    bad = [
        (a, b)
        for a, targets in _graph().items()
        if _unit(a) == "recipes" and _recipe_part(a) == recipe
        for b in targets
        if _unit(b) == "recipes"
        and _recipe_part(b) in RECIPE_PACKAGES - {recipe}
        and (a, _recipe_part(b)) not in ALLOWED_SIBLING
    ]
    assert bad == [], f"{recipe} imports another recipe: {bad}"


def test_import_reader_sees_function_level_and_relative_imports():
    # The allowed exception is a function-level `from fastweights.recipes import acl`: the reader must see it,
    # and resolve the relative imports of `cl/baselines/__init__.py`.
    compare = _imports(RECIPES / "cl_baselines" / "compare.py")
    assert "fastweights.recipes.acl" in compare
    baselines = _imports(PACKAGE / "cl" / "baselines" / "__init__.py")
    assert "fastweights.cl.baselines.ewc" in baselines
