"""``FastweightsForCausalLM`` against the library's ``CausalLM``: logits, loss, ``generate()`` and the cache,
for every sequence layer (tiny float32 models with the same weights)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

from fastweights.hf import FastweightsCache, FastweightsConfig, FastweightsForCausalLM  # noqa: E402
from fastweights.layers import SEQUENCE_LAYERS  # noqa: E402
from fastweights.models.lm import CausalLM, LMConfig, generate  # noqa: E402

# every sequence layer on its default backbone (TTT: mamba), and the TTT layers on the transformer one
LAYERS = [(name, "auto") for name in SEQUENCE_LAYERS]
LAYERS += [("ttt_linear", "transformer"), ("ttt_mlp", "transformer")]
IDS = [f"{name}-{backbone}" for name, backbone in LAYERS]


def _pair(layer: str, backbone: str = "auto", **kw) -> tuple[CausalLM, FastweightsForCausalLM]:
    torch.manual_seed(0)
    cfg = LMConfig.preset("micro", sequence_layer=layer, backbone=backbone, mini_batch_size=4, **kw)
    lm = CausalLM(cfg).eval()
    return lm, FastweightsForCausalLM.from_causal_lm(lm).eval()


def _ids(b: int = 2, t: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_logits_equal_causal_lms(layer, backbone):
    lm, hf = _pair(layer, backbone)
    ids = _ids()
    with torch.no_grad():
        ref, _ = lm(ids)
        out = hf(ids)
    assert isinstance(out, CausalLMOutputWithPast) and out.logits.dtype == torch.float32
    torch.testing.assert_close(out.logits, ref, rtol=0, atol=1e-6)
    assert isinstance(out.cache, FastweightsCache) and out.cache.get_seq_length() == ids.shape[1]


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_greedy_generate_equals_the_librarys(layer, backbone):
    lm, hf = _pair(layer, backbone)
    ids = _ids(t=5)
    steps = []
    hook = hf.register_forward_pre_hook(
        lambda module, args, kwargs: steps.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    out = hf.generate(ids, max_new_tokens=6, do_sample=False)
    hook.remove()
    assert torch.equal(out, generate(lm, ids, 6, temperature=0))
    assert steps == [5, 1, 1, 1, 1, 1]  # prefill once, then one token per step through the cache


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_sampling_equals_the_librarys_from_the_same_seed(layer, backbone):
    lm, hf = _pair(layer, backbone)
    ids = _ids(t=4)
    torch.manual_seed(7)
    ours = generate(lm, ids, 6, temperature=0.8, top_k=20)
    torch.manual_seed(7)
    theirs = hf.generate(ids, max_new_tokens=6, do_sample=True, temperature=0.8, top_k=20)
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_beam_search_through_the_cache_equals_beam_search_without_it(layer, backbone):
    _, hf = _pair(layer, backbone)
    ids = _ids(t=5)
    cached = hf.generate(ids, max_new_tokens=6, num_beams=4, do_sample=False)
    recomputed = hf.generate(ids, max_new_tokens=6, num_beams=4, do_sample=False, use_cache=False)
    assert torch.equal(cached, recomputed)


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_cache_reorder_and_repeat_continue_the_chosen_rows(layer, backbone):
    _, hf = _pair(layer, backbone)
    ids = _ids(b=3, t=10)
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        full = hf(ids[index]).logits
        cache = FastweightsCache()
        hf(ids[:, :6], cache=cache)
        cache.reorder_cache(index)
        assert cache.batch_size == 4 and cache.get_seq_length() == 6
        torch.testing.assert_close(hf(ids[index, 6:], cache=cache).logits, full[:, 6:], rtol=0, atol=1e-6)
        repeated = FastweightsCache()
        hf(ids[:, :6], cache=repeated)
        repeated.batch_repeat_interleave(2)
        rows = torch.arange(3).repeat_interleave(2)
        out = hf(ids[rows, 6:], cache=repeated).logits
    torch.testing.assert_close(out, hf(ids[rows]).logits[:, 6:], rtol=0, atol=1e-6)


def _hand_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean over scored positions of -log softmax(logits[b, t])[labels[b, t + 1]], one position at a time."""
    terms = []
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1] - 1):
            target = int(labels[b, t + 1])
            if target != -100:
                terms.append(-torch.log_softmax(logits[b, t].double(), dim=-1)[target])
    return torch.stack(terms).mean()


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_loss_is_the_shifted_next_token_cross_entropy(layer, backbone):
    _, hf = _pair(layer, backbone)
    ids = _ids()
    labels = ids.clone()
    labels[0, 3] = labels[1, -1] = -100  # left out
    with torch.no_grad():
        out = hf(ids, labels=labels)
    assert out.loss.dtype == torch.float32 and out.loss.dim() == 0
    torch.testing.assert_close(out.loss.double(), _hand_loss(out.logits, labels), rtol=1e-6, atol=1e-6)


def test_the_loss_trains_the_model():
    _, hf = _pair("deltanet")
    hf.train()
    ids = _ids()
    out = hf(ids, labels=ids)
    assert out.cache is None  # no cache in training mode unless asked for
    out.loss.backward()
    grads = {n: p.grad for n, p in hf.named_parameters()}
    assert all(g is not None for g in grads.values())
    assert grads["model.embed_tokens.weight"].abs().sum() > 0  # also the tied head's
    assert grads["model.layers.0.seq_modeling_block.out_linear.weight"].abs().sum() > 0


def test_cache_continues_in_place_and_past_key_values_is_the_same_argument():
    _, hf = _pair("softmax_attention")
    ids = _ids(t=8)
    with torch.no_grad():
        full = hf(ids).logits
        cache = FastweightsCache()
        a = hf(ids[:, :5], cache=cache)
        b = hf(ids[:, 5:], past_key_values=cache)
    assert a.cache is cache and b.cache is cache and cache.get_seq_length() == 8
    torch.testing.assert_close(torch.cat([a.logits, b.logits], 1), full, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="got both"):
        hf(ids, cache=FastweightsCache(), past_key_values=FastweightsCache())


def test_return_dict_false_and_use_cache_false():
    _, hf = _pair("lstm")
    ids = _ids()
    with torch.no_grad():
        loss, logits = hf(ids, labels=ids, use_cache=False, return_dict=False)
        logits2, cache = hf(ids, return_dict=False)
    torch.testing.assert_close(logits, logits2, rtol=0, atol=0)
    assert loss.dim() == 0 and isinstance(cache, FastweightsCache)
    assert hf(ids, use_cache=False).cache is None


def test_an_all_ones_attention_mask_runs_the_batch_as_it_is():
    lm, hf = _pair("srwm")
    ids = _ids()
    with torch.no_grad():
        out = hf(ids, attention_mask=torch.ones_like(ids))
        ref, _ = lm(ids)
    torch.testing.assert_close(out.logits, ref, rtol=0, atol=1e-6)
    assert torch.equal(
        hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False),
        generate(lm, ids, 3, temperature=0),
    )


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_a_padded_batch_equals_its_rows_run_alone(layer, backbone):
    """Left and right padding: logits at the real tokens equal each row's unpadded run (zeros at pads)."""
    lm, hf = _pair(layer, backbone)
    ids = _ids(t=9)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding
    mask[1, 7:] = 0  # right padding
    with torch.no_grad():
        out = hf(ids, attention_mask=mask).logits
        alone = [lm(ids[0:1, 3:])[0][0], lm(ids[1:2, :7])[0][0]]
    torch.testing.assert_close(out[0, 3:], alone[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(out[1, :7], alone[1], rtol=0, atol=1e-5)
    assert bool((out[0, :3] == 0).all()) and bool((out[1, 7:] == 0).all())


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_batched_generate_with_left_padding_equals_one_prompt_at_a_time(layer, backbone):
    lm, hf = _pair(layer, backbone)
    ids = _ids(t=7)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # the second prompt is 4 tokens, left-padded
    out = hf.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False)
    assert torch.equal(out[0], generate(lm, ids[0:1], 5, temperature=0)[0])
    assert torch.equal(out[1, 3:], generate(lm, ids[1:2, 3:], 5, temperature=0)[0])


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (torch.ones(2, 4, dtype=torch.long), r"attention_mask: expected a \[B, T\] or \[B, past \+ T\] mask"),
        (torch.ones(9, dtype=torch.long), "attention_mask: expected"),
        (torch.full((2, 9), 2), "attention_mask: expected 0/1 values"),
    ],
)
def test_bad_attention_masks_are_value_errors(mask, message):
    _, hf = _pair("deltanet")
    with pytest.raises(ValueError, match=message):
        hf(_ids(), attention_mask=mask)


def test_bad_arguments_are_value_errors_naming_them():
    _, hf = _pair("linear_attention")
    ids = _ids()
    cases = [
        (dict(input_ids=ids, labels=ids[:, :4]), r"labels: expected an integer tensor \[2, 9\]"),
        (dict(input_ids=ids, labels=ids.float()), "labels: expected an integer tensor"),
        (dict(input_ids=ids, labels=ids + 300), r"labels: expected token ids in \[0, 256\) or -100"),
        (dict(input_ids=ids + 300), "input_ids: expected token ids"),
        (dict(input_ids=None), "input_ids: expected an int64 tensor"),
        (dict(input_ids=ids, cache=object()), "cache: expected a FastweightsCache"),
        (dict(input_ids=ids, output_hidden_states=True), "output_hidden_states: not supported"),
        (dict(input_ids=ids, output_attentions=True), "output_attentions: not supported"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            hf(**kwargs)
    with pytest.raises(NotImplementedError, match="resize_token_embeddings"):
        hf.resize_token_embeddings(300)


def test_the_cache_cannot_forget_tokens():
    _, hf = _pair("deltanet")
    cache = hf(_ids()).cache
    cache.crop(0)  # what generate() calls between steps: nothing changes
    assert cache.get_seq_length() == 9 and not cache.is_croppable and not cache.is_compileable
    with pytest.raises(ValueError, match="cannot remove tokens"):
        cache.crop(-1)
    cache.reset()
    assert cache.get_seq_length() == 0 and cache.batch_size == -1 and len(cache) == 0


def test_a_new_model_has_causal_lms_initialisation_and_tied_head():
    torch.manual_seed(0)
    cfg = FastweightsConfig(sequence_layer="srwm", d_model=32, num_heads=2, num_layers=1)
    hf = FastweightsForCausalLM(cfg)
    assert hf.lm_head.weight is hf.model.embed_tokens.weight
    std = float(hf.model.embed_tokens.weight.detach().std())
    assert 0.017 < std < 0.023  # N(0, initializer_range = 0.02)
    untied = FastweightsForCausalLM(FastweightsConfig(tie_word_embeddings=False, d_model=32, num_heads=2))
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


def test_from_and_to_causal_lm_copy_weights_dtype_and_mode():
    lm = CausalLM(LMConfig.preset("micro", sequence_layer="ttt_mlp", mini_batch_size=4)).double()
    hf = FastweightsForCausalLM.from_causal_lm(lm)
    assert hf.training and hf.model.embed_tokens.weight.dtype == torch.float64
    back = hf.eval().to_causal_lm()
    assert not back.training and back.lm_head.weight is back.model.embed_tokens.weight
    for (name, a), (_, b) in zip(lm.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    back.model.embed_tokens.weight.data.zero_()  # a copy: the other models keep their weights
    assert hf.model.embed_tokens.weight.abs().sum() > 0 and lm.model.embed_tokens.weight.abs().sum() > 0
    with pytest.raises(ValueError, match="model: expected a fastweights CausalLM"):
        FastweightsForCausalLM.from_causal_lm(torch.nn.Linear(2, 2))  # type: ignore[arg-type]


def test_the_loss_helper_scores_nothing_when_every_label_is_ignored():
    _, hf = _pair("deltanet")
    ids = _ids()
    with torch.no_grad():
        loss = hf(ids, labels=torch.full_like(ids, -100)).loss
    assert torch.isnan(loss)  # the mean over no scored position (as documented)


@pytest.mark.parametrize("layer", ["softmax_attention", "ttt_linear"])
def test_generate_continues_from_a_returned_cache(layer):
    _, hf = _pair(layer)
    ids = _ids(t=5)
    cache = FastweightsCache()
    first = hf.generate(ids, max_new_tokens=4, do_sample=False, cache=cache, return_dict_in_generate=True)
    assert first.cache is cache and cache.get_seq_length() == 8  # the last token is not fed yet
    more = hf.generate(first.sequences, max_new_tokens=3, do_sample=False, cache=cache)  # only new tokens run
    assert torch.equal(more, hf.generate(ids, max_new_tokens=7, do_sample=False))
    samples = hf.generate(ids, max_new_tokens=3, do_sample=True, num_return_sequences=3)
    assert samples.shape == (6, 8) and torch.equal(samples[:, :5], ids.repeat_interleave(3, 0))
