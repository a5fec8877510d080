"""A/B the ACL meta-training step of a preset's model in one process: Conv-4 by its reference path
(the module sequence in NCHW, the step before the fast backbone) against its fast path (channels-last
convolution and pooling, ``fastweights.models.backbones.Conv4``).

The step is the recipe's: the model built from the preset (``acl.build_model``), two domains' tasks
per sequence (each domain's images through the backbone in one call, as ``cl.tasks.sample_task_sequences``
does), the ACL loss, backward and an Adam step. Images are random (only speed is measured), of the
preset's shape: B sequences × 2 tasks × N-way (K-shot + Q queries), ``data.channels`` × ``data.image_size``².

Printed: each path's float32 features and parameter gradients against a float64 step on the same
weights and inputs (relative errors; the script stops if the fast path's exceed 10× the reference's);
the large-``mm`` rate of this CPU and the backbone's convolution FLOPs per step against it (the
roofline: how much faster an fp32 backbone could still get); then, timed alternately round by round (a
slow spell of a shared machine hits both alike), the minimum seconds of the whole step and of the
backbone's forward + backward per variant, the ratio to the reference and each variant's peak tensor
memory during one step (torch's allocations, ``_memory.peak_bytes``). The CPU memory settings of the
CLI (``fastweights.cli.process_defaults``: huge pages for torch's allocator, freed memory reused by
malloc).

    python benchmarks/acl_step.py [--preset quick] [--rounds 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable

from fastweights.cli import process_defaults

process_defaults()  # CPU memory settings as in every `fastweights` run (set before torch is imported)

import torch  # noqa: E402
from _memory import peak_bytes  # noqa: E402

from fastweights.cl.objective import acl_loss  # noqa: E402
from fastweights.cl.tasks import TaskTensors  # noqa: E402
from fastweights.config import load_config, preset_path  # noqa: E402
from fastweights.models.backbones import Conv4  # noqa: E402
from fastweights.models.in_context import InContextClassifier  # noqa: E402
from fastweights.recipes import acl  # noqa: E402
from fastweights.train.precision import native_bf16  # noqa: E402


def conv_flops(net: Conv4, image_size: int) -> tuple[float, float]:
    """Multiply-add FLOPs (×2) of Conv-4's convolutions per image: (forward, forward + backward). The
    backward computes every weight gradient and the input gradient of all convolutions but the first."""
    fwd, first, size = 0.0, 0.0, image_size
    for i, block in enumerate(net.blocks):
        conv = block[0]
        flops = 2.0 * size * size * conv.out_channels * conv.in_channels * 9
        fwd, first = fwd + flops, first if i else flops
        size //= 2
    return fwd, 3 * fwd - first


def mm_rate(n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of an ``n × n`` float32 matmul (the best of ``repeats``)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Step:
    """One variant: its own copy of the model and optimiser, stepping on fixed random inputs."""

    def __init__(
        self,
        model: InContextClassifier,
        impl: str,
        images: list[torch.Tensor],
        labels: list,
        precision: str = "fp32",
    ) -> None:
        self.model = copy.deepcopy(model)
        self.model.backbone.impl = impl
        self.model.backbone.precision = precision
        self.opt = torch.optim.Adam(self.model.parameters(), 1e-3)
        self.images, self.labels = images, labels

    def loss(self) -> torch.Tensor:
        tasks = []
        for images, (sl, ql) in zip(self.images, self.labels, strict=True):  # one backbone call per domain
            feats = self.model.embed(images)  # [B, N*(K+Q), F]
            support, queries = torch.split(feats, [sl.shape[1], ql.shape[1]], dim=1)
            tasks.append(TaskTensors(support, sl, queries, ql))
        return acl_loss(self.model, tasks)[0]

    def step(self) -> None:
        loss = self.loss()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def backbone(self) -> None:
        self.model.zero_grad(set_to_none=True)
        self.model.backbone(self.images[0].flatten(0, 1)).sum().backward()


def _errors(step: Step, exact: Step) -> tuple[float, float]:
    """Relative error (norm of the difference / norm) of ``step``'s features and of all its parameter
    gradients together (one vector) against the float64 ``exact`` step's."""

    def run(s: Step) -> tuple[torch.Tensor, torch.Tensor]:
        s.model.zero_grad()
        s.loss().backward()
        with torch.no_grad():  # in training mode: the features the step computes (bf16 in fast-bf16)
            feats = s.model.embed(s.images[0])
        return feats.double(), torch.cat([p.grad.double().flatten() for p in s.model.parameters()])

    (f32, g32), (f64, g64) = run(step), run(exact)
    return float((f32 - f64).norm() / f64.norm()), float((g32 - g64).norm() / g64.norm())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    cfg = load_config(acl.CONFIG, preset_path("acl", a.preset))
    t, d = cfg.train, cfg.data
    torch.manual_seed(0)
    model = acl.build_model(cfg)
    n, k, q = t.n_way, t.k_shot, t.n_query
    shape = (t.batch_size, n * (k + q), d.channels, d.image_size, d.image_size)
    images = [torch.randn(shape) for _ in range(2)]  # two domains, one task each
    labels = [tuple(torch.randint(0, n, (t.batch_size, n * m)) for m in (k, q)) for _ in range(2)]
    steps = {impl: Step(model, impl, images, labels) for impl in ("reference", "fast")}
    native, what = native_bf16(torch.device("cpu"))
    if native:  # the opt-in bfloat16 backbone (train.backbone_precision=bf16), on CPUs that have it
        steps["fast-bf16"] = Step(model, "fast", images, labels, precision="bf16")
    per_image = conv_flops(model.backbone, d.image_size)
    count = 2 * images[0].shape[0] * images[0].shape[1]
    print(
        f"ACL step of the {a.preset!r} preset: batch {t.batch_size}, {n}-way {k}-shot {q} query, 2 tasks, "
        f"{count} images of {d.channels}x{d.image_size}x{d.image_size}, {a.threads} threads"
    )

    # the same function: each path's float32 features and gradients as far from the float64 reference
    # (the same weights and inputs) as the other's, i.e. equal to float32 rounding
    exact = Step(model.double(), "reference", [x.double() for x in images], labels)
    model.float()
    errors = {impl: _errors(s, exact) for impl, s in steps.items()}
    for impl, (feat_err, grad_err) in errors.items():
        kind = "bfloat16 backbone" if impl == "fast-bf16" else "float32"
        print(f"{impl:9s} {kind} vs the float64 reference: features {feat_err:.1e}, gradients {grad_err:.1e}")
    print(f"native bfloat16 on this CPU: {what}" + ("" if native else " (the fast-bf16 variant is not run)"))
    if max(errors["fast"]) > 10 * max(errors["reference"]) + 1e-6:
        raise SystemExit("the fast backbone is further from the float64 reference than float32 rounding")

    rate = mm_rate()
    print(
        f"large mm: {rate:.1f} GFLOP/s; backbone convolutions {per_image[0] / 1e6:.2f} MFLOP/image forward, "
        f"{per_image[1] / 1e6:.2f} forward + backward = {count * per_image[1] / 1e9:.1f} GFLOP per step"
    )
    best: dict[str, dict[str, float]] = {
        impl: {"step": float("inf"), "backbone": float("inf")} for impl in steps
    }
    for s in steps.values():  # warm-up
        s.step()
        s.backbone()
    for _ in range(a.rounds):
        for impl, s in steps.items():
            best[impl]["step"] = min(best[impl]["step"], _seconds(s.step))
            best[impl]["backbone"] = min(best[impl]["backbone"], _seconds(s.backbone))
    base = best["reference"]
    backbone_flops = images[0].shape[0] * images[0].shape[1] * per_image[1]
    for impl, s in steps.items():
        b = best[impl]
        peak = peak_bytes(s.step, "cpu")
        gflops = backbone_flops / b["backbone"] / 1e9
        print(
            f"{impl:9s} step {b['step']:.3f} s (ratio {b['step'] / base['step']:.2f}); backbone fwd+bwd "
            f"of one domain {b['backbone'] * 1e3:.0f} ms = {gflops:.1f} GFLOP/s = {gflops / rate:.0%} of mm; "
            f"peak tensor memory {peak / 2**20:.0f} MB"
        )


if __name__ == "__main__":
    main()
