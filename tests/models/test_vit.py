"""The ViT encoder (fastweights.models.vit) against a state dict in torchvision's vit_b_16 layout built here
by hand, and a plain-torch re-computation of Dosovitskiy et al. 2021, §3.1 Eq. 1–4 with explicit matmuls."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fastweights.models.frozen import IMAGENET_MEAN, IMAGENET_STD
from fastweights.models.vit import (
    ViTB16,
    interpolate_pos_embedding,
    load_vit_b16,
    state_dict_sha256,
    vit_from_state_dict,
)

D, P, L, M, S, HEADS, C = 32, 8, 2, 64, 32, 2, 5
G = S // P


def _state(*, old_mlp_names: bool = False, head: bool = True, seed: int = 1) -> dict[str, torch.Tensor]:
    """A random state dict in torchvision's vit_b_16 layout (D=32, P=8, 2 layers, S=32, M=64)."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float = 0.2, base: float = 0.0) -> torch.Tensor:
        return base + scale * torch.randn(*shape, generator=gen)

    state = {
        "class_token": rnd(1, 1, D),
        "conv_proj.weight": rnd(D, 3, P, P, scale=0.05),
        "conv_proj.bias": rnd(D),
        "encoder.pos_embedding": rnd(1, 1 + G * G, D),
    }
    lin1, lin2 = ("linear_1", "linear_2") if old_mlp_names else ("0", "3")
    for i in range(L):
        pre = f"encoder.layers.encoder_layer_{i}."
        state |= {
            pre + "ln_1.weight": rnd(D, base=1.0),
            pre + "ln_1.bias": rnd(D),
            pre + "self_attention.in_proj_weight": rnd(3 * D, D),
            pre + "self_attention.in_proj_bias": rnd(3 * D),
            pre + "self_attention.out_proj.weight": rnd(D, D),
            pre + "self_attention.out_proj.bias": rnd(D),
            pre + "ln_2.weight": rnd(D, base=1.0),
            pre + "ln_2.bias": rnd(D),
            pre + f"mlp.{lin1}.weight": rnd(M, D),
            pre + f"mlp.{lin1}.bias": rnd(M),
            pre + f"mlp.{lin2}.weight": rnd(D, M),
            pre + f"mlp.{lin2}.bias": rnd(D),
        }
    state |= {"encoder.ln.weight": rnd(D, base=1.0), "encoder.ln.bias": rnd(D)}
    if head:
        state |= {"heads.head.weight": rnd(C, D), "heads.head.bias": rnd(C)}
    return state


def _save(obj: object, tmp_path, name: str = "vit.pt"):
    path = tmp_path / name
    torch.save(obj, path)
    return path


def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-6) * w + b


def _reference(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Eq. 1–4 with explicit matmuls in float64 (mlp.0 / mlp.3 names)."""
    s = {k: v.double() for k, v in state.items()}
    x = x.double()
    n = x.shape[0]
    patches = F.unfold(x, kernel_size=P, stride=P).transpose(1, 2)  # [N, G*G, 3*P*P]
    z = patches @ s["conv_proj.weight"].reshape(D, -1).T + s["conv_proj.bias"]
    z = torch.cat([s["class_token"].expand(n, 1, D), z], dim=1) + s["encoder.pos_embedding"]
    dh = D // HEADS
    for i in range(L):
        pre = f"encoder.layers.encoder_layer_{i}."
        h = _ln(z, s[pre + "ln_1.weight"], s[pre + "ln_1.bias"])
        qkv = h @ s[pre + "self_attention.in_proj_weight"].T + s[pre + "self_attention.in_proj_bias"]
        q, k, v = (t.reshape(n, -1, HEADS, dh).transpose(1, 2) for t in qkv.split(D, dim=-1))
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
        o = (attn @ v).transpose(1, 2).reshape(n, -1, D)
        z = z + o @ s[pre + "self_attention.out_proj.weight"].T + s[pre + "self_attention.out_proj.bias"]
        h = _ln(z, s[pre + "ln_2.weight"], s[pre + "ln_2.bias"])
        h = h @ s[pre + "mlp.0.weight"].T + s[pre + "mlp.0.bias"]
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        z = z + h @ s[pre + "mlp.3.weight"].T + s[pre + "mlp.3.bias"]
    return _ln(z, s["encoder.ln.weight"], s["encoder.ln.bias"])[:, 0]


def _images(n: int = 3, size: int = S, seed: int = 2) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("old_mlp_names", [False, True])
@pytest.mark.parametrize("head", [True, False])
def test_state_dict_round_trips_key_by_key(tmp_path, old_mlp_names, head):
    state = _state(old_mlp_names=old_mlp_names, head=head)
    enc = load_vit_b16(_save(state, tmp_path), num_heads=HEADS)
    assert isinstance(enc, ViTB16)
    assert (enc.name, enc.feature_dim, enc.image_size) == ("vit_b16", D, S)
    assert (enc.mean, enc.std) == (IMAGENET_MEAN, IMAGENET_STD)
    cfg = enc.net.config
    assert (cfg.hidden_dim, cfg.patch_size, cfg.num_layers, cfg.mlp_dim, cfg.num_heads) == (D, P, L, M, HEADS)
    expected = {
        k.replace("mlp.linear_1.", "mlp.0.").replace("mlp.linear_2.", "mlp.3."): v for k, v in state.items()
    }
    got = enc.net.state_dict()
    assert list(got) == list(expected)
    for key, value in expected.items():
        assert got[key].dtype == torch.float32
        assert torch.equal(got[key], value), key


@pytest.mark.parametrize("wrapper", [None, "state_dict", "model"])
def test_wrapped_state_dicts_load(tmp_path, wrapper):
    state = _state()
    obj = state if wrapper is None else {wrapper: state, "epoch": 3}
    enc = load_vit_b16(_save(obj, tmp_path), num_heads=HEADS)
    assert torch.equal(enc.net.encoder.pos_embedding, state["encoder.pos_embedding"])


def test_features_match_a_plain_torch_recomputation(tmp_path):
    state = _state()
    enc = load_vit_b16(_save(state, tmp_path), num_heads=HEADS)
    x = _images()
    want = _reference(state, x)
    got32 = enc(x)
    assert got32.dtype == torch.float32 and got32.shape == (3, D)
    torch.testing.assert_close(got32.double(), want, atol=1e-5, rtol=1e-5)
    enc64 = vit_from_state_dict(state, num_heads=HEADS).double()
    torch.testing.assert_close(enc64(x.double()), want, atol=1e-10, rtol=1e-10)


def test_old_mlp_names_give_the_same_features():
    x = _images()
    new = vit_from_state_dict(_state(), num_heads=HEADS)(x)
    old = vit_from_state_dict(_state(old_mlp_names=True), num_heads=HEADS)(x)
    torch.testing.assert_close(new, old, atol=0, rtol=0)


def test_pos_embedding_interpolation_for_another_image_size():
    enc = vit_from_state_dict(_state(), num_heads=HEADS)
    pos = enc.net.encoder.pos_embedding
    # the trained grid: interpolation is the identity, and forward uses the parameter itself
    torch.testing.assert_close(interpolate_pos_embedding(pos, (G, G)), pos, atol=1e-6, rtol=0)
    assert enc.net.pos_embedding_for(G, G) is pos
    x = _images(2, 48)
    feats = enc(x)
    assert feats.shape == (2, D) and feats.dtype == torch.float32 and torch.isfinite(feats).all()
    assert len(enc.net._pos_cache) == 1
    big = enc.net.pos_embedding_for(6, 6)
    assert big.shape == (1, 1 + 36, D) and torch.equal(big[:, 0], pos[:, 0])
    assert enc.net.pos_embedding_for(6, 6) is big and len(enc.net._pos_cache) == 1  # cached
    torch.testing.assert_close(enc(x), feats, atol=0, rtol=0)


def test_the_encoder_is_frozen():
    enc = vit_from_state_dict(_state(), num_heads=HEADS)
    assert all(not p.requires_grad for p in enc.parameters())
    enc.train()
    assert not enc.training and not any(m.training for m in enc.modules())
    x = _images().requires_grad_(True)
    assert enc(x).grad_fn is None
    with torch.no_grad():
        assert enc.features(x).grad_fn is None


def test_weights_sha256_is_the_file_hash(tmp_path):
    path = _save(_state(), tmp_path)
    enc = load_vit_b16(path, num_heads=HEADS)
    assert enc.weights_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    # from a state dict: a hash of its contents
    a = vit_from_state_dict(_state(), num_heads=HEADS).weights_sha256
    assert a == state_dict_sha256(_state()) and a != state_dict_sha256(_state(seed=9))
    assert vit_from_state_dict(_state(), num_heads=HEADS, weights_sha256="abc").weights_sha256 == "abc"


def test_encode_uint8_grayscale_and_rgb():
    enc = vit_from_state_dict(_state(), num_heads=HEADS)
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, size=(5, S, S), dtype=np.uint8)
    rgb = rng.integers(0, 256, size=(4, 3, 40, 40), dtype=np.uint8)
    for images in (gray, rgb):
        out = enc.encode(images, image_size=enc.image_size, batch_size=2)
        assert out.dtype == np.float32 and out.shape == (len(images), D) and np.isfinite(out).all()
    want = enc(enc.preprocess(gray, S)).numpy()
    np.testing.assert_allclose(enc.encode(gray, image_size=S), want, atol=1e-6)
    assert enc.encode(gray, image_size=48).shape == (5, D)


def _without(key):
    def make():
        state = _state()
        del state[key]
        return state

    return make


def _with(key, value):
    def make():
        return _state() | {key: value}

    return make


_L0 = "encoder.layers.encoder_layer_0."

# (id, the file: a callable building its object, or "text" / "missing"; the name the message must hold)
_BAD_FILES = [
    ("missing-file", "missing", "model.backbone_weights"),
    ("text-file", "text", "torch.load"),
    ("list-pickle", lambda: [torch.zeros(2)], "dict"),
    ("tensor-pickle", lambda: torch.zeros(3), "dict"),
    ("missing-conv_proj", _without("conv_proj.weight"), "conv_proj.weight"),
    ("missing-pos", _without("encoder.pos_embedding"), "encoder.pos_embedding"),
    ("missing-ln", _without("encoder.ln.weight"), "encoder.ln.weight"),
    ("missing-layer-key", _without(_L0 + "self_attention.in_proj_bias"), "in_proj_bias"),
    (
        "missing-layer-0",
        lambda: {k: v for k, v in _state().items() if not k.startswith(_L0)},
        "encoder_layer",
    ),
    ("wrong-shape-mlp", _with(_L0 + "mlp.3.weight", torch.zeros(M, D)), _L0 + "mlp.3.weight"),
    ("wrong-shape-conv", _with("conv_proj.weight", torch.zeros(D, 1, P, P)), "conv_proj.weight"),
    ("wrong-ndim-token", _with("class_token", torch.zeros(D)), "class_token"),
    ("pos-not-square", _with("encoder.pos_embedding", torch.zeros(1, 1 + 15, D)), "encoder.pos_embedding"),
    ("not-a-tensor", _with("encoder.ln.bias", [0.0] * D), "encoder.ln.bias"),
    ("int-tensor", _with("encoder.ln.bias", torch.zeros(D, dtype=torch.int64)), "encoder.ln.bias"),
    ("unexpected-key", _with("encoder.extra", torch.zeros(1)), "encoder.extra"),
]


@pytest.mark.parametrize(("content", "name"), [c[1:] for c in _BAD_FILES], ids=[c[0] for c in _BAD_FILES])
def test_bad_weights_files_raise_one_line_value_errors(tmp_path, content, name):
    path = tmp_path / "weights.pt"
    if content == "text":
        path.write_text("these are not weights\n")
    elif content != "missing":
        torch.save(content(), path)
    with pytest.raises(ValueError, match="model.backbone_weights") as err:
        load_vit_b16(path, num_heads=HEADS)
    msg = str(err.value)
    assert name in msg and "\n" not in msg and "expected" in msg and "got" in msg


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda enc: enc(_images(1, 36)), "image_size"),
        (lambda enc: enc(torch.zeros(1, 1, S, S)), "x"),
        (lambda enc: vit_from_state_dict(_state()), "num_heads"),  # default D // 64 = 0 for D = 32
        (lambda enc: vit_from_state_dict(_state(), num_heads=3), "num_heads"),
    ],
    ids=["image-size-not-multiple-of-P", "one-channel", "default-heads", "heads-not-divisor"],
)
def test_bad_inputs_raise_one_line_value_errors(call, name):
    enc = vit_from_state_dict(_state(), num_heads=HEADS)
    with pytest.raises(ValueError) as err:
        call(enc)
    msg = str(err.value)
    assert msg.startswith(f"{name}:") and "\n" not in msg
