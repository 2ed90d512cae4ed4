"""The shipped digits model: float and int8 top-1 on its held-out set (reference executor)."""
import numpy as np

from retarget import data, quantize, run


def test_shipped_files_are_small():
    for name in ("digits_cnn.onnx", "digits_test.npz", "digits_calib.npz"):
        assert (data.DATA_DIR / name).stat().st_size < 200 * 1024


def test_digits_int8_within_one_point_of_float():
    x, y = data.digits_test()
    assert x.dtype == np.float32 and x.shape[1:] == (1, 8, 8) and y.dtype == np.int64
    assert len(x) >= 300 and set(np.unique(y)) == set(range(10))
    g = data.load_digits_model(batch=len(x))
    q = quantize(g, data.digits_calibration())  # 64 images, calibrated as one batch
    ops = [n.op for n in q.nodes]
    assert "BatchNormalization" not in ops and "QAdd" in ops and "Requantize" in ops
    feed = {data.DIGITS_INPUT: x}
    float_top1 = float((run(g, feed)[data.DIGITS_OUTPUT].argmax(1) == y).mean())
    int8_top1 = float((run(q, feed)[data.DIGITS_OUTPUT].argmax(1) == y).mean())
    print(f"digits held-out top-1: float {100 * float_top1:.2f}%, int8 {100 * int8_top1:.2f}%")
    assert float_top1 > 0.95
    assert int8_top1 >= float_top1 - 0.01
