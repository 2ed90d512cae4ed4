#!/usr/bin/env python3
"""Train the small digits CNN shipped as retarget's embedded demo model.

Data: scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), scaled to
[0, 1]. A stratified 20% held-out split is set aside before training and never seen by it;
a calibration split for quantisation is drawn from the training part.

Network (8x8 input, about 10k parameters): conv-BN-ReLU, a residual block (two 3x3 convs with
BN, added to its input, ReLU), max-pool, conv-BN-ReLU, max-pool, Flatten, Gemm. Exported with
BatchNormalization left in (retarget folds it itself) to ONNX opset 17, batch axis dynamic.

Writes src/retarget/data/digits_cnn.onnx, digits_test.npz (x float32 N x 1 x 8 x 8, y int64)
and digits_calib.npz (x only), and prints float top-1 on the held-out set. Runs in seconds:

    python scripts/train_digits.py [--epochs 40] [--seed 0]
"""
from __future__ import annotations

import argparse
import io
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

DATA = Path(__file__).resolve().parent.parent / "src" / "retarget" / "data"
NUM_CALIB = 64
OPSET = 17


class DigitsCNN(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(1, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                                   nn.ReLU(), nn.Conv2d(w, w, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(w))
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv = nn.Sequential(nn.Conv2d(w, 2 * w, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * w), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * w * 2 * 2, 10))

    def forward(self, x):
        x = self.stem(x)
        x = self.relu(x + self.block(x))  # the residual add the accelerator must handle
        x = self.pool(x)                  # 8x8 -> 4x4
        x = self.pool(self.conv(x))       # 4x4 -> 2x2
        return self.head(x)


def splits(seed: int):
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # N x 1 x 8 x 8 in [0, 1]
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y,
                                                        random_state=seed)
    rng = np.random.default_rng(seed)
    calib = x_train[rng.choice(len(x_train), NUM_CALIB, replace=False)]
    return x_train, y_train, x_test, y_test, calib


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, seed: int) -> None:
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        sched.step()
    model.eval()


def export(model: nn.Module, path: Path) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        # PRESERVE with the module in eval mode exports inference-form BatchNormalization
        # nodes instead of folding them (EVAL would fold them into the convs), so retarget's
        # own fold_batchnorm pass is what the demo exercises.
        torch.onnx.export(model, (torch.zeros(1, 1, 8, 8),), buf, dynamo=False,
                          input_names=["image"], output_names=["logits"], opset_version=OPSET,
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.PRESERVE,
                          do_constant_folding=True)
    path.write_bytes(buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.time()
    x_train, y_train, x_test, y_test, calib = splits(args.seed)
    model = DigitsCNN()
    train(model, x_train, y_train, args.epochs, args.seed)
    with torch.no_grad():
        acc = (model(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean()
    args.out.mkdir(parents=True, exist_ok=True)
    export(model, args.out / "digits_cnn.onnx")
    np.savez_compressed(args.out / "digits_test.npz", x=x_test, y=y_test)
    np.savez_compressed(args.out / "digits_calib.npz", x=calib)
    print(f"trained in {time.time() - t0:.1f} s on {len(x_train)} images; held-out top-1 "
          f"(torch, float) = {100 * acc:.2f}% on {len(x_test)} images")
    for name in ("digits_cnn.onnx", "digits_test.npz", "digits_calib.npz"):
        print(f"  {args.out / name}: {(args.out / name).stat().st_size / 1024:.1f} KB")


if __name__ == "__main__":
    main()
