#!/usr/bin/env python3
"""Train the tiny digits ViT shipped beside the digits CNN (the transformer-era demo model).

Same data and split as scripts/train_digits.py (scikit-learn's 8x8 digits, the same seed's
held-out 20 % never seen in training), so the shipped digits_test.npz evaluates both.

Network (about 18k parameters): 2x2 patches embedded by a conv into 16 tokens of width 32,
position embeddings, two pre-norm transformer blocks (LayerNorm, two-head self-attention
written out as timm does, GELU MLP), a final LayerNorm, mean over the tokens, Linear head.
Exported by PyTorch's TorchScript exporter at opset 17 (LayerNormalization as one op; GELU
as its Erf chain, which retarget's importer recomposes), batch axis dynamic.

Writes src/retarget/data/digits_vit.onnx and prints float top-1 on the held-out set:

    python scripts/train_digits_vit.py [--epochs 120] [--seed 0]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

from train_digits import DATA, export, splits, train


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = ((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class DigitsViT(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 2, heads: int = 2, patch: int = 2):
        super().__init__()
        self.embed = nn.Conv2d(1, dim, patch, stride=patch)
        self.pos = nn.Parameter(0.02 * torch.randn(1, (8 // patch) ** 2, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.norm(self.blocks(x)).mean(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.time()
    x_train, y_train, x_test, y_test, _ = splits(args.seed)
    model = DigitsViT()
    train(model, x_train, y_train, args.epochs, args.seed)
    with torch.no_grad():
        acc = (model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean()
    export(model, args.out / "digits_vit.onnx")
    print(f"trained in {time.time() - t0:.1f} s on {len(x_train)} images; held-out top-1 "
          f"(torch, float) = {100 * acc:.2f}% on {len(x_test)} images; "
          f"{(args.out / 'digits_vit.onnx').stat().st_size / 1024:.1f} KB")


if __name__ == "__main__":
    main()
