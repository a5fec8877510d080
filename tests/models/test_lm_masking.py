"""``CausalLM`` on padded batches (``attention_mask``): logits at real tokens and continuation equal to
each prompt alone, for every sequence layer; batched left-padded ``generate`` equals one prompt at a time."""

from __future__ import annotations

import pytest
import torch

from fastweights.layers import SEQUENCE_LAYERS
from fastweights.models.lm import CausalLM, LMConfig, generate

# left padding (5 real), right (3), both sides (4), none (7); TTT mini-batch 4
MASK = torch.tensor(
    [
        [0, 0, 1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0, 0, 0],
        [0, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1],
    ],
    dtype=torch.bool,
)
B, T = MASK.shape
LEFT = torch.tensor([[0, 0, 0, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.bool)


def _model(name, seed=0):
    torch.manual_seed(seed)
    cfg = LMConfig.preset(
        "micro",
        sequence_layer=name,
        mini_batch_size=4,
        embedding_scale=2.0,
        tie_word_embeddings=False,
        initializer_range=0.2,
    )
    return CausalLM(cfg).double().eval()


def _ids(shape, seed=1):
    return torch.randint(0, 256, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_padded_batch_logits_and_cache_equal_each_sequence_alone(name):
    model = _model(name)
    ids, nxt = _ids((B, T)), _ids((B, 2), seed=2)
    with torch.no_grad():
        logits, cache = model(ids, attention_mask=MASK)
        cont, _ = model(nxt, cache)
        for b in range(B):
            alone, cache_b = model(ids[b : b + 1, MASK[b]])
            torch.testing.assert_close(logits[b, MASK[b]], alone[0], rtol=0, atol=1e-12)
            cont_b, _ = model(nxt[b : b + 1], cache_b)
            torch.testing.assert_close(cont[b], cont_b[0], rtol=0, atol=1e-12)
    assert (logits[~MASK] == 0).all()


@pytest.mark.parametrize("name", ["ttt_linear", "softmax_attention", "srwm"])
def test_padded_batch_gradients_equal_each_sequence_alone(name):
    model = _model(name)
    ids = _ids((B, T))
    logits, _ = model(ids, attention_mask=MASK)
    loss = logits.square().sum()
    loss_ref = sum(model(ids[b : b + 1, MASK[b]])[0].square().sum() for b in range(B))
    params = list(model.parameters())
    for u, v in zip(torch.autograd.grad(loss, params), torch.autograd.grad(loss_ref, params), strict=True):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-10)


def test_an_all_real_mask_is_bit_identical_for_a_zeroing_layer():
    model = _model("deltanet")
    ids = _ids((B, T))
    with torch.no_grad():
        plain, _ = model(ids)
        masked, _ = model(ids, attention_mask=torch.ones(B, T, dtype=torch.int64))
    assert torch.equal(plain, masked)


@pytest.mark.parametrize("name", SEQUENCE_LAYERS)
def test_left_padded_generate_equals_one_prompt_at_a_time(name):
    model = _model(name)
    prompts = _ids(LEFT.shape, seed=3)
    out = generate(model, prompts, 6, temperature=0, attention_mask=LEFT)
    assert out.shape == (3, 5 + 6)
    for b in range(3):
        alone = generate(model, prompts[b : b + 1, LEFT[b]], 6, temperature=0)
        assert out[b, 5:].tolist() == alone[0, -6:].tolist()
        assert out[b, :5].tolist() == prompts[b].tolist()


def test_generate_refuses_right_padding_and_bad_masks():
    model = _model("deltanet")
    prompts = _ids((2, 4))
    with pytest.raises(ValueError, match="attention_mask: expected left padding for generate .*row 1"):
        generate(model, prompts, 2, attention_mask=torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]]))
    with pytest.raises(ValueError, match=r"attention_mask: expected shape \[B, T\] = \[2, 4\]"):
        generate(model, prompts, 2, attention_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="attention_mask: expected only 0 and 1"):
        generate(model, prompts, 2, attention_mask=torch.full((2, 4), 0.5))


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        (
            torch.ones(B, T - 1),
            r"attention_mask: expected shape \[B, T\] = \[4, 7\] \(the batch and steps of input_ids\)",
        ),
        (torch.full((B, T), 3), r"attention_mask: expected only 0 and 1 .*got 3"),
        (
            torch.tensor([[1, 0, 1, 0, 1, 0, 1]] * B),
            "attention_mask: expected each row's real tokens to be contiguous",
        ),
    ],
)
def test_bad_masks_raise_one_value_error(mask, match):
    model = _model("srwm")
    with pytest.raises(ValueError, match=match):
        model(_ids((B, T)), attention_mask=mask)
