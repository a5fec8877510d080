"""The block form around every sequence layer's core (``block="native"`` | ``"pre_ln"``).

Each layer's documented formula is rebuilt here by hand from the layer's own submodules (its norm, its
``core`` and its output projection) and compared with the layer's output in float64; with
``block="pre_ln"`` two different layers whose cores are replaced by the same function compute the same
output, so swapping the layer changes only the core.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from fastweights.layers import (
    BLOCK_FORMS,
    SEQUENCE_LAYERS,
    SequenceLayer,
    SRWMLayer,
    TTTLinearLayer,
    TTTMLPLayer,
    make_sequence_layer,
)
from tests.conftest import state_tensors

F64 = torch.float64
D, H = 8, 2

# the layers under test: the registry's, plus constructor variants whose block differs
LAYERS: dict[str, Callable[..., SequenceLayer]] = {
    **{name: (lambda name=name, **kw: make_sequence_layer(name, D, H, **kw)) for name in SEQUENCE_LAYERS},
    "srwm_input_softmax": lambda **kw: SRWMLayer(D, H, use_input_softmax=True, **kw),
    "ttt_linear_bare": lambda **kw: TTTLinearLayer(D, H, mini_batch_size=4, **kw),
    "ttt_mlp_mamba": lambda **kw: TTTMLPLayer(D, H, mini_batch_size=4, share_qk=True, use_gate=True, **kw),
}

Formula = Callable[[SequenceLayer, Tensor, Callable[[Tensor], Tensor]], Tensor]


def _pre_ln(layer, x, core):  # x + W_o · core(LN(x)), W_o = out_linear
    return x + layer.out_linear(core(layer.layer_norm(x)))


def _pre_ln_ttt(layer, x, core):  # x + W_o · core(LN(x)), W_o = o_proj
    return x + layer.o_proj(core(layer.layer_norm(x)))


# (layer, form) → the documented block around the core, written out by hand
FORMULAS: dict[tuple[str, str], Formula] = {
    ("srwm", "native"): lambda layer, x, core: layer.layer_norm(x) + layer.out_linear(core(x)),
    ("srwm", "pre_ln"): _pre_ln,
    ("srwm_input_softmax", "native"): lambda layer, x, core: layer.layer_norm(x) + layer.out_linear(core(x)),
    ("srwm_input_softmax", "pre_ln"): _pre_ln,
    ("deltanet", "native"): _pre_ln,
    ("deltanet", "pre_ln"): _pre_ln,
    ("sr_deltanet", "native"): lambda layer, x, core: x + layer.out_linear(core(x)),
    ("sr_deltanet", "pre_ln"): _pre_ln,
    ("linear_attention", "native"): _pre_ln,
    ("linear_attention", "pre_ln"): _pre_ln,
    ("softmax_attention", "native"): _pre_ln,
    ("softmax_attention", "pre_ln"): _pre_ln,
    ("lstm", "native"): lambda layer, x, core: x + core(layer.layer_norm(x)),
    ("lstm", "pre_ln"): _pre_ln,
    ("ttt_linear", "native"): lambda layer, x, core: x + layer.o_proj(core(layer.seq_norm(x))),
    ("ttt_linear", "pre_ln"): _pre_ln_ttt,
    ("ttt_mlp", "native"): lambda layer, x, core: x + layer.o_proj(core(layer.seq_norm(x))),
    ("ttt_mlp", "pre_ln"): _pre_ln_ttt,
    ("ttt_linear_bare", "native"): lambda layer, x, core: layer.o_proj(core(x)),
    ("ttt_linear_bare", "pre_ln"): _pre_ln_ttt,
    ("ttt_mlp_mamba", "native"): lambda layer, x, core: layer.o_proj(core(x)),
    ("ttt_mlp_mamba", "pre_ln"): _pre_ln_ttt,
}

# state dict keys that the uniform form adds to (+) or removes from (-) the native form
KEY_CHANGES: dict[str, tuple[set[str], set[str]]] = {
    "srwm": (set(), set()),
    "srwm_input_softmax": (set(), set()),
    "deltanet": (set(), set()),
    "linear_attention": (set(), set()),
    "softmax_attention": (set(), set()),
    "sr_deltanet": ({"layer_norm.weight", "layer_norm.bias"}, set()),
    "lstm": ({"out_linear.weight"}, set()),
    "ttt_linear": ({"layer_norm.weight", "layer_norm.bias"}, {"seq_norm.weight"}),
    "ttt_mlp": ({"layer_norm.weight", "layer_norm.bias"}, {"seq_norm.weight"}),
    "ttt_linear_bare": ({"layer_norm.weight", "layer_norm.bias"}, set()),
    "ttt_mlp_mamba": ({"layer_norm.weight", "layer_norm.bias"}, set()),
}


def _layer(name: str, block: str, seed: int = 0) -> SequenceLayer:
    torch.manual_seed(seed)
    layer = LAYERS[name](block=block).to(F64).eval()
    with torch.no_grad():  # norms away from their (1, 0) init, so a norm that is skipped shows
        for module in layer.modules():
            if isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                module.weight.uniform_(0.5, 1.5)
                if getattr(module, "bias", None) is not None:
                    module.bias.uniform_(-0.5, 0.5)
    return layer


def _x(t: int = 9, b: int = 2, seed: int = 1) -> Tensor:
    return torch.randn(b, t, D, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_every_layer_and_form_has_a_formula():
    assert set(FORMULAS) == {(name, form) for name in LAYERS for form in BLOCK_FORMS}
    assert set(KEY_CHANGES) == set(LAYERS)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("form", BLOCK_FORMS)
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_block_output_equals_its_formula_around_the_core(name, form, with_state):
    """``layer(x, state)`` is the documented formula of the form, rebuilt from the layer's norm, core and
    output projection (exactly, in float64), and the state is the core's."""
    layer = _layer(name, form)
    assert layer.block == form
    x = _x()
    with torch.no_grad():
        state = layer(_x(t=5, seed=2))[1] if with_state else None
        out, new_state = layer(x, state)
        core_states = []

        def core(h: Tensor) -> Tensor:
            c, s = layer.core(h, state)
            core_states.append(s)
            assert c.shape == h.shape
            return c

        expected = FORMULAS[name, form](layer, x, core)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    for a, b in zip(state_tensors(new_state), state_tensors(core_states[0]), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_native_is_the_default_and_the_forms_differ_where_documented(name):
    """``block`` defaults to ``"native"``; the uniform form changes the state dict keys only as
    documented (the native keys are the layer's keys from before the option existed) and, where the
    native form is not already the uniform one, the output."""
    default = LAYERS[name]()
    assert default.block == "native"
    native, uniform = _layer(name, "native"), _layer(name, "pre_ln")
    assert list(default.state_dict()) == list(native.state_dict())
    added, removed = KEY_CHANGES[name]
    assert set(uniform.state_dict()) == (set(native.state_dict()) | added) - removed
    same_form = FORMULAS[name, "native"] is FORMULAS[name, "pre_ln"]
    assert same_form == (not added and not removed and name not in ("srwm", "srwm_input_softmax"))
    if not added and not removed:  # same parameters: load one into the other
        uniform.load_state_dict(native.state_dict())
        x = _x()
        with torch.no_grad():
            differ = (uniform(x)[0] - native(x)[0]).abs().max() > 1e-6
        assert differ == (not same_form)


def test_uniform_form_modules_are_the_same_for_every_layer():
    for name in LAYERS:
        layer = LAYERS[name](block="pre_ln", dropout=0.25)
        norm, proj = layer.layer_norm, layer.output_projection
        assert type(norm) is nn.LayerNorm and norm.normalized_shape == (D,) and norm.eps == 1e-5, name
        assert norm.elementwise_affine and norm.bias is not None, name
        assert type(proj) is nn.Linear and (proj.in_features, proj.out_features) == (D, D), name
        assert proj.bias is None, name
        assert layer.dropout.p == 0.25, name


def _same_wrapper(layer: SequenceLayer, ref: SequenceLayer) -> SequenceLayer:
    """``layer`` with ``ref``'s norm and output projection, and a core replaced by one fixed function."""
    with torch.no_grad():  # the native forms may lack either (SR-Delta, TTT: no LayerNorm; LSTM: no W_o)
        if hasattr(layer, "layer_norm"):
            layer.layer_norm.load_state_dict(ref.layer_norm.state_dict())
        if hasattr(layer, "output_projection"):
            layer.output_projection.weight.copy_(ref.output_projection.weight)

    def core(h: Tensor, state=None, **_: object) -> tuple[Tensor, object]:
        return torch.tanh(h) * torch.arange(1, D + 1, dtype=h.dtype), state

    layer.core = core  # an instance attribute: forward_unpacked calls it in place of the class's core
    return layer


def test_uniform_form_is_the_same_wrapper_around_every_core():
    """With ``block="pre_ln"``, layers whose cores are replaced by the same function (and whose norm and
    ``W_o`` hold the same values) give identical outputs: the layers differ only in their cores. Their
    native forms, with the same replacement, do not all agree."""
    x = _x()
    ref = _layer("deltanet", "pre_ln", seed=3)
    with torch.no_grad():
        uniform = {name: _same_wrapper(_layer(name, "pre_ln"), ref)(x)[0] for name in LAYERS}
        native = {name: _same_wrapper(_layer(name, "native"), ref)(x)[0] for name in LAYERS}
        expected = x + ref.out_linear(torch.tanh(ref.layer_norm(x)) * torch.arange(1, D + 1, dtype=F64))
    for name, out in uniform.items():
        torch.testing.assert_close(out, expected, rtol=0, atol=0, msg=name)
    assert any((out - expected).abs().max() > 1e-3 for out in native.values())
    torch.testing.assert_close(native["deltanet"], expected, rtol=0, atol=0)  # pre-LN natively


# ----------------------------------------------------------------------------- the uniform form's contract


def _one_step(layer: SequenceLayer, x: Tensor, state) -> Tensor:
    """Every position of ``x [B, Q, D]`` as its own one-step call from ``state`` (updates discarded)."""
    return torch.cat([layer(x[:, i : i + 1], state)[0] for i in range(x.shape[1])], dim=1)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_uniform_form_carries_state_and_reads_exactly(name):
    """With ``block="pre_ln"``: two calls with the state carried equal one call, token-by-token decode
    too, and the layers' own ``read`` / ``forward_with_reads`` equal one-step calls of the block."""
    layer = _layer(name, "pre_ln")
    x, x_read = _x(t=11), _x(t=11, seed=4)
    with torch.no_grad():
        full, full_state = layer(x)
        a, s = layer(x[:, :6])
        b, s = layer(x[:, 6:], s)
        torch.testing.assert_close(torch.cat([a, b], 1), full, rtol=0, atol=1e-10)
        for u, w in zip(state_tensors(s), state_tensors(full_state), strict=True):
            torch.testing.assert_close(u, w, rtol=0, atol=1e-10)
        torch.testing.assert_close(
            layer.read(x_read[:, :4], s), _one_step(layer, x_read[:, :4], s), rtol=0, atol=1e-10
        )
        out, reads, _ = layer.forward_with_reads(x[:, :5], x_read[:, :5], s)
        state, expected = s, []
        for t in range(5):
            expected.append(layer(x_read[:, t : t + 1], state)[0])
            state = layer(x[:, t : t + 1], state)[1]
        torch.testing.assert_close(out, layer(x[:, :5], s)[0], rtol=0, atol=1e-10)
        torch.testing.assert_close(reads, torch.cat(expected, 1), rtol=0, atol=1e-10)
        empty, empty_state = layer(x[:, :0], s)
    assert empty.shape == (2, 0, D)
    for u, w in zip(state_tensors(empty_state), state_tensors(s), strict=True):
        torch.testing.assert_close(u, w.to(u.dtype), rtol=0, atol=0)


@pytest.mark.parametrize("input_softmax", [False, True])
def test_uniform_srwm_resets_equal_calls_between_resets(input_softmax):
    """``SRWMLayer.forward_with_resets`` (the RL cores' one-call form) in the uniform form equals
    ``forward`` on each stretch between resets with the weights set back to the slow weights."""
    layer = _layer("srwm_input_softmax" if input_softmax else "srwm", "pre_ln")
    x = _x(t=10, b=3)
    reset = torch.zeros(3, 10, dtype=torch.bool)
    reset[0, 4] = reset[1, 0] = reset[1, 7] = reset[2, 2] = reset[2, 3] = True
    with torch.no_grad():
        out, final = layer.forward_with_resets(x, None, reset)
        for b in range(3):
            starts = [0] + [t for t in range(1, 10) if reset[b, t]] + [10]
            pieces = []
            for lo, hi in zip(starts[:-1], starts[1:], strict=True):
                y, state = layer(x[b : b + 1, lo:hi])  # every stretch starts from the slow weights
                pieces.append(y)
            torch.testing.assert_close(out[b : b + 1], torch.cat(pieces, 1), rtol=0, atol=1e-10)
            torch.testing.assert_close(final[b : b + 1], state, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_uniform_form_under_autocast_keeps_float32_states(name):
    layer = LAYERS[name](block="pre_ln").eval()
    x = torch.randn(2, 7, D)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, state = layer(x)
    floats = [z for z in state_tensors(state) if z.is_floating_point()]
    assert floats and all(z.dtype == torch.float32 for z in floats)
    assert torch.isfinite(out.float()).all()


# ----------------------------------------------------------------------------- errors and the registry


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("bad", ["post_ln", "pre-ln", None, 1])
def test_unknown_block_names_the_option_the_forms_and_the_value(name, bad):
    with pytest.raises(ValueError, match=rf"^block: expected one of \['native', 'pre_ln'\], got {bad!r}$"):
        LAYERS[name](block=bad)


def test_ttt_residual_belongs_to_the_native_form():
    """``make_sequence_layer`` gives the TTT layers ``residual=True`` in the native form only; asking for
    the native RMSNorm residual with the uniform form is an error."""
    for name in ("ttt_linear", "ttt_mlp"):
        assert make_sequence_layer(name, D, H).residual
        uniform = make_sequence_layer(name, D, H, block="pre_ln")
        assert not uniform.residual and not hasattr(uniform, "seq_norm")
    assert make_sequence_layer("ttt_mlp", D, H, block="pre_ln").ttt_base_lr == 0.1  # the other defaults stay
    with pytest.raises(ValueError, match=r"^residual: expected False with block='pre_ln'.*got True$"):
        make_sequence_layer("ttt_linear", D, H, block="pre_ln", residual=True)
    with pytest.raises(ValueError, match=r"^block: expected one of \['native', 'pre_ln'\], got 'x'$"):
        make_sequence_layer("ttt_linear", D, H, block="x")
