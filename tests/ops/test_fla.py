"""The mapping of fastweights' delta rule and linear attention onto flash-linear-attention's
conventions, checked on CPU against fla's own pure-PyTorch references (layout, scale, beta, state
shape, read-after-write), the wrappers' arguments through stand-ins of fla's chunk kernels, and the
CUDA dispatch on a GPU. Skipped without ``fla`` (``GPU=1 bash scripts/setup.sh`` installs it; CI does)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("fla.ops.delta_rule.naive")
from fla.ops.delta_rule.naive import delta_rule_recurrence  # noqa: E402
from fla.ops.linear_attn.naive import naive_recurrent_linear_attn  # noqa: E402

from fastweights.ops import delta_rule, fla, linear_attention  # noqa: E402


def _inputs(b=2, t=37, h=3, dk=8, dv=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, t, h, dk, generator=g)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, dk, generator=g), dim=-1)
    v = torch.randn(b, t, h, dv, generator=g)
    beta = torch.rand(b, t, h, generator=g)
    s0 = torch.randn(b, h, dk, dv, generator=g) * 0.1
    return q, k, v, beta, s0


def _fla_chunk_delta_rule_standin(
    q, k, v, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel
):
    # fla's chunk API ([B, T, H, K], explicit scale) built from fla's naive recurrence (head-first,
    # q scaled by 1/sqrt(K) inside)
    assert use_qk_l2norm_in_kernel is False
    dk = q.shape[-1]
    hf = lambda x: x.transpose(1, 2)  # noqa: E731
    o, s = delta_rule_recurrence(
        hf(q) * scale * dk**0.5, hf(k), hf(v), hf(beta), initial_state, output_final_state
    )
    return hf(o), s


def test_our_delta_rule_is_fla_recurrence_with_scale_one():
    q, k, v, beta, s0 = _inputs()
    ours, s_ours = delta_rule(q, k, v, beta, initial_state=s0, output_final_state=True)
    theirs, s_theirs = _fla_chunk_delta_rule_standin(q, k, v, beta, 1.0, s0, True, False)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s_ours, s_theirs, rtol=1e-4, atol=1e-5)


def test_our_linear_attention_is_fla_unnormalised_with_scale_one():
    q, k, v, _, s0 = _inputs()
    ours, s_ours = linear_attention(q, k, v, initial_state=s0, output_final_state=True)
    theirs, s_theirs = naive_recurrent_linear_attn(
        q, k, v, scale=1.0, initial_state=s0, output_final_state=True
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s_ours, s_theirs, rtol=1e-4, atol=1e-4)


def test_the_wrappers_pass_fastweights_conventions(monkeypatch):
    import fla.ops.delta_rule as fla_delta
    import fla.ops.linear_attn as fla_linear

    def linear_standin(q, k, v, scale, initial_state, output_final_state, normalize):
        return naive_recurrent_linear_attn(q, k, v, scale, initial_state, output_final_state, normalize)

    monkeypatch.setattr(fla_delta, "chunk_delta_rule", _fla_chunk_delta_rule_standin)
    monkeypatch.setattr(fla_linear, "chunk_linear_attn", linear_standin)
    q, k, v, beta, s0 = _inputs(t=20)
    o, s = fla.fla_delta_rule(q, k, v, beta, s0.double(), True)
    o_ref, s_ref = delta_rule(q, k, v, beta, initial_state=s0, output_final_state=True)
    torch.testing.assert_close(o, o_ref, rtol=1e-4, atol=1e-5)
    assert s.dtype == torch.float32
    torch.testing.assert_close(s, s_ref, rtol=1e-4, atol=1e-5)
    o, s = fla.fla_linear_attention(q, k, v, None, False)
    assert s is None
    torch.testing.assert_close(o, linear_attention(q, k, v)[0], rtol=1e-4, atol=1e-4)


def test_cpu_calls_never_go_to_fla(monkeypatch):
    monkeypatch.setenv("FASTWEIGHTS_FLA", "1")
    q = torch.randn(1, 3, 1, 4, dtype=torch.bfloat16)
    assert not fla.enabled(q)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_dispatch_equals_the_library_op(monkeypatch):
    q, k, v, beta, s0 = (x.cuda() for x in _inputs(t=130, dk=64, dv=64))
    half = [x.to(torch.bfloat16) for x in (q, k, v, beta)]
    monkeypatch.setenv("FASTWEIGHTS_FLA", "0")
    ref = delta_rule(*half, initial_state=s0, output_final_state=True)
    monkeypatch.setenv("FASTWEIGHTS_FLA", "1")
    assert fla.enabled(half[0])
    out = delta_rule(*half, initial_state=s0, output_final_state=True)
    torch.testing.assert_close(out[0].float(), ref[0].float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out[1], ref[1], rtol=2e-2, atol=2e-2)
