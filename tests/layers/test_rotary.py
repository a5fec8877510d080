"""Rotary position embedding: the shared helper and ``SoftmaxAttentionLayer(rope=True)``."""

from __future__ import annotations

import math

import pytest
import torch

from fastweights.layers import SequenceLayer, SoftmaxAttentionLayer
from fastweights.layers.rotary import apply_rotary, rotary_tables

D, H, E, T = 12, 3, 4, 20


def _layer(theta=10000.0):
    # a small theta makes every channel pair turn visibly over a 20-token sequence
    return SoftmaxAttentionLayer(D, H, rope=True, rope_theta=theta).double().eval()


def _x(b=2, t=T):
    return torch.randn(b, t, D, dtype=torch.float64)


def _leaf_state(layer, t=5):
    with torch.no_grad():
        _, (k, v) = layer(_x(t=t))
    return k.clone().requires_grad_(True), v.clone().requires_grad_(True)


def _rotation_matrix(m, dim, theta):
    """Explicit ``[dim, dim]`` RoPE matrix of position ``m``, half-split pairs ``(p, p + dim/2)``."""
    r = torch.zeros(dim, dim, dtype=torch.float64)
    h = dim // 2
    for p in range(h):
        a = m * theta ** (-2 * p / dim)
        r[p, p], r[p, p + h], r[p + h, p], r[p + h, p + h] = (
            math.cos(a),
            -math.sin(a),
            math.sin(a),
            math.cos(a),
        )
    return r


# ----------------------------------------------------------------------------- the helper


def test_tables_and_rotation_on_a_hand_computed_example():
    cos, sin = rotary_tables(torch.tensor([0, 1, 2]), 4, theta=100.0, dtype=torch.float64)
    angles = torch.tensor([[0.0, 0.0], [1.0, 0.1], [2.0, 0.2]], dtype=torch.float64)  # m * 100^(-2p/4)
    torch.testing.assert_close(cos, angles.cos(), rtol=0, atol=1e-15)
    torch.testing.assert_close(sin, angles.sin(), rtol=0, atol=1e-15)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    c1, s1, c2, s2 = math.cos(1.0), math.sin(1.0), math.cos(0.1), math.sin(0.1)
    inter = apply_rotary(x, cos[1], sin[1], interleaved=True)  # pairs (x0, x1) by 1, (x2, x3) by 0.1
    expected = [c1 - 2 * s1, 2 * c1 + s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2]
    torch.testing.assert_close(inter, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-15)
    half = apply_rotary(x, cos[1], sin[1], interleaved=False)  # pairs (x0, x2) by 1, (x1, x3) by 0.1
    expected = [c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + s1, 4 * c2 + 2 * s2]
    torch.testing.assert_close(half, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-15)
    for interleaved in (True, False):  # position 0 is the identity
        assert torch.equal(apply_rotary(x, cos[0], sin[0], interleaved=interleaved), x)


def test_float32_tables_are_the_hf_rotary_tables():
    cos, sin = rotary_tables(torch.arange(7), 8, theta=500.0)
    inv_freq = 1.0 / (500.0 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
    freqs = torch.arange(7, dtype=torch.float32)[:, None] * inv_freq[None, :]
    assert cos.dtype == torch.float32 and torch.equal(cos, freqs.cos()) and torch.equal(sin, freqs.sin())


def test_conventions_differ_by_a_channel_permutation_and_preserve_norms():
    x = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    cos, sin = rotary_tables(torch.arange(5), 8, theta=10.0, dtype=torch.float64)
    cos, sin = cos[:, None], sin[:, None]  # [T, 1, D/2] against [B, T, H, D]
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # [even..., odd...]: interleaved pairs -> half-split pairs
    inter = apply_rotary(x, cos, sin, interleaved=True)
    half = apply_rotary(x[..., perm], cos, sin, interleaved=False)
    torch.testing.assert_close(half, inter[..., perm], rtol=0, atol=1e-15)
    torch.testing.assert_close(inter.norm(dim=-1), x.norm(dim=-1), rtol=0, atol=1e-14)
    torch.testing.assert_close(half.norm(dim=-1), x.norm(dim=-1), rtol=0, atol=1e-14)


def test_helper_errors():
    cos, sin = rotary_tables(torch.arange(3), 4)
    with pytest.raises(ValueError, match="even last dimension"):
        apply_rotary(torch.zeros(3, 5), cos, sin, interleaved=False)
    with pytest.raises(ValueError, match="same shape"):
        apply_rotary(torch.zeros(3, 4), cos, sin[:2], interleaved=False)
    with pytest.raises(ValueError, match="broadcastable"):
        apply_rotary(torch.zeros(2, 4), cos, sin, interleaved=True)
    with pytest.raises(ValueError, match="dim: expected a positive even"):
        rotary_tables(torch.arange(3), 5)
    with pytest.raises(ValueError, match="theta: expected > 0"):
        rotary_tables(torch.arange(3), 4, theta=0.0)
    with pytest.raises(ValueError, match="d_model: expected an even head dim"):
        SoftmaxAttentionLayer(9, 3, rope=True)
    with pytest.raises(ValueError, match="rope_theta"):
        SoftmaxAttentionLayer(12, 3, rope=True, rope_theta=-1.0)


# ----------------------------------------------------------------------------- the attention layer


def test_rope_layer_matches_explicit_rotation_matrices():
    layer = _layer(theta=50.0)
    x = _x(t=7)
    q, k, v = layer.projections(x)  # [B, H, T, E], not rotated
    rot = torch.stack([_rotation_matrix(m, E, 50.0) for m in range(7)])  # [T, E, E]
    qr, kr = torch.einsum("tef,bhtf->bhte", rot, q), torch.einsum("tef,bhtf->bhte", rot, k)
    scores = (qr @ kr.transpose(-1, -2)) / math.sqrt(E)
    scores = scores.masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(scores, -1) @ v
    out, (kc, vc) = layer(x)
    torch.testing.assert_close(
        out, x + layer.out_linear(o.transpose(1, 2).reshape(2, 7, D)), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(kc, kr, rtol=0, atol=1e-13)  # the cache holds rotated keys
    torch.testing.assert_close(vc, v, rtol=0, atol=0)


def test_rope_makes_order_matter_and_off_is_position_free():
    x = _x(t=6)
    x_swapped = x[:, [1, 0, 2, 3, 4, 5]]  # swap two tokens of the prefix of the last query
    with_rope = _layer(theta=10.0)
    without = SoftmaxAttentionLayer(D, H).double().eval()
    without.load_state_dict(with_rope.state_dict())  # RoPE adds no parameters
    torch.testing.assert_close(without(x)[0][:, -1], without(x_swapped)[0][:, -1], rtol=0, atol=1e-13)
    assert (with_rope(x)[0][:, -1] - with_rope(x_swapped)[0][:, -1]).abs().max() > 1e-4
    assert (with_rope(x)[0] - without(x)[0])[:, 1:].abs().max() > 1e-4  # token 0 is at position 0


@pytest.mark.parametrize("shift", [3, 37, 250])
def test_attention_depends_only_on_relative_positions(shift):
    layer = _layer(theta=100.0)
    q, k, v = layer.projections(_x(t=9))
    pos = torch.arange(9)
    scores = layer.rotate(q, pos) @ layer.rotate(k, pos).transpose(-1, -2)
    shifted = layer.rotate(q, pos + shift) @ layer.rotate(k, pos + shift).transpose(-1, -2)
    torch.testing.assert_close(shifted, scores, rtol=0, atol=1e-11)
    o = layer._attend(layer.rotate(q, pos), layer.rotate(k, pos), v, None)
    o_shifted = layer._attend(layer.rotate(q, pos + shift), layer.rotate(k, pos + shift), v, None)
    torch.testing.assert_close(o_shifted, o, rtol=0, atol=1e-11)
    # q_m . k_n = q . R_{n-m} k: rotating only the key by the offset gives the same scores
    k_pairs = k.unsqueeze(2).expand(-1, -1, 9, -1, -1)  # [B, H, Tq, Tk, E]
    offsets = layer.rotate(k_pairs, pos[None, :] - pos[:, None])
    direct = torch.einsum("bhqe,bhqke->bhqk", q, offsets)
    torch.testing.assert_close(direct, scores, rtol=0, atol=1e-11)
    torch.testing.assert_close(layer.rotate(q, pos + shift).norm(dim=-1), q.norm(dim=-1), rtol=0, atol=1e-13)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("split", [1, 7, 16, T - 1])
def test_carried_state_equals_one_call_with_gradients(split, with_state):
    layer = _layer(theta=100.0)
    s0 = _leaf_state(layer) if with_state else None
    x = _x().requires_grad_(True)
    out, state = layer(x, s0)
    out_a, s_a = layer(x[:, :split], s0)
    out_b, s_b = layer(x[:, split:], s_a)
    out2 = torch.cat([out_a, out_b], 1)
    torch.testing.assert_close(out2, out, rtol=0, atol=1e-12)
    for a, b in zip(s_b, state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    tensors = [x, *(s0 or ()), *layer.parameters()]

    def loss(o, s):
        return o.square().sum() + s[0].sin().sum() + s[1].sum()

    g1 = torch.autograd.grad(loss(out, state), tensors)
    g2 = torch.autograd.grad(loss(out2, s_b), tensors)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


@pytest.mark.parametrize("prefill", [0, 1, 15, 16, 17])
def test_prefill_then_token_by_token_decode_equals_full_forward(prefill):
    layer = _layer(theta=100.0)
    x = _x()
    with torch.no_grad():
        full, full_state = layer(x)
        out, state = layer(x[:, :prefill])
        outs = [out]
        for t in range(prefill, T):
            out, state = layer(x[:, t : t + 1], state)
            outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-12)
    for a, b in zip(state, full_state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("with_state", [False, True])
def test_read_and_forward_with_reads_equal_the_generic_per_step_versions(with_state):
    layer = _layer(theta=10.0)
    s0 = _leaf_state(layer, t=6) if with_state else None
    queries = _x(t=5)
    fast = layer.read(queries, s0)
    torch.testing.assert_close(fast, SequenceLayer.read(layer, queries, s0), rtol=0, atol=1e-12)
    x, x_read = _x(t=7), _x(t=7)
    out, out_read, fs = layer.forward_with_reads(x, x_read, s0)
    ref_out, ref_read, ref_fs = SequenceLayer.forward_with_reads(layer, x, x_read, s0)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-12)
    torch.testing.assert_close(out_read, ref_read, rtol=0, atol=1e-12)
    for a, b in zip(fs, ref_fs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    tensors = [*(s0 or ()), *layer.parameters()]
    g1 = torch.autograd.grad(out_read.square().sum() + fast.sum(), tensors)
    g2 = torch.autograd.grad(ref_read.square().sum() + SequenceLayer.read(layer, queries, s0).sum(), tensors)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_packed_sequences_each_start_at_position_zero():
    layer = _layer(theta=10.0)
    x = _x(b=1, t=11)
    cu = torch.tensor([0, 4, 11])
    out, states = layer(x, cu_seqlens=cu)
    for n in range(2):
        ref, ref_state = layer(x[:, cu[n] : cu[n + 1]])
        torch.testing.assert_close(out[:, cu[n] : cu[n + 1]], ref, rtol=0, atol=1e-12)
        for a, b in zip(states[n], ref_state, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_rope_under_autocast_keeps_state_float32():
    layer = SoftmaxAttentionLayer(D, H, rope=True)
    x = torch.randn(2, 5, D)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, s = layer(x)
        out, s2 = layer(x, s)
    assert all(z.dtype == torch.float32 for z in (*s, *s2)) and torch.isfinite(out).all()
    assert s2[0].shape == (2, H, 10, E)
