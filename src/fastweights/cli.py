"""Command line: ``fastweights <recipe> <train|eval|compare|export|…> …`` for every recipe of
``recipes.contract.RECIPES``."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main", "process_defaults"]


# name -> (help, default preset, compare --models example)
_RECIPE_HELP = {
    "acl": ("Automated Continual Learning: metalearn and evaluate", "quick", "srwm,deltanet"),
    "fewshot": (
        "N-way K-shot in-context learning with synchronous labels (SRWM paper §4.1)",
        "quick",
        "srwm,deltanet,lstm",
    ),
    "sequential": (
        "delayed-label sequential multi-task in-context learning (SRWM paper §4.2)",
        "quick",
        "srwm,deltanet,lstm",
    ),
    "lm": (
        "byte-level language modelling with TTT / attention / DeltaNet / SRWM layers (TTT paper)",
        "tiny",
        "ttt_linear,ttt_mlp,softmax_attention,deltanet",
    ),
    "rl": (
        "multi-task reinforcement learning with fast-weight policy cores, V-trace (SRWM paper §4.3)",
        "quick",
        "srwm,deltanet,lstm,ff,fake_srwm,srwm_reset",
    ),
}
# recipe -> deprecated spelling of `compare --models` (hidden; kept for one release)
_DEPRECATED_MODELS_FLAG = {"lm": "--mixers"}
_EVAL_EXAMPLE = {"acl": "eval.split_runs=2", "lm": "eval.windows=64", "rl": "eval.episodes=40"}
# recipe -> (a `compare --vary` example, a `compare --presets` example) of its own keys and presets
_COMPARE_EXAMPLES = {
    "acl": ("train.acl_loss=true,false", "quick,quick-3domain"),
    "fewshot": ("train.k_shot=1,5", "smoke,quick"),
    "sequential": ("train.lr=1e-3,3e-4", "quick,quick-emoji"),
    "lm": ("train.lr=3e-3,1e-3", "smoke,tiny"),
    "rl": ("train.lr=6e-4,3e-4", "smoke,quick"),
}
_EXPORT_HELP = {
    "lm": "config.json + model.safetensors (CausalLM.from_pretrained; --format hf: a Hugging Face folder)",
}


def _parser() -> argparse.ArgumentParser:
    from fastweights.recipes.contract import RECIPES

    p = argparse.ArgumentParser(prog="fastweights", description="Learned learning algorithms: recipes.")
    p.add_argument(
        "--version", action="version", version=f"fastweights {_version()}", help="print the version and exit"
    )
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read checkpoints of earlier versions that hold pickled Python objects (their loading can run "
        "code: only for files you wrote yourself); may come anywhere on the line",
    )
    recipes = p.add_subparsers(dest="recipe", required=True)
    verbs = {}
    for name in RECIPES:
        what, preset, example = _RECIPE_HELP[name]
        verbs[name] = _add_recipe(recipes, name, what, compare_example=example, preset=preset)
        _add_config(verbs[name], name, preset)
        ex = _add_export(
            verbs[name], _EXPORT_HELP.get(name, "slim copy of a run (model weights + config) for sharing")
        )
        if name == "lm":
            ex.add_argument(
                "--format",
                choices=["fastweights", "hf"],
                default="fastweights",
                help="fastweights: CausalLM.from_pretrained (default); hf: a Hugging Face folder for "
                "AutoModelForCausalLM after `import fastweights.hf` (needs the [hf] extra)",
            )
    _add_cl_baselines(recipes)
    cu = verbs["acl"].add_parser(
        "curves", help="plot validation accuracy vs wall-clock minutes of several runs"
    )
    cu.add_argument("run_dirs", type=Path, nargs="+")
    cu.add_argument("--out", type=Path, required=True, help="output PNG")
    cu.add_argument("--labels", default=None, help="comma-separated legend labels (default: folder names)")
    cu.add_argument(
        "--key",
        default="val_objective",
        help="metrics.jsonl field to plot (default val_objective: the best checkpoint's selection metric)",
    )
    cu.add_argument("--x", choices=["minutes", "step"], default="minutes", help="x axis")
    cu.add_argument(
        "--forgetting",
        action="store_true",
        help="2-task runs on the same measures, recomputed from their logged in-context terms (the ACL "
        "objective of all six, acc(A|A), acc(B|A→B), acc(A|A→B); --key unused), e.g. ACL and no-ACL, "
        "whose own val_objective differs; runs with the same --labels entry are seeds of one model",
    )
    bu = verbs["acl"].add_parser(
        "budget",
        help="budget curves: split-benchmark accuracy of evaluated runs vs meta-training steps, per setting",
    )
    bu.add_argument("run_dirs", type=Path, nargs="+", help="evaluated ACL run folders (with results.json)")
    bu.add_argument("--out", type=Path, required=True, help="output folder (budget.md, budget.json, plots/)")
    _add_force(bu, "replace output files in --out that `acl budget` did not write")
    _add_acl_stream(verbs["acl"])
    ge = verbs["lm"].add_parser(
        "generate", help="continue a prompt with a trained model (prefill + cached decode)"
    )
    ge.add_argument("run_dir", type=Path, help="a run folder or an `lm export` folder")
    ge.add_argument("--prompt", required=True)
    ge.add_argument("--max-new-tokens", type=int, default=200, help="bytes to generate (default 200)")
    ge.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    ge.add_argument("--top-k", type=int, default=None)
    ge.add_argument("--seed", type=int, default=0)
    ge.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    co = verbs["lm"].add_parser(
        "convert",
        help="an `lm export` folder into a Hugging Face folder, or back (needs the [hf] extra)",
    )
    co.add_argument("src", type=Path, help="a CausalLM folder (`lm export`) or a Hugging Face folder")
    co.add_argument("out_dir", type=Path, help="the folder to write, in the other format")
    _add_force(co, "write into an OUT_DIR that holds other files")
    return p


def _add_acl_stream(verbs: argparse._SubParsersAction) -> None:
    """``acl stream``: a model learns a folder of your own images, task after task."""
    st = verbs.add_parser(
        "stream",
        help="learn your own images task by task (FOLDER/<task>/<class>/*.png|jpg|jpeg): accuracy matrix, "
        "ACC/BWT/forgetting, report",
    )
    st.add_argument(
        "--model", type=Path, required=True, help="a run or export folder, e.g. pretrained/acl-5task-class"
    )
    st.add_argument(
        "--data",
        type=Path,
        required=True,
        help="FOLDER/<task>/<class>/*.png|jpg|jpeg; tasks learned in name order, classes in name order",
    )
    st.add_argument(
        "--shots",
        type=int,
        default=None,
        help="demonstrations per class; the other images are tested (default: the model's eval.split_k_shot)",
    )
    st.add_argument(
        "--out", type=Path, default=None, help="output folder (default runs/acl-stream-<FOLDER name>)"
    )
    st.add_argument("--seed", type=int, default=0, help="seed of the demonstration draw (default 0)")
    st.add_argument(
        "--draw",
        choices=["random", "first"],
        default="random",
        help="demonstrations: drawn at random with --seed, or the first --shots files by name "
        "(default: random)",
    )
    st.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    st.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    st.add_argument(
        "--mean",
        default=None,
        help="pixel mean of images / 255: one number, or R,G,B (default: that of the demonstrations drawn)",
    )
    st.add_argument("--std", default=None, help="pixel standard deviation of images / 255, as --mean")
    _add_force(st, "write into an --out folder that holds other files (never done without it)")


def _numbers(flag: str, text: str | None) -> float | tuple[float, ...] | None:
    """``--mean 0.5`` → 0.5, ``--mean 0.4,0.5,0.6`` → a tuple; None stays None.

    Raises:
        ValueError: naming ``flag`` for anything else.
    """
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ValueError(
            f"{flag}: expected a number or comma-separated numbers (R,G,B), given {text!r}"
        ) from None
    return values[0] if len(values) == 1 else values


def _run_acl_stream(args: argparse.Namespace) -> None:
    from fastweights.recipes.acl.stream import run_stream
    from fastweights.recipes.run import command_line

    out = args.out or Path("runs") / f"acl-stream-{args.data.resolve().name}"
    res = run_stream(
        args.model,
        args.data,
        shots=args.shots,
        out=out,
        seed=args.seed,
        draw=args.draw,
        force=args.force,
        checkpoint=args.checkpoint,
        device=args.device,
        mean=_numbers("--mean", args.mean),
        std=_numbers("--std", args.std),
        command=command_line(),
    )
    acc = res["accuracy"]
    metrics = ", ".join(
        f"{name} {100 * acc[key]['mean']:.2f} %"
        for key, name in (("ACC", "ACC"), ("BWT", "BWT"), ("forgetting", "forgetting"))
    )
    print(f"{len(acc['task_names'])} tasks learned ({res['stream']['scenario']}-incremental): {metrics}")
    print(f"report: {out / 'report.md'}")


def _add_cl_baselines(recipes: argparse._SubParsersAction) -> None:
    """``cl-baselines run`` and ``cl-baselines compare`` (classic continual-learning baselines)."""
    cb = recipes.add_parser(
        "cl-baselines",
        help="classic continual-learning baselines (EWC, SI, replay, …) vs ACL on split benchmarks",
        **_presets_help("cl-baselines"),
    )
    verbs = cb.add_subparsers(dest="verb", required=True)
    ru = verbs.add_parser(
        "run",
        help="train and evaluate the baselines (cells/, results.json, report.md)",
        **_presets_help("cl-baselines"),
    )
    _add_preset(ru, "cl-baselines", "quick")
    ru.add_argument(
        "--run-dir", type=Path, default=None, help="output folder (default runs/cl-baselines-<preset>)"
    )
    ru.add_argument(
        "--methods", default=None, help="comma-separated methods, e.g. sgd,adam,ewc,si,replay,joint"
    )
    ru.add_argument("--budget", choices=["fewshot", "full"], default=None, help="one data budget only")
    ru.add_argument(
        "--resume", action="store_true", help="continue the run in --run-dir (finished cells are kept)"
    )
    _add_force(ru, "start over in a --run-dir that holds a run (its cells and results are replaced)")
    ru.add_argument("overrides", nargs="*", help="key=value config overrides, e.g. runs=3")
    co = verbs.add_parser("compare", help="ACL models and a baselines run in one table per scenario")
    co.add_argument("run_dir", type=Path, help="a finished `cl-baselines run` folder")
    co.add_argument(
        "--acl",
        type=Path,
        nargs="*",
        default=[],
        help="ACL run or export folders (e.g. pretrained/acl-5task-class)",
    )
    co.add_argument("--out", type=Path, required=True, help="output folder (comparison.md, plots/)")
    _add_force(co, "write into an --out folder that holds other files")
    _add_config(verbs, "cl-baselines", "quick")


def _run_cl_baselines(args: argparse.Namespace) -> None:
    from fastweights.config import load_config, preset_path
    from fastweights.recipes.run import command_line

    if args.verb == "config":
        _print_config("cl-baselines", args.preset, args.overrides)
        return
    if args.verb == "compare":
        from fastweights.recipes.cl_baselines.compare import compare

        res = compare(args.run_dir, list(args.acl), args.out, force=args.force, command=command_line())
        print(res["markdown"])
        print(f"comparison: {args.out / 'comparison.md'}")
        return
    from fastweights.recipes.cl_baselines import run
    from fastweights.recipes.cl_baselines.config import BaselinesConfig

    overrides = list(args.overrides)
    if args.methods is not None:
        overrides.append(f"methods=[{args.methods}]")
    if args.budget is not None:
        overrides.append(f"budgets=[{args.budget}]")
    path = preset_path("cl_baselines", args.preset)
    cfg = load_config(BaselinesConfig, path, overrides)
    run_dir = args.run_dir or Path("runs") / f"cl-baselines-{path.stem}"
    run(cfg, run_dir, resume=args.resume, force=args.force, command=command_line(), overrides=overrides)
    print(f"report: {run_dir / 'report.md'}")


def _add_train_eval(verbs: argparse._SubParsersAction, name: str, preset: str, *, eval_example: str) -> None:
    """The ``train`` and ``eval`` verbs every recipe has (same contract for all recipes)."""
    tr = verbs.add_parser(
        "train", help="train a model (writes config, metrics, checkpoints)", **_presets_help(name)
    )
    _add_preset(tr, name, preset)
    tr.add_argument(
        "--run-dir", type=Path, default=None, help=f"output folder (default runs/{name}-<preset>)"
    )
    tr.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir (overrides may change train.max_steps, train.max_minutes, "
        "train.threads, device, eval.*)",
    )
    _add_force(tr, "start over in a --run-dir that holds a run (its checkpoints and log are replaced)")
    tr.add_argument("--eval", action="store_true", help="evaluate the best checkpoint after training")
    tr.add_argument("overrides", nargs="*", help="key=value config overrides, e.g. train.max_steps=100")
    ev = verbs.add_parser("eval", help="evaluate a run folder (results.json, report.md, plots/)")
    ev.add_argument("run_dir", type=Path)
    ev.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    ev.add_argument("--out", type=Path, default=None, help="write results/report here (default: RUN_DIR)")
    _add_force(ev, "write into an --out folder that holds another run or other files")
    ev.add_argument("overrides", nargs="*", help=f"key=value overrides, e.g. {eval_example}")


def _add_export(verbs: argparse._SubParsersAction, what: str) -> argparse.ArgumentParser:
    ex = verbs.add_parser("export", help=what)
    ex.add_argument("run_dir", type=Path)
    ex.add_argument("out_dir", type=Path)
    ex.add_argument("--checkpoint", choices=["best", "latest"], default="best")
    _add_force(ex, "write into an OUT_DIR that holds a run (even RUN_DIR itself) or other files")
    return ex


def _add_force(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--force", action="store_true", help=what)


def _version() -> str:
    """The installed package's version (``importlib.metadata``), else ``fastweights.__version__`` (a
    source tree used without installing it)."""
    from importlib import metadata

    try:
        return metadata.version("fastweights")
    except metadata.PackageNotFoundError:
        import fastweights

        return fastweights.__version__


def _add_preset(parser: argparse.ArgumentParser, name: str, default: str) -> None:
    """The ``--preset`` option of a verb of recipe ``name`` (its presets are listed by ``--help``)."""
    from fastweights.recipes.contract import PRESET_FOLDERS

    parser.add_argument(
        "--preset",
        default=default,
        help=f"preset name (fastweights/configs/{PRESET_FOLDERS[name]}/NAME.yaml, listed below) or a .yaml "
        f"path (default: {default})",
    )


@functools.cache
def _presets_help(name: str) -> dict[str, Any]:
    """``add_parser`` keywords that end a ``--help`` with the presets of recipe ``name``, one line each
    (the first sentence of the comment each preset file starts with)."""
    from fastweights.config import available_presets, preset_description
    from fastweights.recipes.contract import PRESET_FOLDERS

    folder = PRESET_FOLDERS[name]
    presets = available_presets(folder)
    width = max(map(len, presets))
    lines = [f"  {p:<{width}}  {preset_description(folder, p)}" for p in presets]
    head = f"presets (--preset NAME; `fastweights {name} config --preset NAME` shows its values):"
    return {"epilog": "\n".join([head, *lines]), "formatter_class": argparse.RawDescriptionHelpFormatter}


def _add_config(verbs: argparse._SubParsersAction, name: str, preset: str) -> None:
    """The ``config`` verb of recipe ``name``: the resolved config as YAML (:func:`_print_config`)."""
    co = verbs.add_parser(
        "config",
        help="print the resolved config (preset + overrides, validated as for a run) as YAML",
        **_presets_help(name),
    )
    _add_preset(co, name, preset)
    example = "runs=3" if name == "cl-baselines" else "train.seed=2"  # cl-baselines has no train.seed
    co.add_argument("overrides", nargs="*", help=f"key=value config overrides, e.g. {example}")


def _print_config(name: str, preset: str, overrides: list[str]) -> None:
    """Print the config of recipe ``name`` that ``--preset preset`` and ``overrides`` give, as YAML: loaded
    and validated as a run loads it (:func:`fastweights.config.load_config`), written as the run folder's
    ``config.yaml`` is written, so the output is itself a valid ``--preset FILE.yaml``.

    Raises:
        FileNotFoundError: an unknown preset or a missing YAML file.
        ValueError: one line naming the key for an unknown key or a value the config refuses.
    """
    from fastweights.config import config_to_yaml, load_config, preset_path
    from fastweights.recipes.contract import PRESET_FOLDERS, config_class

    cfg = load_config(config_class(name), preset_path(PRESET_FOLDERS[name], preset), overrides)
    sys.stdout.write(config_to_yaml(cfg))


def _add_recipe(
    recipes: argparse._SubParsersAction,
    name: str,
    what: str,
    *,
    compare_example: str = "srwm,deltanet,lstm",
    preset: str = "quick",
) -> argparse._SubParsersAction:
    rp = recipes.add_parser(name, help=what, **_presets_help(name))
    verbs = rp.add_subparsers(dest="verb", required=True)
    _add_train_eval(verbs, name, preset, eval_example=_EVAL_EXAMPLE.get(name, "eval.episodes=200"))
    co = verbs.add_parser(
        "compare",
        help="train + evaluate one run per sequence layer (or per value of a key); one table + plot",
        **_presets_help(name),
    )
    which = co.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--models", default=None, help=f"comma-separated sequence layers, e.g. {compare_example}"
    )
    if name in _DEPRECATED_MODELS_FLAG:
        which.add_argument(_DEPRECATED_MODELS_FLAG[name], dest="deprecated_models", help=argparse.SUPPRESS)
    which.add_argument(
        "--vary",
        default=None,
        metavar="KEY=V1,V2",
        help=f"one run per value of a config key, e.g. {_COMPARE_EXAMPLES[name][0]} (folders KEY_LEAF=VALUE)",
    )
    which.add_argument(
        "--presets",
        default=None,
        metavar="P1,P2",
        help=f"one run per preset, with the same overrides, e.g. {_COMPARE_EXAMPLES[name][1]} "
        "(folders: preset names)",
    )
    _add_preset(co, name, preset)
    co.add_argument(
        "--seeds",
        default=None,
        metavar="S1,S2,...",
        help="train every variant once per seed (train.seed; folders VARIANT/seedS); the table adds the mean "
        "± 95%% CI over seeds and paired differences against the first variant, e.g. 0,1,2",
    )
    co.add_argument("--run-root", type=Path, default=None, help=f"default runs/{name}-compare-<preset>")
    _add_force(
        co,
        "overwrite comparison.md/.json/*.png in --run-root that an earlier compare did not write "
        "(e.g. your own file of that name, or one edited since)",
    )
    co.add_argument("overrides", nargs="*", help="key=value overrides applied to every model's run")
    return verbs


def _run_recipe(args: argparse.Namespace) -> None:
    """Every verb of every recipe, through the recipe registry (``recipes.contract``)."""
    from fastweights.config import deprecated_keys, preset_path, rename_deprecated, warn_deprecated
    from fastweights.recipes import compare as cmp
    from fastweights.recipes.compare import parse_seeds
    from fastweights.recipes.contract import get_recipe
    from fastweights.recipes.run import command_line

    module = get_recipe(args.recipe)
    if hasattr(args, "overrides"):  # renamed once here: one warning per deprecated key
        args.overrides = rename_deprecated(args.overrides, deprecated_keys(module.CONFIG), "overrides")
    if getattr(args, "deprecated_models", None) is not None:
        warn_deprecated(_DEPRECATED_MODELS_FLAG[args.recipe], "--models")
        args.models = args.deprecated_models
    if args.verb == "generate":
        text = module.generate_text(  # type: ignore[attr-defined]
            args.run_dir,
            args.prompt,
            args.max_new_tokens,
            which=args.checkpoint,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
        )
        print(text)
    elif args.verb == "curves":
        labels = args.labels.split(",") if args.labels else None
        print(
            module.compare_curves(  # type: ignore[attr-defined]
                args.run_dirs, args.out, labels=labels, key=args.key, x=args.x, forgetting=args.forgetting
            )
        )
    elif args.verb == "stream":
        _run_acl_stream(args)
    elif args.verb == "convert":
        path, model_type = module.convert(args.src, args.out_dir, force=args.force)  # type: ignore[attr-defined]
        print(f"converted {args.src} -> {path} (model_type {model_type})")
    elif args.verb == "budget":
        from fastweights.recipes.acl.budget import budget_report

        budget_report(args.run_dirs, args.out, force=args.force, command=command_line())
        print(f"budget curves of {len(args.run_dirs)} runs: {args.out / 'budget.md'}")
    elif args.verb == "export":
        formats = {"format": args.format} if hasattr(args, "format") else {}
        path = module.export(args.run_dir, args.out_dir, which=args.checkpoint, force=args.force, **formats)
        size = f" ({path.stat().st_size / 1e6:.1f} MB)" if path.is_file() else ""
        print(f"exported {path}{size}")
    elif args.verb in ("train", "eval"):
        _train_or_eval(args, module)
    elif args.verb == "config":
        _print_config(args.recipe, args.preset, args.overrides)
    else:
        path = preset_path(args.recipe, args.preset)
        root = args.run_root or Path("runs") / f"{args.recipe}-compare-{path.stem}"
        models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models is not None else None
        vary = cmp.parse_vary(args.vary) if args.vary is not None else None
        seeds = parse_seeds(args.seeds) if args.seeds is not None else None
        presets = cmp.parse_presets(args.presets, args.recipe) if args.presets is not None else None
        if presets is not None and args.run_root is None:
            root = Path("runs") / f"{args.recipe}-compare-{'-vs-'.join(p.stem for p in presets)}"
        res = cmp.compare(
            args.recipe,
            path,
            models,
            root,
            args.overrides,
            command=command_line(),
            vary=vary,
            seeds=seeds,
            force=args.force,
            presets=presets,
        )
        print(res["markdown"])
        print(f"comparison: {root / 'comparison.md'}")


def _train_or_eval(args: argparse.Namespace, module: Any) -> None:
    """``<recipe> train`` (+ ``--eval``: the best checkpoint, recorded as the equivalent ``eval``
    command) or ``<recipe> eval``: the contract all recipes share."""
    from fastweights.config import load_config, preset_path
    from fastweights.recipes.contract import eval_command
    from fastweights.recipes.run import command_line

    if args.verb == "train":
        path = preset_path(args.recipe, args.preset)
        cfg = load_config(module.CONFIG, path, args.overrides)
        run_dir = args.run_dir or Path("runs") / f"{args.recipe}-{path.stem}"
        summary = module.train(
            cfg,
            run_dir,
            resume=args.resume,
            command=command_line(),
            overrides=args.overrides,
            force=args.force,
        )
        from fastweights.train import distributed

        w = distributed.world()
        if w.distributed:  # every rank has finished; only rank 0 reports and evaluates
            distributed.barrier(w)
            distributed.shutdown()
            if not w.main:
                return
        print(f"trained {summary['step']} steps in {summary['minutes']:.1f} min; run folder: {run_dir}")
        if args.eval:
            print(module.summary(module.evaluate(run_dir, command=eval_command(args.recipe, run_dir))))
            print(f"report: {run_dir / 'report.md'}")
        return
    out = args.out or args.run_dir
    res = module.evaluate(
        args.run_dir,
        which=args.checkpoint,
        overrides=args.overrides,
        command=command_line(),
        out_dir=out,
        force=args.force,
    )
    print(module.summary(res))
    print(f"report: {out / 'report.md'}")


# the kernel's THP mode ("always [madvise] never"); a module constant so tests can point it elsewhere
_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _huge_pages_by_default() -> None:
    """Let torch's CPU allocator put large tensors (>= 2 MiB) on transparent huge pages
    (``THP_MEM_ALLOC_ENABLE=1``, which c10 reads at its first allocation, so this runs before torch is
    imported) unless the user set the variable or the kernel has THP off. Taking fresh activations one
    4 KiB page fault at a time cost about a third of an ACL training step on a 2-core virtual machine
    (docs/results.md, "Huge pages"). ``THP_MEM_ALLOC_ENABLE=0`` turns it off."""
    try:
        mode = _THP_MODE.read_text()
    except OSError:  # not Linux, or no THP support
        return
    if "[never]" not in mode:
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEEP_FREED_BYTES = 1 << 30


def _malloc_reuses_freed_memory() -> bool:
    """Let glibc's malloc serve large blocks from its heap and keep freed memory for the next allocation
    (``mallopt(M_MMAP_MAX, 0)``, ``mallopt(M_TRIM_THRESHOLD, 1 GiB)``) unless
    ``FASTWEIGHTS_MALLOC_REUSE=0``. By default glibc maps every block of 32 MiB or more fresh from the
    kernel and unmaps it when it is freed, so each training step's large activations and gradients (an
    ACL step's 63 MB first-block maps) are page-faulted and zeroed anew: 5 ms per 63 MB on huge pages,
    19 ms on 4 KiB pages, against 1.5 ms for reused memory on a 2-core virtual machine, a quarter of the
    Conv-4 backbone's time (docs/results.md, "ACL step"). Freed memory up to 1 GiB at the heap's top
    stays with the process. Returns whether the setting was applied (glibc only: elsewhere, e.g. macOS
    or musl, nothing changes)."""
    if os.environ.get("FASTWEIGHTS_MALLOC_REUSE", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_FREED_BYTES))


def process_defaults() -> None:
    """The CPU memory settings of every ``fastweights`` run, before torch is imported: transparent huge
    pages for torch's allocator (:func:`_huge_pages_by_default`) and reuse of freed memory by glibc's
    malloc (:func:`_malloc_reuses_freed_memory`). The benchmarks call it too, to time what a run does."""
    _huge_pages_by_default()
    _malloc_reuses_freed_memory()


def main(argv: list[str] | None = None) -> int:
    process_defaults()
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    trust = [a for a in argv if a == "--trust-pickle"]  # a global option wherever it is written
    args, extra = parser.parse_known_args(trust[:1] + [a for a in argv if a != "--trust-pickle"])
    if hasattr(args, "overrides"):  # key=value items may also follow options such as --out
        bad = [a for a in extra if "=" not in a or a.startswith("-")]
        if bad:
            parser.error(f"unrecognized arguments: {' '.join(bad)}")
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from fastweights.train.safe_state import trusting_pickles

    with trusting_pickles(args.trust_pickle):
        return _guarded(
            lambda: _run_cl_baselines(args) if args.recipe == "cl-baselines" else _run_recipe(args)
        )


def _out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: numpy's ``MemoryError``, torch's CPU allocator
    (``RuntimeError: … can't allocate memory``) or ``torch.OutOfMemoryError`` (CUDA)."""
    if isinstance(err, MemoryError):
        return True
    return type(err).__name__ == "OutOfMemoryError" or "can't allocate memory" in str(err)


def _guarded(fn: Callable[[], None]) -> int:
    from fastweights.train.distributed import RankStopped, shutdown

    try:
        fn()
    except RankStopped:  # under torchrun: rank 0 failed and printed why
        return 2
    except (ValueError, FileNotFoundError, FileExistsError, ImportError) as err:  # incl. RunFolderError;
        # ImportError: an optional extra that is not installed (e.g. procgen2 for env.suite=procgen)
        print(f"fastweights: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # e.g. a read-only folder or a full disk while writing config/logs/results
        where = f"{err.filename}: " if err.filename else ""
        print(f"fastweights: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as err:
        if not _out_of_memory(err):
            raise
        # the sizes a run can check are refused before it starts (recipes.run.check_model_memory, …)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        print(
            f"fastweights: error: out of memory ({type(err).__name__}: {first}); reduce the sizes of the "
            "run (train.batch_size, model.*, data.examples_per_class, eval.batch_size)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        from fastweights.train.distributed import world

        saved = "the last checkpoint" if world().distributed else "the latest checkpoint was saved"
        print(f"fastweights: interrupted; {saved} (use --resume)", file=sys.stderr)
        return 130
    finally:
        shutdown()  # a torchrun process group left open aborts the process at exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
