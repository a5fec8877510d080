"""The fused pool-norm-ReLU kernel against its reference composition of PyTorch ops: values and all
gradients in float64 (both orders, odd sizes, 1..32 channels, ties in the windows), gradcheck, float32
and bfloat16 to their rounding, independence of the thread count, the fallback and bad inputs.
The kernel tests are skipped when it cannot be built here (no compiler)."""

from __future__ import annotations

import pytest
import torch

from fastweights.ops import cpu_extension, pool_norm_relu
from fastweights.ops.pool_norm_relu import pool_norm_relu as fused
from fastweights.ops.pool_norm_relu import pool_norm_relu_reference as reference

needs_kernel = pytest.mark.skipif(not pool_norm_relu.EXTENSION.available(), reason="the kernel did not build")


def _case(shape, dtype=torch.float64, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    if ties:
        y = torch.randint(0, 3, shape, generator=g).to(dtype)
    else:
        y = torch.randn(shape, generator=g, dtype=dtype)
    c = shape[1]
    weight = torch.empty(c, dtype=dtype).uniform_(-1.5, 1.5, generator=g)  # negative γ flips the argmax
    bias = torch.empty(c, dtype=dtype).uniform_(-0.5, 0.5, generator=g)
    return [t.requires_grad_() for t in (y, weight, bias)]


def _values_and_grads(fn, y, weight, bias, pool_first):
    out = fn(y, weight, bias, pool_first=pool_first)
    g_out = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    return (out, *torch.autograd.grad(out, (y, weight, bias), g_out))


@needs_kernel
@pytest.mark.parametrize("pool_first", [True, False])
@pytest.mark.parametrize(
    "shape", [(1, 1, 2, 4), (2, 3, 8, 8), (3, 5, 7, 9), (2, 32, 16, 16), (2, 17, 6, 5), (1, 4, 32, 32)]
)
@pytest.mark.parametrize("ties", [False, True])
def test_fused_equals_the_reference_fp64(pool_first, shape, ties):
    if pool_first and (shape[2] // 2) * (shape[3] // 2) < 2:
        pytest.skip("one pooled position: nothing to normalise")
    y, weight, bias = _case(shape, ties=ties)
    got = _values_and_grads(fused, y, weight, bias, pool_first)
    want = _values_and_grads(reference, y, weight, bias, pool_first)
    for name, a, b in zip(("out", "g_y", "g_weight", "g_bias"), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=name)
    assert got[0].is_contiguous(memory_format=torch.channels_last)


@needs_kernel
@pytest.mark.parametrize("pool_first", [True, False])
def test_gradcheck_tiny_fp64(pool_first):
    y, weight, bias = _case((2, 3, 5, 6), seed=1)
    assert torch.autograd.gradcheck(lambda *a: fused(*a, pool_first=pool_first), (y, weight, bias))


@needs_kernel
@pytest.mark.parametrize("pool_first", [True, False])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_float32_and_bfloat16_to_their_rounding(pool_first, dtype, tol):
    y, weight, bias = _case((3, 16, 12, 12), seed=2)
    low = y.detach().to(dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
    params = [p.detach().float().requires_grad_() for p in (weight, bias)]  # γ, β in float32 with bf16 maps
    got = _values_and_grads(fused, low, *params, pool_first)
    # the float64 reference on the same (rounded) inputs
    want = _values_and_grads(reference, low.detach().double().requires_grad_(), weight, bias, pool_first)
    assert got[0].dtype == dtype and got[1].dtype == dtype and got[2].dtype == torch.float32
    for name, a, b in zip(("out", "g_y", "g_weight", "g_bias"), got, want, strict=True):
        scale = b.abs().max().item()
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * scale, msg=name)


@needs_kernel
@pytest.mark.parametrize("pool_first", [True, False])
def test_results_do_not_depend_on_the_thread_count(pool_first):
    y, weight, bias = _case((7, 8, 10, 10), dtype=torch.float32, seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _values_and_grads(fused, y, weight, bias, pool_first)
        torch.set_num_threads(2)
        two = _values_and_grads(fused, y, weight, bias, pool_first)
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)


@needs_kernel
def test_an_nchw_input_and_parameters_without_gradients():
    y, weight, bias = _case((2, 4, 8, 8), seed=4)
    out = fused(y, weight.detach(), bias.detach(), pool_first=True)
    (g_y,) = torch.autograd.grad(out.sum(), y)
    (g_ref,) = torch.autograd.grad(reference(y, weight, bias, pool_first=True).sum(), y)
    torch.testing.assert_close(g_y, g_ref, rtol=1e-10, atol=1e-10)


def test_without_the_kernel_the_reference_runs(monkeypatch):
    monkeypatch.setenv("FASTWEIGHTS_CPU_KERNEL", "0")
    y, weight, bias = _case((2, 3, 6, 6))
    out = fused(y, weight, bias, pool_first=False)
    assert out.grad_fn is not None and "PoolNormReLU" not in type(out.grad_fn).__name__
    torch.testing.assert_close(out, reference(y, weight, bias, pool_first=False), rtol=0, atol=0)


def test_a_failed_build_falls_back_with_one_log_line(monkeypatch, caplog):
    def no_compiler():
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr(pool_norm_relu.EXTENSION, "_module", cpu_extension._UNSET)
    monkeypatch.setattr(pool_norm_relu.EXTENSION, "build", no_compiler)
    y, weight, bias = _case((2, 3, 6, 6))
    with caplog.at_level("WARNING", logger="fastweights.ops.pool_norm_relu"):
        out = fused(y, weight, bias, pool_first=True)
        fused(y, weight, bias, pool_first=True)
    assert [r.getMessage() for r in caplog.records] == [
        "fused CPU pool-norm-ReLU kernel unavailable (Ninja is required to load C++ extensions); "
        "using PyTorch's pooling and instance norm"
    ]
    torch.testing.assert_close(out, reference(y, weight, bias, pool_first=True), rtol=0, atol=0)


_Y, _ONES, _ZEROS = torch.zeros(2, 3, 8, 8), torch.ones(3), torch.zeros(3)


@pytest.mark.parametrize(
    ("args", "pool_first", "message"),
    [
        ((torch.zeros(2, 3, 8), _ONES, _ZEROS), True, "y: expected a float tensor [N, C, H, W]"),
        ((_Y.long(), _ONES, _ZEROS), True, "y: expected a float"),
        ((torch.zeros(2, 3, 1, 8), _ONES, _ZEROS), True, "y: expected H and W >= 2"),
        ((torch.zeros(2, 3, 2, 3), _ONES, _ZEROS), True, "more than one position per map"),
        ((_Y, torch.ones(4), _ZEROS), True, "weight: expected a float tensor [C] = [3]"),
        ((_Y, _ONES, None), False, "bias: expected a float tensor [C] = [3]"),
        ((_Y, _ONES.long(), _ZEROS), False, "weight: expected a float tensor [C] = [3]"),
    ],
)
def test_bad_inputs_name_the_argument(args, pool_first, message):
    for fn in (fused, reference):
        with pytest.raises(ValueError) as err:
            fn(*args, pool_first=pool_first)
        assert message in str(err.value) and "\n" not in str(err.value)
