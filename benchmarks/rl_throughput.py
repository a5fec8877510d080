"""Frames per second of the RL agents: environments alone, the batched actor, and the V-trace learner.

For each core of the ``rl`` recipe, on a preset's games and agent sizes: the actor's frames/s (one
forward for all environments per step, sampling, environment steps: ``Actor.unroll``), the learner's
frames/s (the loss over one unroll, backward, gradient clip, RMSProp step) and the learner's peak tensor
memory. Ratios are to the ``ff`` agent measured in the same run; the first line is the environments
alone (random actions). Median of ``--repeats`` timings after one warm-up.

    python benchmarks/rl_throughput.py [--preset quick] [--cores ff,lstm,...] [--repeats 5] [key=value ...]
    python benchmarks/rl_throughput.py --preset smoke-procgen env.num_envs=16 train.unroll=20  # procgen2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from _memory import peak_bytes

from fastweights.config import load_config, preset_path
from fastweights.recipes import rl
from fastweights.recipes.rl.config import RLConfig
from fastweights.rl.cores import CORES
from fastweights.rl.rollout import Actor, learner_loss


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(cfg: RLConfig, core: str, repeats: int) -> dict[str, float]:
    """Actor and learner frames/s and the learner's peak memory (MB) of ``core`` under ``cfg``."""
    cfg.model.core = core
    torch.manual_seed(0)
    agent = rl.build_model(cfg)
    env = rl.env_of(cfg, cfg.env.train_levels, seed=0)
    t = cfg.train
    try:
        actor = Actor(agent, env, reward_clip=t.reward_clip, seed=0)
        frames = t.unroll * env.num_envs
        actor_s = _median_seconds(lambda: actor.unroll(t.unroll), repeats)
        rollout = actor.unroll(t.unroll)
        opt = torch.optim.RMSprop(agent.parameters(), lr=t.lr, alpha=t.rmsprop_alpha, eps=t.rmsprop_eps)

        def learn() -> None:
            loss, _ = learner_loss(agent, rollout, discount=t.discount)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), t.grad_clip)
            opt.step()

        learner_s = _median_seconds(learn, repeats)
        peak = peak_bytes(learn, "cpu") / 2**20
    finally:
        env.close()
    return {"actor": frames / actor_s, "learner": frames / learner_s, "peak_mb": peak}


def env_only(cfg: RLConfig, repeats: int) -> float:
    """Frames/s of the environments alone (uniformly random actions)."""
    env = rl.env_of(cfg, cfg.env.train_levels, seed=0)
    g = torch.Generator().manual_seed(0)
    try:
        env.reset()
        n, unroll = env.num_envs, cfg.train.unroll
        actions = [torch.randint(env.num_actions, (n,), generator=g) for _ in range(unroll)]

        def play() -> None:
            for a in actions:
                env.step(a)

        return cfg.train.unroll * env.num_envs / _median_seconds(play, repeats)
    finally:
        env.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick")
    p.add_argument("--cores", default=",".join(CORES))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("overrides", nargs="*", help="key=value config overrides (e.g. env.num_envs=16)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(RLConfig, preset_path("rl", args.preset), args.overrides)
    cores = args.cores.split(",")
    print(
        f"rl throughput: preset {args.preset}, suite {cfg.env.suite}, {cfg.env.num_envs} envs x unroll "
        f"{cfg.train.unroll}, {torch.get_num_threads()} thread(s); median of {args.repeats}"
    )
    print(f"{'environments alone':24s} {env_only(cfg, args.repeats):9.0f} frames/s")
    base = None
    for core in ["ff", *[c for c in cores if c != "ff"]]:
        m = measure(cfg, core, args.repeats)
        base = base or m
        print(
            f"{core:12s} actor {m['actor']:7.0f} frames/s (x{m['actor'] / base['actor']:4.2f} of ff)  "
            f"learner {m['learner']:7.0f} frames/s (x{m['learner'] / base['learner']:4.2f})  "
            f"learner peak {m['peak_mb']:6.1f} MB"
        )


if __name__ == "__main__":
    main()
