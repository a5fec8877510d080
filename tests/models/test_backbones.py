"""Conv4's fast path (channels-last convolution and pooling) against its reference (the plain module
sequence in NCHW): the same outputs and gradients, in float64 and to float32 rounding."""

from __future__ import annotations

import copy

import pytest
import torch

from fastweights.models.backbones import Conv4


def _pair(dtype: torch.dtype, **kwargs) -> tuple[Conv4, Conv4]:
    fast = Conv4(**kwargs).to(dtype)
    with torch.no_grad():  # affine norm parameters away from their (1, 0) init
        for m in fast.modules():
            if isinstance(m, (torch.nn.InstanceNorm2d, torch.nn.BatchNorm2d)):
                m.weight.uniform_(-1.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    reference = copy.deepcopy(fast)
    reference.impl = "reference"
    return fast, reference


def _run(net: Conv4, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    net.zero_grad(set_to_none=True)
    out = net(x)
    (out * torch.linspace(-1, 1, out.shape[1], dtype=out.dtype)).sum().backward()
    return out, {k: p.grad for k, p in net.named_parameters()}


@pytest.mark.parametrize("norm", ["instance", "batch", "none"])
@pytest.mark.parametrize("pool_before_norm", [False, True])
@pytest.mark.parametrize("in_channels", [1, 3])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 2e-4)])
def test_fast_equals_reference_outputs_and_gradients(norm, pool_before_norm, in_channels, dtype, tol):
    kw = dict(in_channels=in_channels, channels=8, image_size=32, norm=norm)
    kw["pool_before_norm"] = pool_before_norm
    fast, reference = _pair(dtype, **kw)
    x = torch.randn(5, in_channels, 32, 32, dtype=dtype)
    x[0, :, :8] = 0.25  # a constant patch: ties in the max-pool windows, as on a glyph's background
    for mode in ("train", "eval"):  # batch norm: batch statistics, then the running ones
        getattr(fast, mode)()
        getattr(reference, mode)()
        out_f, grads_f = _run(fast, x)
        out_r, grads_r = _run(reference, x)
        torch.testing.assert_close(out_f, out_r, rtol=tol, atol=tol)
        assert out_f.is_contiguous() and out_f.shape == (5, fast.feature_dim)
        for k, g in grads_r.items():
            torch.testing.assert_close(grads_f[k], g, rtol=tol, atol=tol, msg=k)
    if norm == "batch":  # the running statistics were updated alike
        for (k, a), b in zip(fast.state_dict().items(), reference.state_dict().values(), strict=True):
            torch.testing.assert_close(a.to(b.dtype), b, rtol=tol, atol=tol, msg=k)


def test_input_gradient_and_channels_last_input():
    fast, reference = _pair(torch.float64, in_channels=3, channels=4, image_size=32)
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64, requires_grad=True)
    out = fast(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(out, reference(x))
    (g_fast,) = torch.autograd.grad(out.square().sum(), x)
    (g_ref,) = torch.autograd.grad(reference(x).square().sum(), x)
    torch.testing.assert_close(g_fast, g_ref)


def test_gradcheck_tiny_fp64():
    """Gradients of the parameters (input gradients: the parity tests above) by finite differences."""
    fast, _ = _pair(torch.float64, in_channels=1, channels=2, image_size=32, pool_before_norm=True)
    x = torch.randn(2, 1, 32, 32, dtype=torch.float64)
    names = [k for k, _ in fast.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in fast.parameters())

    def f(*values):
        return torch.func.functional_call(fast, dict(zip(names, values, strict=True)), (x,))

    assert torch.autograd.gradcheck(f, params)


def test_the_images_are_not_changed_and_impl_is_checked():
    fast, _ = _pair(torch.float32, in_channels=1, channels=4, image_size=32)
    x = torch.randn(2, 1, 32, 32)
    before = x.clone()
    fast(x)
    assert torch.equal(x, before)
    with pytest.raises(ValueError, match=r"^impl: expected one of \['fast', 'reference'\], got 'slow'$"):
        fast.impl = "slow"
    with pytest.raises(ValueError, match=r"^impl: expected one of"):
        Conv4(impl="slow")


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_bf16_precision_in_training_mode_only(impl):
    """precision="bf16": the training-mode forward computes in bfloat16 (features returned in float32,
    float32 parameter gradients, close to float32 at bfloat16 rounding); evaluation mode is the float32
    function exactly."""
    net, _ = _pair(torch.float32, in_channels=3, channels=8, image_size=32, pool_before_norm=True)
    net.impl = impl
    x = torch.randn(6, 3, 32, 32)
    out32, grads32 = _run(net, x)
    net.precision = "bf16"
    out16, grads16 = _run(net, x)
    assert out16.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads16.values())
    scale = out32.abs().max().item()
    torch.testing.assert_close(out16, out32, rtol=0.1, atol=0.1 * scale)
    assert not torch.equal(out16, out32)  # it did compute in bfloat16
    net.eval()
    with torch.no_grad():
        net.precision = "fp32"
        want = net(x)
        net.precision = "bf16"
        assert torch.equal(net(x), want)


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision"):
        Conv4(precision="fp16")
    net = Conv4()
    with pytest.raises(ValueError, match="precision"):
        net.precision = "half"
