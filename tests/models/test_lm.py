from __future__ import annotations

import json
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastweights.models.convert import lm_from_reference
from fastweights.models.lm import CausalLM, LMBackbone, LMCache, LMConfig, generate
from tests.conftest import load_golden

# pure float64 vs the reference's fp32 RMSNorm islands: ~1e-7 relative (tests/golden/README.md)
RTOL = 2e-6


def _golden_model(name):
    d = load_golden(f"ttt/ttt_model_{name}_M_2layer.pt")
    c = {k: v.item() for k, v in d["config"].items()}
    cfg = LMConfig(
        vocab_size=c["vocab_size"],
        d_model=c["hidden_size"],  # the reference's (Hugging Face) names → ours
        num_layers=c["num_hidden_layers"],
        num_heads=c["num_attention_heads"],
        d_ff=c["intermediate_size"],
        sequence_layer=f"ttt_{name}",
        backbone="mamba",
        mini_batch_size=c["mini_batch_size"],
        ttt_base_lr=c["ttt_base_lr"],
        rope_theta=c["rope_theta"],
        rms_norm_eps=c["rms_norm_eps"],
        conv_kernel=c["conv_kernel"],
    )
    model = LMBackbone(cfg).double()
    model.load_state_dict(lm_from_reference(d["state_dict"]))  # strict
    return model, d


def _close(ours, ref, rtol=RTOL):
    scale = float(ref.abs().max()) or 1.0
    assert float((ours.detach() - ref).abs().max()) <= rtol * scale


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_golden_model_outputs_and_gradients(name):
    model, d = _golden_model(name)
    x = d["inputs_embeds"].clone().requires_grad_(True)
    y, cache = model(inputs_embeds=x)
    _close(y, d["output"])
    assert cache.seen_tokens == x.shape[1]
    (y * d["grad_out_weight"]).sum().backward()
    _close(x.grad, d["grad_input"])
    params = dict(model.named_parameters())
    for ref_key, ref in lm_from_reference(d["grads"]).items():
        _close(params[ref_key].grad, ref, rtol=2e-5 if ref.abs().max() < 1e-3 else RTOL)
    assert params["embed_tokens.weight"].grad is None


@pytest.mark.parametrize("name", ["linear", "mlp"])
def test_golden_model_prefill_then_decode(name):
    model, d = _golden_model(name)
    dec, x = d["decode"], d["inputs_embeds"]
    n = int(dec["prefill_len"])
    with torch.no_grad():
        y, cache = model(inputs_embeds=x[:, :n])
        _close(y, dec["prefill_output"])
        outs = []
        for t in range(n, x.shape[1]):
            o, cache = model(inputs_embeds=x[:, t : t + 1], cache=cache)
            outs.append(o)
    _close(torch.cat(outs, 1), dec["decode_outputs"])
    ref = dec["cache_final"]
    for i, (layer_state, conv_state) in enumerate(cache.blocks):
        for key in ("W1_states", "W1_grad", "b1_states", "b1_grad"):
            _close(layer_state[key], ref[f"layer{i}.{key}"])
        _close(conv_state, ref[f"layer{i}.conv_state.pre_conv"])
        _close(layer_state["conv_qk"], ref[f"layer{i}.conv_state.ttt_conv_q"])


LAYERS = [
    ("ttt_linear", "mamba"),
    ("ttt_linear", "transformer"),
    ("ttt_mlp", "mamba"),
    ("softmax_attention", "transformer"),
    ("deltanet", "transformer"),
    ("srwm", "transformer"),
]


def _micro(layer, backbone, **kw):
    cfg = LMConfig.preset("micro", sequence_layer=layer, backbone=backbone, mini_batch_size=4, **kw)
    return CausalLM(cfg).double().eval()


@pytest.mark.parametrize("prompt", [1, 5, 9])
@pytest.mark.parametrize(("layer", "backbone"), LAYERS)
def test_prefill_then_decode_equals_full_forward(layer, backbone, prompt):
    torch.manual_seed(1)
    model = _micro(layer, backbone)
    ids = torch.randint(0, 256, (2, 14))
    with torch.no_grad():
        full, _ = model(ids)
        logits, cache = model(ids[:, :prompt])
        steps = [logits]
        for t in range(prompt, ids.shape[1]):
            logits, cache = model(ids[:, t : t + 1], cache)
            steps.append(logits)
    assert cache.seen_tokens == ids.shape[1]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)


def test_gradcheck_tiny_mamba_ttt_model():
    torch.manual_seed(2)
    model = LMBackbone(LMConfig.preset("micro", d_model=8, d_ff=8, mini_batch_size=2)).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: model(inputs_embeds=z)[0], (x,))


@pytest.mark.parametrize("tied", [True, False])
def test_save_pretrained_round_trip(tmp_path, tied):
    model = _micro("ttt_mlp", "mamba", tie_word_embeddings=tied).float()
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "fastweights_lm"
    loaded = CausalLM.from_pretrained(tmp_path)
    assert loaded.config == model.config
    ids = torch.randint(0, 256, (1, 7))
    torch.testing.assert_close(loaded(ids)[0], model(ids)[0], rtol=0, atol=0)
    assert (loaded.lm_head.weight is loaded.model.embed_tokens.weight) == tied


def test_from_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        CausalLM.from_pretrained(tmp_path)
    _micro("deltanet", "transformer").save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "d_model": 64}))
    with pytest.raises(ValueError, match="do not match"):
        CausalLM.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "d_modle": 64}))
    with pytest.raises(ValueError, match="unknown keys"):
        CausalLM.from_pretrained(tmp_path)


# ttt-lm-pytorch's TTT_STANDARD_CONFIGS: parameter counts of the reference model instantiated on the
# meta device with tied embeddings
PAPER_PARAMS = {
    ("125m", "ttt_linear"): 110.4e6,
    ("125m", "ttt_mlp"): 114.6e6,
    ("350m", "ttt_linear"): 337.7e6,
    ("760m", "ttt_mlp"): 758.5e6,
    ("1.3b", "ttt_linear"): 1285.6e6,
}


@pytest.mark.parametrize(("size", "layer"), list(PAPER_PARAMS))
def test_paper_presets_have_the_paper_parameter_counts(size, layer):
    with torch.device("meta"):
        model = CausalLM(LMConfig.preset(size, sequence_layer=layer))
    assert model.num_parameters() == pytest.approx(PAPER_PARAMS[size, layer], rel=1e-3)


def test_generate_greedy_and_seeded_sampling():
    model = _micro("ttt_linear", "mamba").float()
    prompt = torch.randint(0, 256, (2, 6))
    a = generate(model, prompt, 9, temperature=0)
    assert a.shape == (2, 15) and torch.equal(a[:, :6], prompt)
    assert torch.equal(a, generate(model, prompt, 9, temperature=0))
    # greedy continuation equals argmax of a full forward over the generated text
    full, _ = model(a[:, :-1])
    torch.testing.assert_close(full[:, 5:].argmax(-1), a[:, 6:], rtol=0, atol=0)
    s1 = generate(model, prompt, 9, top_k=5, generator=torch.Generator().manual_seed(3))
    s2 = generate(model, prompt, 9, top_k=5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(s1, s2)
    assert torch.equal(generate(model, prompt, 0), prompt)


def test_bad_inputs_name_the_argument():
    model = _micro("deltanet", "transformer")
    with pytest.raises(ValueError, match="input_ids"):
        model(torch.randn(2, 3))
    with pytest.raises(ValueError, match=r"token ids in \[0, 256\)"):
        model(torch.tensor([[0, 256]]))
    with pytest.raises(ValueError, match="cache"):
        model(torch.tensor([[1]]), cache=LMCache([], 0))
    with pytest.raises(ValueError, match="input_ids"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="backbone"):
        LMConfig(sequence_layer="deltanet", backbone="mamba").validate()
    with pytest.raises(ValueError, match="d_model"):
        LMConfig(d_model=30, num_heads=4).validate()
    with pytest.raises(ValueError, match="preset"):
        LMConfig.preset("7b")


@settings(max_examples=15, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 22), min_size=1, max_size=4),
    layer=st.sampled_from(["ttt_linear", "ttt_mlp", "softmax_attention"]),
)
def test_any_split_into_calls_equals_one_call(cuts, layer):
    """Calls of any lengths (starting mid mini-batch too) with the cache carried = one call."""
    torch.manual_seed(3)
    model = _micro(layer, "auto")
    ids = torch.randint(0, 256, (1, 23))
    bounds = sorted({0, 23, *cuts})
    with torch.no_grad():
        full, _ = model(ids)
        cache, parts = None, []
        for a, b in zip(bounds, bounds[1:], strict=False):
            logits, cache = model(ids[:, a:b], cache)
            parts.append(logits)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-10)


def test_cache_and_embedding_mismatches_raise_clear_errors():
    model = _micro("ttt_linear", "mamba")
    _, cache = model(torch.randint(0, 256, (2, 5)))
    with pytest.raises(ValueError, match=r"state: expected a conv state of shape \[B, C, k\]"):
        model(torch.randint(0, 256, (3, 1)), cache)  # another batch size
    other = CausalLM(LMConfig.preset("micro", conv_kernel=2, mini_batch_size=4)).double()
    _, cache2 = other(torch.randint(0, 256, (1, 5)))
    with pytest.raises(ValueError, match="state"):
        model(torch.randint(0, 256, (1, 1)), cache2)  # a cache of another model
    with pytest.raises(ValueError, match=r"x: expected a tensor of shape \[B, T, 32\]"):
        model.model(inputs_embeds=torch.randn(2, 5, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match="inputs_embeds: expected dtype torch.float64"):
        model.model(inputs_embeds=torch.randn(2, 5, 32))


def test_save_pretrained_keeps_the_dtype_and_rejects_a_tie_mismatch(tmp_path):
    model = _micro("deltanet", "transformer").to(torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    assert next(CausalLM.from_pretrained(tmp_path / "bf16").parameters()).dtype == torch.bfloat16
    loaded = CausalLM.from_pretrained(tmp_path / "bf16", dtype=torch.float32)
    assert next(loaded.parameters()).dtype == torch.float32
    _micro("deltanet", "transformer", tie_word_embeddings=False).save_pretrained(tmp_path / "untied")
    cfg = json.loads((tmp_path / "untied" / "config.json").read_text())
    (tmp_path / "untied" / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": True}))
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        CausalLM.from_pretrained(tmp_path / "untied")


def test_generate_checks_arguments_and_restores_the_mode():
    model = _micro("softmax_attention", "transformer").train()
    prompt = torch.randint(0, 256, (1, 3))
    with pytest.raises(ValueError, match="input_ids"):
        generate(model, torch.tensor([[300]]), 3)
    assert model.training
    for kwargs, name in (
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"max_new_tokens": 2, "top_k": True}, "top_k"),
        ({"max_new_tokens": 2, "temperature": float("inf")}, "temperature"),
    ):
        with pytest.raises(ValueError, match=name):
            generate(model, prompt, **kwargs)
    with pytest.raises(ValueError, match="input_ids"):
        generate(model, [[1, 2]], 2)
    # a temperature so small that logits / temperature overflow is greedy decoding (its limit)
    torch.testing.assert_close(
        generate(model, prompt, 4, temperature=1e-300), generate(model, prompt, 4, temperature=0)
    )
    assert generate(model, prompt.int(), 0).dtype == torch.int64


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("d_model", True),
        ("ttt_base_lr", -1.0),
        ("ttt_base_lr", "a"),
        ("tie_word_embeddings", "no"),
        ("rope_theta", float("inf")),
        ("dropout", "0.1"),
        ("layer_options", None),
        ("layer_options", {"mini_batch_size": 4}),
        ("layer_options", {"dropout": 0.1}),
        ("layer_options", {"ttt_linear": {"mini_batch_size": 4}}),
        ("layer_options", {"srwm": {}, "chunk_size": 8}),
    ],
)
def test_config_rejects_bad_fields_by_name(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        LMConfig(**{field: value}).validate()


def test_embedding_scale_multiplies_the_first_block_input():
    cfg = LMConfig.preset("micro", d_model=16, num_heads=2, sequence_layer="srwm")
    torch.manual_seed(0)
    base = CausalLM(cfg)
    scaled = CausalLM(
        LMConfig.preset("micro", d_model=16, num_heads=2, sequence_layer="srwm", embedding_scale=4.0)
    )
    scaled.load_state_dict(base.state_dict())
    ids = torch.randint(0, 256, (2, 5))
    emb = base.model.embed_tokens(ids)
    h_scaled, _ = scaled.model(inputs_embeds=4.0 * emb)  # the same as scaling the ids' embeddings
    torch.testing.assert_close(scaled.model(ids)[0], h_scaled)
    assert not torch.allclose(base.model(ids)[0], h_scaled)
    with pytest.raises(ValueError, match="embedding_scale"):
        LMConfig(embedding_scale=0.0).validate()


def test_per_layer_options_reach_only_the_selected_layer():
    options = {"srwm": {"init": "modern"}, "deltanet": {"chunk_size": 8}}
    cfg = LMConfig.preset("micro", d_model=16, num_heads=2, layer_options=options, sequence_layer="srwm")
    model = LMBackbone(cfg)
    assert all(layer.seq_modeling_block.init == "modern" for layer in model.layers)
    assert LMConfig(sequence_layer="softmax_attention", layer_options=options).sequence_layer_options() == {}


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"block": "post_ln"}, "layer_options.block"),
        ({"ttt_mlp": {"block": "post_ln"}}, "layer_options.ttt_mlp.block"),
    ],
)
def test_config_names_a_bad_block_form(options, key):
    message = rf"^{re.escape(key)}: expected one of \['native', 'pre_ln'\], got 'post_ln'$"
    with pytest.raises(ValueError, match=message):
        LMConfig(layer_options=options)


@pytest.mark.parametrize(
    ("layer", "backbone"),
    [*LAYERS, ("sr_deltanet", "transformer"), ("linear_attention", "transformer"), ("lstm", "transformer")],
)
def test_uniform_block_form_builds_every_layer_and_decodes_exactly(layer, backbone):
    """``layer_options: {block: pre_ln}`` gives every block's sequence layer the same pre-LN residual form
    (the TTT layers a LayerNorm instead of their RMSNorm), and the cache still continues exactly."""
    torch.manual_seed(1)
    model = _micro(layer, backbone, layer_options={"block": "pre_ln"})
    for block in model.model.layers:
        seq = block.seq_modeling_block
        assert seq.block == "pre_ln" and isinstance(seq.layer_norm, torch.nn.LayerNorm)
        assert not hasattr(seq, "seq_norm")
    ids = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        full, _ = model(ids)
        logits, cache = model(ids[:, :5])
        rest, _ = model(ids[:, 5:], cache)
    torch.testing.assert_close(torch.cat([logits, rest], 1), full, rtol=0, atol=1e-10)


def test_config_preset_and_from_dict_errors_are_value_errors():
    with pytest.raises(ValueError, match="unknown keys"):
        LMConfig.preset("micro", foo=1)
    with pytest.raises(ValueError, match="expected a dict"):
        LMConfig.from_dict([1, 2])
