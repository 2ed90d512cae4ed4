"""Data shipped with retarget: the embedded demo model and its held-out digits.

`digits_cnn.onnx` is a small CNN trained by scripts/train_digits.py on scikit-learn's bundled
8x8 digits (inputs scaled to [0, 1], layout N x 1 x 8 x 8, batch axis dynamic, input "image",
output "logits"). `digits_test.npz` is the held-out split it never saw in training (x float32,
y int64); `digits_calib.npz` a small calibration split drawn from the training part (x).
`digits_vit.onnx` is a tiny ViT (scripts/train_digits_vit.py) trained on the same split; its
export folds the batch size into Reshape shapes, so load it at the batch you run.
`timm/*.onnx.gz` are timm networks as PyTorch exports them, without their weights
(scripts/export_timm.py; load them with `retarget.zoo.exported`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from ..frontend.onnx import load_onnx

DATA_DIR = Path(__file__).resolve().parent
DIGITS_MODEL = DATA_DIR / "digits_cnn.onnx"
DIGITS_VIT = DATA_DIR / "digits_vit.onnx"
DIGITS_INPUT = "image"
DIGITS_OUTPUT = "logits"


def digits_test() -> tuple[np.ndarray, np.ndarray]:
    """The held-out digits: (x float32 N x 1 x 8 x 8, y int64 N)."""
    with np.load(DATA_DIR / "digits_test.npz", allow_pickle=False) as f:
        return f["x"], f["y"]


def digits_calibration() -> np.ndarray:
    """Calibration images (float32 N x 1 x 8 x 8) from the training split."""
    with np.load(DATA_DIR / "digits_calib.npz", allow_pickle=False) as f:
        return f["x"]


def load_digits_model(batch: int = 1):
    """The shipped digits CNN as a Graph with the given batch size."""
    return load_onnx(DIGITS_MODEL, input_shapes={DIGITS_INPUT: (batch, 1, 8, 8)})
