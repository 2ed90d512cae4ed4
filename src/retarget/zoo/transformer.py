"""Transformer-era networks, written as PyTorch (timm) exports them: a ViT, a ConvNeXt-style
block net, a MobileViT-style hybrid and a LeViT. Small enough to test in seconds at 32 px; the defaults
follow ViT-Tiny, ConvNeXt-Atto and MobileViT-XXS in spirit (channel counts, block order), not
weight for weight."""
from __future__ import annotations

import numpy as np
import onnx

from .builder import OnnxBuilder, scaled


def vit(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
        opset: int = 17, seed: int = 0, patch: int = 16, depth: int = 12,
        heads: int = 3) -> onnx.ModelProto:
    """Vision Transformer (Dosovitskiy et al. 2021) in ViT-Tiny's shape: a patch-embedding conv,
    a class token and position embeddings, `depth` pre-norm blocks (LayerNorm, multi-head
    attention, GELU MLP), the class token's LayerNorm and a Linear head. Embedding width 192 x
    `width` (a multiple of `heads`). `size` must be a multiple of `patch`."""
    if size % patch:
        raise ValueError(f"vit: size {size} is not a multiple of patch {patch}")
    b = OnnxBuilder("vit", opset, seed)
    d = scaled(192, width, divisor=8 * heads)
    x = b.input("input", (batch, 3, size, size))
    x = b.conv(x, d, patch, "patch_embed.proj", stride=patch, pad=0, bias=True)
    n = (size // patch) ** 2
    x = b.transpose(b.reshape(x, (batch, d, n), "patch_embed.flatten"), (0, 2, 1),
                    "patch_embed")
    cls = b.weight("cls_token", (0.02 * b.rng.standard_normal((batch, 1, d))).astype("float32"))
    x = b.concat([cls, x], "cat", axis=1)
    pos = b.weight("pos_embed", (0.02 * b.rng.standard_normal((1, n + 1, d))).astype("float32"))
    x = b.binary("Add", x, pos, "pos_drop")
    for i in range(depth):
        x = b.transformer_block(x, heads, f"blocks.{i}")
    x = b.gather(b.layer_norm(x, "norm"), 0, 1, "cls")
    b.output(b.gemm(x, num_classes, "head"))
    return b.model()


def convnext(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
             opset: int = 17, seed: int = 0, depths: tuple[int, ...] = (2, 2, 6, 2)
             ) -> onnx.ModelProto:
    """ConvNeXt (Liu et al. 2022) blocks in ConvNeXt-Atto's widths (40, 80, 160, 320 x `width`):
    a 4x4/4 stem and 2x2/2 downsamples with channels-first LayerNorm (the decomposed chain),
    and blocks of depthwise 7x7 conv, channels-last LayerNorm, Linear 4x, GELU, Linear, layer
    scale, residual add. Global average pool, LayerNorm, Linear head. Needs size >= 32."""
    b = OnnxBuilder("convnext", opset, seed)
    dims = [scaled(c, width) for c in (40, 80, 160, 320)]
    x = b.input("input", (batch, 3, size, size))
    x = b.conv(x, dims[0], 4, "stem.0", stride=4, pad=0, bias=True)
    x = b.layer_norm(x, "stem.1", axis=1, eps=1e-6, channels_first=True)
    for s, (dim, depth) in enumerate(zip(dims, depths)):
        if s:
            x = b.layer_norm(x, f"stages.{s}.downsample.0", axis=1, eps=1e-6, channels_first=True)
            x = b.conv(x, dim, 2, f"stages.{s}.downsample.1", stride=2, pad=0, bias=True)
        for i in range(depth):
            scope = f"stages.{s}.blocks.{i}"
            h = b.conv(x, dim, 7, f"{scope}.conv_dw", pad=3, groups=dim, bias=True)
            h = b.layer_norm(b.transpose(h, (0, 2, 3, 1), scope), f"{scope}.norm", eps=1e-6)
            h = b.linear(b.gelu(b.linear(h, 4 * dim, f"{scope}.mlp.fc1", gain=2.0),
                                f"{scope}.mlp.act"), dim, f"{scope}.mlp.fc2")
            h = b.binary("Mul", h, b.weight(f"{scope}.gamma", (0.5 + 0.1 * b.rng.standard_normal(
                dim)).astype("float32")), scope)
            x = b.binary("Add", x, b.transpose(h, (0, 3, 1, 2), scope), scope)
    x = b.flatten(b.global_avgpool(x, "head.global_pool"), "head.flatten")
    b.output(b.gemm(b.layer_norm(x, "head.norm", eps=1e-6), num_classes, "head.fc"))
    return b.model()


def _mv2(b: OnnxBuilder, x: str, cout: int, stride: int, scope: str, expand: int = 4) -> str:
    """MobileNetV2 inverted residual with SiLU: 1x1 expand, 3x3 depthwise, 1x1 project."""
    cin = b.channels(x)
    h = b.silu(b.conv_bn(x, cin * expand, 1, f"{scope}.conv.0", act=None), f"{scope}.act0")
    h = b.silu(b.conv_bn(h, cin * expand, 3, f"{scope}.conv.1", stride=stride,
                         groups=cin * expand, act=None), f"{scope}.act1")
    h = b.conv_bn(h, cout, 1, f"{scope}.conv.2", act=None)
    return b.add(x, h, f"{scope}.add") if stride == 1 and cin == cout else h


def _mobilevit_block(b: OnnxBuilder, x: str, dim: int, depth: int, heads: int,
                     scope: str) -> str:
    """MobileViT block: local 3x3 + 1x1 conv, unfold into 2x2 patches, `depth` transformer
    blocks across patches, fold back, 1x1 conv, concat with the input, 3x3 fusion conv."""
    n, c, h, w = b.shape(x)
    y = b.silu(b.conv_bn(x, c, 3, f"{scope}.conv_kxk", act=None), f"{scope}.act_kxk")
    y = b.conv(y, dim, 1, f"{scope}.conv_1x1")
    # [N, d, H, W] -> [N * 4 patch pixels, H/2 * W/2 patches, d]
    y = b.reshape(y, (n, dim, h // 2, 2, w // 2, 2), f"{scope}.unfold")
    y = b.transpose(y, (0, 3, 5, 2, 4, 1), f"{scope}.unfold")
    y = b.reshape(y, (n * 4, h * w // 4, dim), f"{scope}.unfold.tokens")
    for i in range(depth):
        y = b.transformer_block(y, heads, f"{scope}.transformer.{i}", mlp_ratio=2)
    y = b.layer_norm(y, f"{scope}.norm")
    y = b.reshape(y, (n, 2, 2, h // 2, w // 2, dim), f"{scope}.fold")
    y = b.reshape(b.transpose(y, (0, 5, 3, 1, 4, 2), f"{scope}.fold"), (n, dim, h, w),
                  f"{scope}.fold.map")
    y = b.silu(b.conv_bn(y, c, 1, f"{scope}.conv_proj", act=None), f"{scope}.act_proj")
    y = b.concat([x, y], f"{scope}.cat")
    return b.silu(b.conv_bn(y, c, 3, f"{scope}.conv_fusion", act=None), f"{scope}.act_fusion")


def mobilevit(size: int = 256, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
              opset: int = 17, seed: int = 0) -> onnx.ModelProto:
    """A MobileViT-style hybrid (Mehta & Rastegari 2022), MobileViT-XXS-like: a 3x3/2 stem,
    MobileNetV2 blocks, and two MobileViT blocks (convolutions around a transformer over 2x2
    patches) at 1/8 and 1/16 resolution, then a 1x1 conv, global pool and Linear. Needs size
    a multiple of 32."""
    if size % 32:
        raise ValueError(f"mobilevit: size {size} is not a multiple of 32")
    b = OnnxBuilder("mobilevit", opset, seed)
    ch = [scaled(c, width) for c in (16, 24, 48, 64, 80, 320)]
    x = b.input("input", (batch, 3, size, size))
    x = b.silu(b.conv_bn(x, ch[0], 3, "stem", stride=2, act=None), "stem.act")
    x = _mv2(b, x, ch[0], 1, "stages.0.0")
    x = _mv2(b, x, ch[1], 2, "stages.1.0")
    x = _mv2(b, x, ch[2], 2, "stages.2.0")
    x = _mobilevit_block(b, x, scaled(64, width, divisor=16), 2, 2, "stages.2.1")
    x = _mv2(b, x, ch[3], 2, "stages.3.0")
    x = _mobilevit_block(b, x, scaled(80, width, divisor=16), 2, 2, "stages.3.1")
    x = b.silu(b.conv_bn(x, ch[5], 1, "final_conv", act=None), "final_conv.act")
    x = b.flatten(b.global_avgpool(x, "head.global_pool"), "head.flatten")
    b.output(b.gemm(x, num_classes, "head.fc"))
    return b.model()


def _linear_norm(b: OnnxBuilder, x: str, out: int, scope: str, gain: float = 1.0,
                 residual: bool = False) -> str:
    """LeViT's LinearNorm: Linear without bias, BatchNorm1d over the flattened tokens (its
    scale shrunk at the end of a residual branch, so random weights keep activations O(1))."""
    *lead, fin = b.shape(x)
    w = b.weight(f"{scope}.c.weight", b._he((fin, out), fin, gain))
    y = b._node("MatMul", f"{scope}.c", [x, w], tuple(lead) + (out,))
    rows = b.reshape(y, (int(np.prod(lead)), out), f"{scope}.flatten")
    rows = b.batchnorm(rows, f"{scope}.bn", gamma_scale=0.3 if residual else 1.0)
    return b.reshape(rows, tuple(lead) + (out,), f"{scope}.unflatten")


def _heads(b: OnnxBuilder, x: str, heads: int, parts: tuple[int, ...], scope: str) -> list[str]:
    """[B, N, heads * sum(parts)] -> per part [B, heads, N, part] (view, split, permute)."""
    n_b, n, _ = b.shape(x)
    x = b.reshape(x, (n_b, n, heads, sum(parts)), f"{scope}.view")
    out, start = [], 0
    for i, p in enumerate(parts):
        s = b.slice(x, 3, start, start + p, f"{scope}.split{i}")
        out.append(b.transpose(s, (0, 2, 1, 3), f"{scope}.split{i}"))
        start += p
    return out


def _levit_attention(b: OnnxBuilder, q, k, v, n_q: int, scope: str) -> str:
    """softmax(q k^T * d^-0.5 + the learned position bias) v, heads merged, Hardswish."""
    n_b, heads, n_k, dk = b.shape(k)
    dv = b.shape(v)[-1]
    s = b.matmul(q, b.transpose(k, (0, 1, 3, 2), scope), scope)
    s = b.binary("Mul", s, b.scalar(f"{scope}.scale", dk ** -0.5), scope)
    bias = b.weight(f"{scope}.attention_biases",
                    (0.1 * b.rng.standard_normal((heads, n_q, n_k))).astype("float32"))
    y = b.matmul(b.softmax(b.binary("Add", s, bias, scope), scope), v, scope)
    y = b.reshape(b.transpose(y, (0, 2, 1, 3), scope), (n_b, n_q, heads * dv), f"{scope}.merge")
    return b.hardswish(y, f"{scope}.proj.act")


def levit(size: int = 224, batch: int = 1, num_classes: int = 1000, width: float = 1.0,
          opset: int = 17, seed: int = 0, depths: tuple[int, ...] = (2, 3, 4)) -> onnx.ModelProto:
    """LeViT-128S's shape (Graham et al. 2021): a stride-16 stem of four 3x3/2 conv-BN-
    Hardswish, then stages of widths 128, 256, 384 (x `width`) with 4, 6, 8 heads of key width
    16, attention with learned position biases, Hardswish MLPs; every Linear is LeViT's
    LinearNorm (Linear + BatchNorm1d on the flattened tokens); attention-subsample blocks
    between stages; token mean and a BatchNorm + Linear head (classifier and distillation head
    averaged). Needs size a multiple of 16, >= 64."""
    if size % 16 or size < 64:
        raise ValueError(f"levit: size {size} must be a multiple of 16, at least 64")
    b = OnnxBuilder("levit", opset, seed)
    dims = [scaled(c, width, divisor=16) for c in (128, 256, 384)]
    heads, kd = (4, 6, 8), 16
    x = b.input("input", (batch, 3, size, size))
    for i, c in enumerate((dims[0] // 8, dims[0] // 4, dims[0] // 2, dims[0])):
        x = b.conv_bn(x, c, 3, f"patch_embed.conv{i + 1}", stride=2, act=None)
        if i < 3:
            x = b.hardswish(x, f"patch_embed.act{i + 1}")
    res = size // 16
    x = b.transpose(b.reshape(x, (batch, dims[0], res * res), "flatten"), (0, 2, 1), "tokens")
    for s, (dim, h, depth) in enumerate(zip(dims, heads, depths)):
        if s:   # attention subsample: queries from every other token of every other row
            sc, prev = f"stages.{s}.downsample", dims[s - 1]
            hs = prev // kd
            k, v = _heads(b, _linear_norm(b, x, hs * (kd + 4 * kd), f"{sc}.attn_downsample.kv"),
                          hs, (kd, 4 * kd), f"{sc}.kv")
            r2 = (res - 1) // 2 + 1
            q = b.reshape(x, (batch, res, res, prev), f"{sc}.q.view")
            q = b.slice(b.slice(q, 1, 0, res, f"{sc}.q.rows", step=2), 2, 0, res,
                        f"{sc}.q.cols", step=2)
            q = b.reshape(q, (batch, r2 * r2, prev), f"{sc}.q.tokens")
            (q,) = _heads(b, _linear_norm(b, q, hs * kd, f"{sc}.attn_downsample.q.ln"), hs, (kd,),
                          f"{sc}.q")
            y = _levit_attention(b, q, k, v, r2 * r2, f"{sc}.attn_downsample")
            x, res = _linear_norm(b, y, dim, f"{sc}.attn_downsample.proj.ln"), r2
            x = b.binary("Add", x, _levit_mlp(b, x, 2, f"{sc}.res_mlp"), sc)
        for i in range(depth):
            sc = f"stages.{s}.blocks.{i}"
            q, k, v = _heads(b, _linear_norm(b, x, h * 4 * kd, f"{sc}.attn.qkv"), h,
                             (kd, kd, 2 * kd), f"{sc}.attn")
            y = _levit_attention(b, q, k, v, res * res, f"{sc}.attn")
            x = b.binary("Add", x, _linear_norm(b, y, dim, f"{sc}.attn.proj.ln", residual=True),
                         sc)
            x = b.binary("Add", x, _levit_mlp(b, x, 2, f"{sc}.mlp"), sc)
    x = b.reduce_mean(x, [1], "mean")
    x = b.batchnorm(b.reshape(x, (batch, dims[-1]), "pool"), "head.bn")
    head = b.gemm(x, num_classes, "head.linear")
    dist = b.gemm(x, num_classes, "head_dist.linear")
    b.output(b.binary("Mul", b.binary("Add", head, dist, "heads"), b.scalar("half", 0.5), "avg"))
    return b.model()


def _levit_mlp(b: OnnxBuilder, x: str, ratio: int, scope: str) -> str:
    d = b.shape(x)[-1]
    h = _linear_norm(b, x, ratio * d, f"{scope}.ln1", gain=2.0)
    return _linear_norm(b, b.hardswish(h, f"{scope}.act"), d, f"{scope}.ln2", residual=True)
