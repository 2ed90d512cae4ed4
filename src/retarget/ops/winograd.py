"""Winograd F(2x2, 3x3): a fast path for 3x3, stride-1, undilated, ungrouped float32 Conv.

Each 2x2 block of outputs is computed from a 4x4 tile of input with 16 multiplies per
(input channel, output channel) pair instead of the 36 of direct convolution (Lavin & Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016):

    Y = A^T [ (G g G^T) * (B^T d B) ] A      (* elementwise, per channel pair, summed over C)

The sum over input channels becomes 16 independent GEMMs, U[ab] (M x C) @ V[ab] (C x tiles),
so BLAS does 16/36 = 4/9 of the multiply-adds of im2col + GEMM. The transforms only add and
halve, so the result differs from direct convolution by a few float32 roundings; tests check
it against the Conv definition like every other fast path.

The transformed weights U = G g G^T are cached per weight array (they are recomputed when
the array is collected, changes shape, or its values change: each lookup compares the
weights with a private copy, which costs one read of the weights, far less than the GEMMs).
Entries of collected arrays are dropped the next time an entry is added.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np

# G of F(2x2, 3x3); kron(G, G)[a * 4 + b, i * 3 + j] = G[a, i] * G[b, j] (all exact in binary).
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_KRON_G = np.kron(_G, _G)

# Above this many cached bytes (weights + their transforms) new weights are not cached.
CACHE_LIMIT_BYTES = 512 << 20


@dataclass(slots=True)
class _Cached:
    ref: weakref.ref          # the weight array the entry belongs to (dead = stale entry)
    weights: np.ndarray       # a private copy, to notice in-place changes to the array
    transformed: np.ndarray   # U, (16, M, C) float32

    @property
    def nbytes(self) -> int:
        return self.weights.nbytes + self.transformed.nbytes


_cache: dict[int, _Cached] = {}
_cache_lock = threading.Lock()


def transform_weights(w: np.ndarray) -> np.ndarray:
    """U = G g G^T for every (output, input) channel pair: (M, C, 3, 3) -> (16, M, C),
    index a * 4 + b for row a and column b of the 4x4 transformed kernel. As one GEMM:
    U[ab, k] = sum_ij G[a, i] G[b, j] g[k, ij] = (kron(G, G) @ g^T)[ab, k], in float64
    (the kron entries are exact), rounded to float32 once."""
    m, c = w.shape[:2]
    u = _KRON_G @ w.reshape(m * c, 9).T.astype(np.float64)
    return np.ascontiguousarray(u.astype(np.float32).reshape(16, m, c))


def cached_transform(w: np.ndarray) -> np.ndarray:
    """transform_weights(w), reused across calls while `w` is alive and unchanged."""
    key = id(w)
    with _cache_lock:
        entry = _cache.get(key)
    if (entry is not None and entry.ref() is w and entry.weights.shape == w.shape
            and np.array_equal(entry.weights, w)):  # (NaN weights always miss: still right)
        return entry.transformed
    u = transform_weights(w)
    try:
        ref = weakref.ref(w)
    except TypeError:  # not weak-referenceable: do not cache
        return u
    new = _Cached(ref, w.copy(), u)
    with _cache_lock:
        # Entries of collected arrays are dropped here rather than by a weakref callback: a
        # callback runs whenever the garbage collector does, possibly inside this very block
        # on this thread, and taking the lock there would deadlock (it did, intermittently).
        for k in [k for k, e in _cache.items() if e.ref() is None]:
            del _cache[k]
        used = sum(e.nbytes for k, e in _cache.items() if k != key)
        if used + new.nbytes <= CACHE_LIMIT_BYTES:
            _cache[key] = new
    return u


def clear_cache() -> None:
    """Forget every cached weight transform."""
    with _cache_lock:
        _cache.clear()


def conv3x3_winograd(xp: np.ndarray, w: np.ndarray, out_hw: tuple[int, int]) -> np.ndarray:
    """Stride-1 3x3 convolution of the already padded float32 input `xp` (N, C, Hp, Wp),
    where Hp >= 2 * ceil(Ho / 2) + 2 and likewise for Wp, by float32 weights `w` (M, C, 3, 3).
    Returns (N, M, Ho, Wo) float32 (no bias)."""
    n, c = xp.shape[:2]
    m = w.shape[0]
    ho, wo = out_hw
    th, tw = -(-ho // 2), -(-wo // 2)  # 2x2 output tiles per axis
    if xp.shape[2] < 2 * th + 2 or xp.shape[3] < 2 * tw + 2:
        raise ValueError(f"winograd: padded input {list(xp.shape)} too small for "
                         f"{th}x{tw} output tiles")
    # V = B^T d B for all tiles at once, separably: rows of the 4x4 tiles, then columns.
    # B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
    r = [xp[:, :, i:i + 2 * th - 1:2, :] for i in range(4)]  # (N, C, th, Wp) each
    rows = (r[0] - r[2], r[1] + r[2], r[2] - r[1], r[1] - r[3])
    v = np.empty((16, n, c, th, tw), dtype=np.float32)
    for a, u in enumerate(rows):
        col = [u[..., j:j + 2 * tw - 1:2] for j in range(4)]
        np.subtract(col[0], col[2], out=v[4 * a])
        np.add(col[1], col[2], out=v[4 * a + 1])
        np.subtract(col[2], col[1], out=v[4 * a + 2])
        np.subtract(col[1], col[3], out=v[4 * a + 3])
    # The channel sum: 16 GEMMs (M x C) @ (C x tiles), one per transformed tap and image.
    prod16 = np.matmul(cached_transform(w)[:, None], v.reshape(16, n, c, th * tw))
    prod16 = prod16.reshape(4, 4, n, m, th, tw)
    # Y = A^T P A with A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]: rows first, then columns.
    s0 = prod16[0] + prod16[1] + prod16[2]  # (4, N, M, th, tw), indexed by the column b
    s1 = prod16[1] - prod16[2] - prod16[3]
    y = np.empty((n, m, th, 2, tw, 2), dtype=np.float32)
    for i, s in enumerate((s0, s1)):
        np.add(s[0] + s[1], s[2], out=y[:, :, :, i, :, 0])
        np.subtract(s[1] - s[2], s[3], out=y[:, :, :, i, :, 1])
    y = y.reshape(n, m, 2 * th, 2 * tw)
    if (2 * th, 2 * tw) != (ho, wo):  # odd output sizes: drop the last half tile
        y = np.ascontiguousarray(y[:, :, :ho, :wo])
    return y
