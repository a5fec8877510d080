"""The one contract of a recipe and the one registry ``name → recipe module`` (used by the CLI and
``compare``).

A recipe is a module (``fastweights.recipes.<name>``) that satisfies :class:`Recipe`: it names its
config dataclass (``CONFIG``) and the config key ``compare --models`` varies (``MODEL_KEY``), builds its
model, trains through :func:`fastweights.recipes.run.start_run` + ``fit_run`` (or ``fit``) into a run
folder, evaluates a run folder into ``results.json`` + ``report.md`` + ``plots/``, exports a slim copy,
summarises results in one line and tabulates/plots several runs for ``compare``.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "Recipe",
    "RECIPES",
    "RECIPE_MEMBERS",
    "PRESET_FOLDERS",
    "Selection",
    "get_recipe",
    "config_class",
    "eval_command",
]

# the names every recipe module defines (its ``__all__`` starts with them)
RECIPE_MEMBERS = [
    "NAME",
    "CONFIG",
    "MODEL_KEY",
    "SELECTION",
    "build_model",
    "train",
    "evaluate",
    "write_report",
    "export",
    "summary",
    "comparison_table",
    "plot_comparison",
    "headline",
]

# recipe name -> module; imported on first use (the CLI stays fast to start)
RECIPES: dict[str, str] = {
    "acl": "fastweights.recipes.acl",
    "fewshot": "fastweights.recipes.fewshot",
    "sequential": "fastweights.recipes.sequential",
    "lm": "fastweights.recipes.lm",
    "rl": "fastweights.recipes.rl",
}
# every command-line recipe with presets -> their folder in fastweights/configs/: the registered recipes
# and cl-baselines (a runner of classic baselines with `run` and `compare`, not a recipe of this contract)
PRESET_FOLDERS: dict[str, str] = {**{name: name for name in RECIPES}, "cl-baselines": "cl_baselines"}


@dataclass(frozen=True)
class Selection:
    """How a recipe picks its ``best`` checkpoint: the validation record's ``metric`` (a key of the
    dict its validation returns, logged in ``metrics.jsonl``), maximised unless ``minimize``, measured on
    ``data`` (in words).

    The rule every shipped choice follows (checkpoint, preset value, attempt): it is made on validation
    data disjoint from every test benchmark (classes and their concepts, levels, text), never on test
    numbers. Every recipe declares its selection (``SELECTION`` in its package);
    :func:`~fastweights.recipes.run.fit_run` selects with it and the ``evaluate`` verb records it in
    ``results.json`` as ``run.selected_on``, so a result always says which validation metric, on which
    data, chose the model it reports.
    """

    metric: str
    minimize: bool = False
    #: the validation data in words, or a function of the run's config giving them (when they depend on it)
    data: str | Callable[[Any], str] = ""

    def data_for(self, cfg: Any) -> str:
        """:attr:`data` in words for the run configured by ``cfg``."""
        return self.data(cfg) if callable(self.data) else self.data

    def record(self, checkpoint: dict[str, Any], which: str, cfg: Any = None) -> dict[str, Any]:
        """``{"metric", "mode", "value", "data"}`` for the ``best`` checkpoint (``value`` = the metric at the
        selected step, from the checkpoint's ``best``; ``None`` if it has none); for ``latest`` (not
        selected) ``value`` is ``None`` and ``mode`` is ``"latest"``. ``data`` describes the validation
        data of the run configured by ``cfg`` (:meth:`data_for`)."""
        data = self.data_for(cfg)
        if which != "best":
            return {"metric": self.metric, "mode": "latest", "value": None, "data": data}
        sign = -1.0 if self.minimize else 1.0  # the loop stores sign * metric (higher is better)
        best = checkpoint.get("best")
        return {
            "metric": self.metric,
            "mode": "min" if self.minimize else "max",
            "value": None if best is None else sign * float(best),
            "data": data,
        }


@runtime_checkable
class Recipe(Protocol):
    """What every recipe module provides (checked for each registered recipe by the tests)."""

    NAME: str  # the registry / CLI name
    CONFIG: type  # the config dataclass of presets in configs/<NAME>/
    MODEL_KEY: str  # the config key of the sequence layer (`compare --models`)
    SELECTION: Selection  # the validation metric that picks the best checkpoint (results: run.selected_on)

    def build_model(self, cfg: Any) -> torch.nn.Module:
        """The untrained model of ``cfg``."""
        ...

    def train(
        self,
        cfg: Any,
        run_dir: Path,
        *,
        resume: bool = False,
        command: str | None = None,
        overrides: list[str] | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Train into ``run_dir`` (made by :func:`fastweights.recipes.run.train_verb`); returns the last
        validation record (``step``, ``minutes``, …)."""
        ...

    def evaluate(
        self,
        run_dir: Path,
        *,
        which: str = "best",
        overrides: list[str] | None = None,
        command: str | None = None,
        out_dir: Path | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Evaluate a checkpoint (made by :func:`fastweights.recipes.run.evaluate_verb`); writes
        ``results.json``, ``report.md``, ``plots/``; returns the results."""
        ...

    def write_report(self, results: dict[str, Any], out_dir: Path) -> Path:
        """``report.md`` (+ plots) of one evaluation's results in ``out_dir``."""
        ...

    def export(self, run_dir: Path, out_dir: Path, *, which: str = "best", force: bool = False) -> Path:
        """A slim, shareable copy of a run's model; returns the written model file or folder."""
        ...

    def summary(self, results: dict[str, Any]) -> str:
        """One line of the main numbers, for the terminal."""
        ...

    def comparison_table(self, results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
        """Header and one row per run of ``compare``."""
        ...

    def plot_comparison(self, results: dict[str, dict[str, Any]], run_root: Path) -> None:
        """The comparison plot(s) of ``compare`` in ``run_root``."""
        ...

    def headline(self, results: dict[str, Any]) -> dict[str, Any]:
        """The run's headline numbers, ``{name (with unit): fastweights.recipes.compare.Score}``, in the units
        of ``comparison_table``: what ``compare --seeds`` averages over training seeds and pairs by seed."""
        ...


def get_recipe(name: str) -> Recipe:
    """The recipe module registered as ``name``.

    Raises:
        ValueError: for an unknown recipe name.
    """
    if name not in RECIPES:
        raise ValueError(f"recipe: expected one of {list(RECIPES)}, got {name!r}")
    return importlib.import_module(RECIPES[name])  # type: ignore[return-value]


def config_class(name: str) -> type:
    """The config dataclass of the command-line recipe ``name`` (a key of :data:`PRESET_FOLDERS`): a
    registered recipe's ``CONFIG``, or cl-baselines' ``BaselinesConfig``.

    Raises:
        ValueError: for a name without presets.
    """
    if name not in PRESET_FOLDERS:
        raise ValueError(f"recipe: expected one of {list(PRESET_FOLDERS)}, got {name!r}")
    if name == "cl-baselines":
        baselines = importlib.import_module("fastweights.recipes.cl_baselines.config")
        return baselines.BaselinesConfig  # type: ignore[no-any-return]
    return get_recipe(name).CONFIG


def eval_command(
    recipe: str,
    run_dir: Path,
    *,
    which: str = "best",
    overrides: list[str] | None = None,
    out_dir: Path | None = None,
) -> str:
    """The ``fastweights <recipe> eval …`` command equivalent to an evaluation run from ``train --eval``
    or ``compare`` (recorded as ``results.json`` ``run.eval_command``)."""
    args = ["fastweights", recipe, "eval", str(run_dir), "--checkpoint", which]
    if out_dir is not None and Path(out_dir) != Path(run_dir):
        args += ["--out", str(out_dir)]
    return " ".join(shlex.quote(a) for a in [*args, *(overrides or [])])
