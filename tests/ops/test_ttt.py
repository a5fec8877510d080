from __future__ import annotations

import pytest
import torch

from fastweights.ops import ttt_linear, ttt_linear_reference, ttt_mlp, ttt_mlp_reference
from fastweights.ops.ttt import ttt_current_weights, ttt_initial_state

F64 = torch.float64
MBS = 16


def _case(mlp, b=1, t=5, h=2, d=4, mbs=MBS, dtype=F64):
    g = torch.Generator().manual_seed(1000 + t)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    q, k, v = r(b, t, h, d), r(b, t, h, d), r(b, t, h, d)
    lr = torch.sigmoid(r(b, t, h)) / d
    s = (1.0 / torch.arange(1, mbs + 1, dtype=dtype) + 0.02 * r(mbs)).clamp_min(0.0)
    hid = 4 * d if mlp else d
    params = {"W1": 0.3 * r(h, d, hid), "b1": 0.1 * r(h, 1, hid)}
    if mlp:
        params.update(W2=0.3 * r(h, hid, d), b2=0.1 * r(h, 1, d))
    ln = (1 + 0.1 * r(h, d), 0.1 * r(h, d))
    return [q, k, v, lr, s], params, ln


def _random_state(params, b, offset, seed=7):
    g = torch.Generator().manual_seed(seed)
    state = {"offset": offset}
    for n, p in params.items():
        state[f"{n}_states"] = p.unsqueeze(0) + 0.05 * torch.randn(b, *p.shape, generator=g, dtype=p.dtype)
        state[f"{n}_grad"] = 0.05 * torch.randn(b, *p.shape, generator=g, dtype=p.dtype) * (offset > 0)
    return state


def _call(op, inputs, params, ln, state=None, **kw):
    return op(*inputs, *params.values(), *ln, initial_state=state, output_final_state=True, **kw)


def _tensors(state):
    return [state[k] for k in sorted(state) if k != "offset"]


@pytest.mark.parametrize("t", [1, 15, 16, 17, 37, 64, 257])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("mlp", [False, True])
def test_dual_equals_per_token_reference_fp64(t, with_state, mlp):
    inputs, params, ln = _case(mlp, t=t)
    state = _random_state(params, 1, offset=3) if with_state else None
    leaves = inputs + list(params.values()) + list(ln) + (_tensors(state) if state else [])
    for z in leaves:
        z.requires_grad_(True)
    fast, ref = (ttt_mlp, ttt_mlp_reference) if mlp else (ttt_linear, ttt_linear_reference)
    kw = {"exact_gelu_grad": True} if mlp else {}
    o0, s0 = _call(fast, inputs, params, ln, state, **kw)
    o1, s1 = _call(ref, inputs, params, ln, state)
    assert s0["offset"] == s1["offset"] == (t + (3 if with_state else 0)) % MBS
    torch.testing.assert_close(o0, o1, rtol=0, atol=1e-12)
    for a, b in zip(_tensors(s0), _tensors(s1), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    go = torch.randn(o0.shape, dtype=F64)
    gs = [torch.randn(z.shape, dtype=F64) for z in _tensors(s0)]

    def grads(o, s):
        loss = (o * go).sum() + sum((a * g).sum() for a, g in zip(_tensors(s), gs, strict=True))
        return torch.autograd.grad(loss, leaves, allow_unused=True)

    for a, b in zip(grads(o0, s0), grads(o1, s1), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_mlp_reference_gelu_constants_differ_only_slightly():
    inputs, params, ln = _case(True, t=20)
    o0, _ = _call(ttt_mlp, inputs, params, ln)
    o1, _ = _call(ttt_mlp, inputs, params, ln, exact_gelu_grad=True)
    err = (o0 - o1).abs().max().item()
    assert 0 < err < 1e-7


@pytest.mark.parametrize("mlp", [False, True])
@pytest.mark.parametrize("splits", [(16, 16, 5), (1, 20, 16), (15, 2, 20), (7, 1, 1, 1, 27)])
def test_carried_state_equals_one_call(mlp, splits):
    inputs, params, ln = _case(mlp, b=2, t=37)
    op = ttt_mlp if mlp else ttt_linear
    o_full, s_full = _call(op, inputs, params, ln)
    outs, state, start = [], None, 0
    for n in splits:
        piece = [x[:, start : start + n] for x in inputs[:4]] + [inputs[4]]
        o, state = _call(op, piece, params, ln, state)
        outs.append(o)
        start += n
    torch.testing.assert_close(torch.cat(outs, 1), o_full, rtol=0, atol=1e-13)
    assert state["offset"] == s_full["offset"] == 5
    for a, b in zip(_tensors(state), _tensors(s_full), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)


def test_remainder_state_and_current_weights():
    # after 16 + 16 + 5 tokens: boundary weights after token 32, gradient sums of the last 5 tokens,
    # and the weights the last token was read with use s_5 (the remainder mini-batch's state is its last
    # position's weights, as in ttt-lm-pytorch)
    inputs, params, ln = _case(False, t=37)
    _, s = _call(ttt_linear, inputs, params, ln)
    _, s32 = _call(ttt_linear, [x[:, :32] for x in inputs[:4]] + [inputs[4]], params, ln)
    assert s32["offset"] == 0 and float(s32["W1_grad"].abs().max()) == 0.0
    torch.testing.assert_close(s["W1_states"], s32["W1_states"], rtol=0, atol=0)
    cur = ttt_current_weights(s, inputs[4])
    torch.testing.assert_close(cur["b1"], s["b1_states"] - inputs[4][4] * s["b1_grad"])
    assert ttt_current_weights(s32, inputs[4])["W1"] is s32["W1_states"]


def test_zero_learning_rate_reads_the_slow_weights():
    inputs, params, ln = _case(False, t=9)
    inputs[3] = torch.zeros_like(inputs[3])
    o, s = _call(ttt_linear, inputs, params, ln)
    q = inputs[0].transpose(1, 2)
    z = q @ params["W1"] + params["b1"]
    z = torch.nn.functional.layer_norm(z, (4,), eps=1e-6) * ln[0][:, None] + ln[1][:, None]
    torch.testing.assert_close(o, (q + z).transpose(1, 2), rtol=0, atol=1e-14)
    torch.testing.assert_close(s["W1_states"][0], params["W1"])


@pytest.mark.parametrize("mlp", [False, True])
def test_gradcheck_dual_form_tiny(mlp):
    inputs, params, ln = _case(mlp, t=6, h=1, d=2, mbs=4)
    leaves = inputs + list(params.values()) + list(ln)
    op = ttt_mlp if mlp else ttt_linear

    def f(*args):
        o, s = op(*args, output_final_state=True)
        return o, *_tensors(s)

    leaves = [z.clone().requires_grad_(True) for z in leaves]
    assert torch.autograd.gradcheck(f, leaves, eps=1e-6, atol=1e-6)


def test_initial_state_helper_and_half_precision():
    inputs, params, ln = _case(False, t=17)
    st = ttt_initial_state(params, 1)
    o0, _ = _call(ttt_linear, inputs, params, ln, st)
    o1, _ = _call(ttt_linear, inputs, params, ln)
    torch.testing.assert_close(o0, o1, rtol=0, atol=0)
    half = [x.to(torch.bfloat16) for x in inputs[:4]] + [inputs[4]]
    o, s = _call(ttt_linear, half, params, ln)
    assert o.dtype == torch.bfloat16 and s["W1_states"].dtype == torch.float32


def test_bad_inputs_name_the_argument():
    inputs, params, ln = _case(False, t=5)
    q, k, v, lr, s = inputs

    def call(**over):
        a = {
            "q": q,
            "k": k,
            "v": v,
            "lr": lr,
            "token_scale": s,
            **params,
            "ln_weight": ln[0],
            "ln_bias": ln[1],
        }
        state = over.pop("initial_state", None)
        a.update(over)
        return ttt_linear(**a, initial_state=state)

    with pytest.raises(ValueError, match=r"q: expected a 4-D tensor"):
        call(q=q[0])
    with pytest.raises(ValueError, match=r"k: expected shape"):
        call(k=k[:, :2])
    with pytest.raises(ValueError, match=r"lr: expected shape \[B, T, H\]"):
        call(lr=lr[..., None])
    with pytest.raises(ValueError, match=r"token_scale: expected a 1-D"):
        call(token_scale=s[None])
    with pytest.raises(ValueError, match=r"W1: expected shape \[2, 4, 4\]"):
        call(W1=params["W1"][:, :3])
    with pytest.raises(ValueError, match=r"ln_weight: expected shape"):
        call(ln_weight=ln[0][0])
    with pytest.raises(ValueError, match=r"v: expected dtype"):
        call(v=v.float())
    with pytest.raises(ValueError, match=r"q: expected finite"):
        call(q=torch.full_like(q, float("nan")))
    with pytest.raises(ValueError, match=r"initial_state: expected an int 'offset'"):
        call(initial_state={**ttt_initial_state(params, 1), "offset": 16})
    with pytest.raises(ValueError, match=r"initial_state: expected 'W1_grad'"):
        st = ttt_initial_state(params, 1)
        del st["W1_grad"]
        call(initial_state=st)
