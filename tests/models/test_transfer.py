from __future__ import annotations

import pytest
import torch

from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from fastweights.models.transfer import load_classifier_weights

F = 4  # Conv4(…, 4 channels, image_size=16).feature_dim


def _model(n, *, seed, in_channels=1, image_size=16, layer="srwm"):
    torch.manual_seed(seed)
    return InContextClassifier(
        Conv4(in_channels, 4, image_size=image_size),
        n,
        d_model=12,
        num_layers=2,
        num_heads=3,
        d_ff=12,
        sequence_layer=layer,
    ).double()


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("n_old", "n_new"), [(5, 2), (5, 10)])
def test_columns_and_rows_are_mapped_entry_by_entry(n_old, n_new):
    old, new = _model(n_old, seed=0), _model(n_new, seed=1)
    src, fresh = _snapshot(old), _snapshot(new)
    notes = load_classifier_weights(new, src)
    got = new.state_dict()
    w_old, w_fresh, w = src["input_proj.weight"], fresh["input_proj.weight"], got["input_proj.weight"]
    assert w.shape == (12, F + n_new + 1)
    # where each new column comes from: ("old", column of the checkpoint) or ("fresh", own column)
    source = [("old", j) for j in range(F)]  # features
    source += [("old", F + c) if c < min(n_old, n_new) else ("fresh", F + c) for c in range(n_new)]  # labels
    source += [("old", F + n_old)]  # unknown -> unknown
    for col, (where, j) in enumerate(source):
        ref = w_old if where == "old" else w_fresh
        assert torch.equal(w[:, col], ref[:, j]), (col, where, j)
    for key in ("out_layer.weight", "out_layer.bias"):
        for row in range(n_new):
            ref = src[key][row] if row < n_old else fresh[key][row]
            assert torch.equal(got[key][row], ref), (key, row)
    for key, value in got.items():
        if key not in ("input_proj.weight", "out_layer.weight", "out_layer.bias"):
            assert torch.equal(value, src[key]), key
    assert not torch.equal(w_old[:, F : F + 2], w_fresh[:, F : F + 2])  # the two inits do differ
    assert (
        len(notes) == 2
        and f"{n_old} -> {n_new}" in notes[0]
        and f"rows 0..{min(n_old, n_new) - 1}" in notes[1]
    )


@pytest.mark.parametrize(("n_old", "n_new"), [(5, 2), (5, 10), (2, 5)])
def test_same_function_on_the_shared_labels(n_old, n_new):
    """For demonstrations with labels < n = min(N_old, N_new) and queries with the unknown label, the
    new model's logits on classes 0..n-1 equal the old model's on 0..n-1, at every step and for the
    queries from the state after the demonstrations (up to float64 rounding: the input projection
    sums over a different number of columns, the extra inputs being zero)."""
    n = min(n_old, n_new)
    old, new = _model(n_old, seed=0), _model(n_new, seed=1)
    load_classifier_weights(new, old.state_dict())
    old.eval(), new.eval()
    g = torch.Generator().manual_seed(3)
    images = torch.randn(2, 7, 1, 16, 16, generator=g, dtype=torch.float64)
    labels = torch.randint(0, n, (2, 7), generator=g)
    queries = torch.randn(2, 4, 1, 16, 16, generator=g, dtype=torch.float64)
    with torch.no_grad():
        lo, so = old(images, labels)
        ln, sn = new(images, labels)
        qo, qn = old.query(queries, so), new.query(queries, sn)
    assert ln.shape[-1] == n_new
    torch.testing.assert_close(ln[..., :n], lo[..., :n], rtol=0, atol=1e-12)
    torch.testing.assert_close(qn[..., :n], qo[..., :n], rtol=0, atol=1e-12)
    # the fast weights reached are the same too
    for a, b in zip(so, sn, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert (qo[..., :n] - qo[..., :n].mean()).abs().max() > 1e-3  # not a degenerate constant function


def test_equal_classes_is_a_plain_strict_load():
    old, new = _model(5, seed=0), _model(5, seed=1)
    assert load_classifier_weights(new, old.state_dict()) == []
    for key, value in new.state_dict().items():
        assert torch.equal(value, old.state_dict()[key]), key


def test_errors_name_the_parameter_and_both_shapes():
    three = _model(10, seed=1, in_channels=3)
    with pytest.raises(
        ValueError, match=r"backbone\.blocks\.0\.0\.weight.*\[4, 3, 3, 3\].*got \[4, 1, 3, 3\]"
    ):
        load_classifier_weights(three, _model(5, seed=0).state_dict())
    with pytest.raises(
        ValueError, match=r"backbone\.blocks\.0\.0\.weight.*\[4, 3, 3, 3\].*got \[4, 1, 3, 3\]"
    ):
        load_classifier_weights(_model(5, seed=1, in_channels=3), _model(5, seed=0).state_dict())  # equal N
    bigger = _model(10, seed=1, image_size=32)  # 4 * 2 * 2 = 16 features
    with pytest.raises(
        ValueError, match=r"input_proj\.weight.*\[12, 22\] \(16 features \+ 5 classes.*got \[12, 10\]"
    ):
        load_classifier_weights(bigger, _model(5, seed=0).state_dict())
    sd = _model(5, seed=0).state_dict()
    sd["out_layer.bias"] = sd["out_layer.bias"][:3]
    with pytest.raises(ValueError, match=r"out_layer\.bias.*\[5\].*got \[3\]"):
        load_classifier_weights(_model(10, seed=1), sd)
    with pytest.raises(ValueError, match=r"missing \['seq_layers.0.weight'.*unexpected"):
        load_classifier_weights(_model(10, seed=1), _model(5, seed=0, layer="deltanet").state_dict())
    sd = _model(5, seed=0).state_dict()
    sd["input_proj.bias"] = [0.0] * 12
    with pytest.raises(ValueError, match=r"state_dict\['input_proj.bias'\]: expected a tensor, got list"):
        load_classifier_weights(_model(10, seed=1), sd)
    sd = _model(5, seed=0).state_dict()
    sd["out_layer.weight"] = sd["out_layer.weight"][0]
    with pytest.raises(ValueError, match=r"out_layer\.weight.*expected shape \[N, D\].*got \[12\]"):
        load_classifier_weights(_model(10, seed=1), sd)


def test_a_failed_load_leaves_the_model_unchanged():
    model = _model(10, seed=1, in_channels=3)
    before = _snapshot(model)
    with pytest.raises(ValueError):
        load_classifier_weights(model, _model(5, seed=0).state_dict())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
