"""RL recipe: multi-task actor-critic with fast-weight cores (SRWM paper §4.3), V-trace learner (IMPALA).

``train``: ``env.num_envs`` environments of ``env.games`` (no task id) on the training levels, a
synchronous batched actor and V-trace updates with RMSProp (linearly decayed learning rate); every
``train.val_every_steps`` updates a greedy evaluation on unseen validation levels (``env.val_levels``);
atomic best/latest checkpoints (environments and the carried core state included), exactly resumable
on CPU.
``evaluate``: greedy episodes on each ``eval.splits`` level range (unseen) and on the training levels →
per-game mean returns and normalised scores, ``results.json`` (the evaluated core under ``run.core``,
the config's key ``model.core``), ``report.md`` and learning curves (frames vs return, training vs test
levels).

The domain (the suite table, normalisation constants, environments, level scoring) is
:mod:`fastweights.rl.suites`; this module wires the config to it.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from fastweights.io import read_jsonl
from fastweights.recipes.compare import Score
from fastweights.recipes.contract import RECIPE_MEMBERS, Selection
from fastweights.recipes.plots import learning_curve_section, plot_learning_curves
from fastweights.recipes.reporting import md_table, run_header, write_report_files
from fastweights.recipes.rl.config import RLConfig, RLLevelsConfig
from fastweights.recipes.run import (
    RecipeRun,
    evaluate_verb,
    export_verb,
    fit_run,
    train_verb,
)
from fastweights.rl.agent import Agent
from fastweights.rl.cores import CORES, Core
from fastweights.rl.encoders import make_encoder
from fastweights.rl.envs import VecEnv
from fastweights.rl.rollout import Actor, learner_loss
from fastweights.rl.suites import (
    level_scores,
    make_env,
    mean_normalised,
    normalisation_constants,
    normalised_score,
    suite_spec,
)

__all__ = [*RECIPE_MEMBERS, "MODELS", "env_of"]

NAME = "rl"  # the registry / CLI name (recipes.contract.RECIPES)
CONFIG = RLConfig
SELECTION = Selection(  # the best checkpoint: mean normalised score on val levels
    "val_score", data="env.val_levels (disjoint from the training and test levels)"
)
MODEL_KEY = "model.core"  # what `compare` varies
MODELS = CORES  # the names `compare --models` accepts

log = logging.getLogger(__name__)


def env_of(
    cfg: RLConfig,
    levels: RLLevelsConfig,
    envs_per_game: int | None = None,
    *,
    evaluation: bool = False,
    seed: int = 0,
) -> VecEnv:
    """:func:`fastweights.rl.suites.make_env` of ``cfg.env`` on ``levels``: ``cfg.env.num_envs``
    environments in training, ``envs_per_game`` per game in evaluation (``evaluation=True``).

    Raises:
        ValueError: the library's error with the config section's prefix (``env.games: …``,
            ``env.num_envs: …``).
        ImportError: when the suite's package is not installed.
    """
    e = cfg.env
    n = e.num_envs if envs_per_game is None else envs_per_game * len(e.games)
    try:
        return make_env(
            e.suite,
            e.games,
            n,
            levels.level_set(),
            seed=seed,
            evaluation=evaluation,
            distribution_mode=e.distribution_mode,
        )
    except ValueError as err:
        raise ValueError(f"env.{err}") from None


def build_model(cfg: RLConfig) -> Agent:
    """The agent of ``cfg.model`` for ``cfg.env``'s observations and actions."""
    m = cfg.model
    obs_shape, num_actions, auto_encoder = suite_spec(cfg.env.suite)
    encoder = make_encoder(auto_encoder if m.encoder == "auto" else m.encoder, obs_shape, m.feature_dim)
    core = Core(
        m.core,
        m.feature_dim + 1,
        d_model=m.d_model,
        num_layers=m.num_layers,
        num_heads=m.num_heads,
        d_ff=m.d_ff,
        lstm_size=m.lstm_size or None,
        reset_every=m.reset_every,
    )
    return Agent(encoder, num_actions, core)


def _frames(cfg: RLConfig, step: int) -> int:
    return step * cfg.train.accumulation_steps * cfg.train.unroll * cfg.env.num_envs


def _level_scores(
    cfg: RLConfig,
    agent: Agent | None,
    levels: RLLevelsConfig,
    episodes: int,
    envs_per_game: int,
) -> dict[str, dict[str, float]]:
    """:func:`fastweights.rl.suites.level_scores` of ``cfg`` on ``levels``: ``episodes`` episodes per
    game, ``envs_per_game`` evaluation environments per game (``agent=None``: the random policy, seeded
    with ``train.seed``)."""
    env = env_of(cfg, levels, envs_per_game, evaluation=True)
    try:
        return level_scores(
            agent,
            env,
            cfg.env.suite,
            episodes // envs_per_game,
            reward_clip=cfg.train.reward_clip,
            seed=cfg.train.seed,
        )
    finally:
        env.close()


def _fit(run: RecipeRun) -> dict[str, Any]:
    """Train ``cfg`` into ``run_dir`` (``config.yaml``, ``metrics.jsonl``, ``checkpoints/``).

    Stops at ``train.max_steps`` updates or ``train.max_minutes``; the best checkpoint maximises the
    mean normalised greedy score on ``env.val_levels`` (``val_score``; disjoint from ``eval.splits``). See
    :func:`fastweights.train.loop.fit` for resume and interruption.
    """
    cfg, device = run.cfg, run.device
    t = cfg.train
    agent = build_model(cfg).to(device)
    env = run.data  # the training environments (built before the run folder was written)
    actor = Actor(agent, env, reward_clip=t.reward_clip, seed=t.seed)
    run.state["actor"] = (actor.state_dict, actor.load_state_dict)
    optimizer = torch.optim.RMSprop(agent.parameters(), lr=t.lr, alpha=t.rmsprop_alpha, eps=t.rmsprop_eps)
    total = max(t.max_steps, 1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / total))

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        loss, info = learner_loss(
            agent,
            actor.unroll(t.unroll),
            discount=t.discount,
            baseline_cost=t.baseline_cost,
            entropy_cost=t.entropy_cost,
        )
        return loss, {**info, "frames": _frames(run.saved_cfg, step + 1)}  # all ranks' frames

    def validate() -> dict[str, float]:
        episodes = actor.pop_episodes()
        agent.eval()
        scores = _level_scores(
            cfg, agent, cfg.env.val_levels, t.val_episodes * cfg.eval.envs_per_game, cfg.eval.envs_per_game
        )
        record = {"val_score": mean_normalised(scores)}
        for game, s in scores.items():
            record[f"val_return/{game}"] = s["mean_return"]
        for game in cfg.env.games:
            mine = [r for g, r, _ in episodes if g == game]
            if mine:
                record[f"train_return/{game}"] = statistics.fmean(mine)
        per_game = [
            normalised_score(cfg.env.suite, game, record[f"train_return/{game}"])
            for game in cfg.env.games
            if f"train_return/{game}" in record
        ]
        if per_game:  # the mean over games (as val_score), not over episodes
            record["train_score"] = statistics.fmean(per_game)
        return record

    try:
        return fit_run(
            run,
            agent,
            step_fn,
            validate,
            optimizer=optimizer,
            scheduler=scheduler,
            selection=SELECTION,
            description=f"rl {cfg.model.core} on {len(cfg.env.games)} games",
            postfix=("frames",),
        )
    finally:
        env.close()


def _measure(cfg: RLConfig, state: dict[str, Any], model: Agent, device: Any) -> dict[str, Any]:
    """Greedy episodes on every ``eval.splits`` range (unseen levels) and on the training levels."""
    e = cfg.eval
    splits = []
    for split in e.splits:
        scores = _level_scores(cfg, model, split, e.episodes, e.envs_per_game)
        splits.append({"levels": asdict(split), "games": scores, "score": mean_normalised(scores)})
    test_games = {g: statistics.fmean(s["games"][g]["normalised"] for s in splits) for g in cfg.env.games}
    out: dict[str, Any] = {
        "suite": cfg.env.suite,
        "games": list(cfg.env.games),
        "frames": _frames(cfg, state["step"]),
        "normalisation": {g: normalisation_constants(cfg.env.suite, g) for g in cfg.env.games},
        "test_splits": splits,
        "test_score": statistics.fmean(s["score"] for s in splits),
        "test_normalised": test_games,
    }
    if e.train_episodes:
        train = _level_scores(cfg, model, cfg.env.train_levels, e.train_episodes, e.envs_per_game)
        out["train_levels"] = train
        out["train_score"] = mean_normalised(train)
    if e.random_policy:
        rand = _level_scores(cfg, None, e.splits[0], e.episodes, e.envs_per_game)
        out["random_policy"] = {"levels": asdict(e.splits[0]), "games": rand, "score": mean_normalised(rand)}
    # the core under the config's key (model.core); run.sequence_layer keeps the contract's shared name
    return {"run": {"core": cfg.model.core}, "rl": out}


def _curves(run_dir: Path, prefix: str) -> dict[str, list[tuple[float, float]]]:
    path = run_dir / "metrics.jsonl"
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in read_jsonl(path) if path.exists() else []:
        for key, value in r.items():
            if key.startswith(prefix):
                curves.setdefault(key[len(prefix) :], []).append((r["frames"], value))
    return curves


def _core(run: dict[str, Any]) -> str:
    """The evaluated core of a ``results.json`` run section: ``core``, or ``sequence_layer`` in results
    written before ``core`` was recorded."""
    return run["core"] if "core" in run else run["sequence_layer"]


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    """``report.md`` (+ ``report.html``), ``plots/returns.png`` (frames vs greedy return on the validation
    levels and training return per game, from ``out_dir/metrics.jsonl``) and ``plots/learning_curve.png``
    (the selection metric ``val_score`` ×100 with the evaluated checkpoint starred, the training-level
    score and the random policy's score); returns the report's path."""
    run, rl = results["run"], results["rl"]
    header = ["game", "normalisation (R_min, R_max)"]
    header += [
        f"test {s['levels']['start']}–{s['levels']['start'] + s['levels']['count'] - 1}"
        for s in rl["test_splits"]
    ]
    header += ["test normalised (mean of splits)"] + (["training levels"] if "train_levels" in rl else [])
    rows = []
    for g in rl["games"]:
        row = [g, str(tuple(rl["normalisation"][g]))]
        row += [
            f"{s['games'][g]['mean_return']:.3f} ± {s['games'][g]['std_return']:.3f}"
            for s in rl["test_splits"]
        ]
        row.append(f"{100 * rl['test_normalised'][g]:.1f}")
        if "train_levels" in rl:
            row.append(f"{rl['train_levels'][g]['mean_return']:.3f}")
        rows.append(row)
    lines = [
        f"# RL report: {run['preset']} ({_core(run)})",
        "",
        *run_header(run, f"; {rl['frames']:,} training frames"),
        "",
        *md_table(header, rows),
        "",
        f"Mean normalised score ×100: test {100 * rl['test_score']:.1f}"
        + (f", training levels {100 * rl['train_score']:.1f}" if "train_score" in rl else "")
        + ". Returns: mean ± std over the greedy episodes of each level range.",
    ]
    if "random_policy" in rl:
        rand = rl["random_policy"]
        lv = rand["levels"]
        per_game = ", ".join(
            f"{g} {rand['games'][g]['mean_return']:.3f} ({100 * rand['games'][g]['normalised']:.1f})"
            for g in rl["games"]
        )
        lines += [
            "",
            f"Random policy (uniform actions) on levels {lv['start']}–{lv['start'] + lv['count'] - 1}, "
            f"mean return (normalised ×100): {per_game}; mean normalised {100 * rand['score']:.1f}.",
        ]
    curves = {f"validation {g}": c for g, c in _curves(out_dir, "val_return/").items()}
    curves |= {f"train {g}": c for g, c in _curves(out_dir, "train_return/").items()}
    if curves:
        png = plot_learning_curves(
            curves,
            out_dir / "plots" / "returns.png",
            xlabel="training frames",
            ylabel="mean episode return",
            title=f"{_core(run)}: greedy on validation levels, sampled on training levels",
        )
        lines += ["", f"![returns]({png.relative_to(out_dir)})"]
    rand = rl.get("random_policy") or {}
    lines += [""] + learning_curve_section(
        out_dir,
        run,
        default_metric="val_score",
        others=("train_score",),
        labels={
            "val_score": "validation levels, greedy (val_score)",
            "train_score": "training levels, sampled",
        },
        x="frames",
        xlabel="training frames",
        ylabel="mean normalised score ×100",
        scale=100.0,
        chance=100.0 * rand["score"] if "score" in rand else None,
        chance_label="random policy (test levels)",
        title=f"{_core(run)}: normalised score during training",
    )
    return write_report_files(out_dir / "report.md", "\n".join(lines).rstrip("\n") + "\n")


def comparison_table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The SRWM paper's Table-3 layout: one row per core, normalised scores ×100 (train / test levels)."""
    games = next(iter(results.values()))["rl"]["games"]
    header = ["model", "frames", "train min", "train levels", "test levels", *[f"test {g}" for g in games]]
    rows = []
    for name, res in results.items():
        run, rl = res["run"], res["rl"]
        rows.append(
            [
                name,
                f"{rl['frames']:,}",
                f"{run['train_minutes']:.1f}",
                f"{100 * rl['train_score']:.1f}" if "train_score" in rl else "—",
                f"{100 * rl['test_score']:.1f}",
                *[f"{100 * rl['test_normalised'][g]:.1f}" for g in games],
            ]
        )
    rand = next((r["rl"]["random_policy"] for r in results.values() if "random_policy" in r["rl"]), None)
    if rand is not None:  # the reference row: uniform actions on the first test split
        lv = rand["levels"]
        rows.append(
            [
                f"random policy (levels {lv['start']}–{lv['start'] + lv['count'] - 1})",
                "—",
                "—",
                "—",
                f"{100 * rand['score']:.1f}",
                *[f"{100 * rand['games'][g]['normalised']:.1f}" for g in games],
            ]
        )
    return header, rows


def headline(results: dict[str, Any]) -> dict[str, Score]:
    """The numbers ``compare --seeds`` aggregates over training seeds: the normalised score × 100 on the
    training levels (when evaluated) and on the test levels."""
    rl = results["rl"]
    out = {"train levels": Score(100 * rl["train_score"])} if "train_score" in rl else {}
    return {**out, "test levels": Score(100 * rl["test_score"])}


def plot_comparison(results: dict[str, dict[str, Any]], run_root: Path) -> None:
    """``run_root/comparison.png``: mean normalised greedy validation score vs training frames, one line per
    run."""
    curves = {}
    for name, res in results.items():
        path = Path(res["run"]["run_dir"]) / "metrics.jsonl"
        records = read_jsonl(path) if path.exists() else []
        curves[name] = [(r["frames"], r["val_score"]) for r in records if "val_score" in r]
    plot_learning_curves(
        curves,
        Path(run_root) / "comparison.png",
        xlabel="training frames",
        ylabel="normalised validation score",
        title="greedy score on unseen validation levels during training",
    )


def summary(results: dict[str, Any]) -> str:
    """One line for the terminal: the mean normalised test (and training-level) score."""
    rl = results["rl"]
    train = f", training levels {100 * rl['train_score']:.1f}" if "train_score" in rl else ""
    head = f"{len(rl['games'])} games, {rl['frames']:,} frames"
    return f"{head}: normalised score ×100 test {100 * rl['test_score']:.1f}{train}"


train = train_verb(
    _fit, load_data=lambda c, _: env_of(c, c.env.train_levels, seed=c.train.seed), build=build_model
)

evaluate = evaluate_verb(
    _measure,
    config_cls=RLConfig,
    build=build_model,
    write_report=write_report,
    selection=SELECTION,
    model_name=lambda c: c.model.core,
    doc="""Evaluate the ``which`` checkpoint of ``run_dir`` with greedy actions on every ``eval.splits``
    level range (unseen in training) and on the training levels: per-game returns and normalised scores.""",
)

export = export_verb(NAME, config_cls=CONFIG, selection=SELECTION, headline=headline)
