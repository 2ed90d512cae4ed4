/* onnxruntime's x86-64 output stages (the int8-ort number format, ops/quantized_ort.py) as C,
   bit-exact with the reference: an exact integer sum, then float32 arithmetic. Every float
   operation is one IEEE float32 operation: the library is built with -std=c99, which turns
   GCC's floating-point contraction off (vec.h), so a * b is rounded before anything is added
   to it, and the two fused multiply-adds of QLinearAdd are C99's fmaf, which rounds once.
   nearbyintf rounds to nearest, ties to even, in the default rounding mode (nothing here
   changes it), as cvtps2dq does. The values are int8: unsigned_shift.py has moved every u8
   value to q - 128, and `offset` (128) moves them back where the u8 kernel computes. */

/* clip(rint(r), lo, hi) for float32 r: the clamp in float before the conversion, so that
   a value beyond int range (or infinite) saturates instead of being undefined behaviour;
   lo and hi are small integers, exact in float32. */
static inline int32_t rt_ort_round_clamp(float r, int32_t lo, int32_t hi)
{
    r = nearbyintf(r);
    return r < (float)lo ? lo : r > (float)hi ? hi : (int32_t)r;
}

/* RequantizeOrt of an int32 tensor viewed as [outer][C][inner]: y = clip(rint(float32(x) *
   scale) + zp, lo, hi), the scale per channel (scales) or per tensor (s0 where scales is
   NULL). clip(rint(v) + zp, lo, hi) = clip(rint(v), lo - zp, hi - zp) + zp, and the integer
   range [lo - zp, hi - zp] lies inside int32, so the reference's int32 saturation of rint(v)
   never decides anything the clip does not. */
static void rt_requantize_ort(const int32_t *restrict x, const float *restrict scales,
                              int8_t *restrict y, int outer, int channels, int inner, int zp,
                              int lo, int hi, float s0)
{
    RT_PARALLEL_FOR
    for (int o = 0; o < outer; o++)
        for (int c = 0; c < channels; c++) {
            const float s = scales ? scales[c] : s0;
            const int64_t base = ((int64_t)o * channels + c) * inner;
            for (int i = 0; i < inner; i++)
                y[base + i] = (int8_t)(rt_ort_round_clamp((float)x[base + i] * s, lo - zp,
                                                          hi - zp) + zp);
        }
}

/* QLinearAddOrt: y = clip(rint(fma(outer, r_outer, fma(inner, r_inner, c)))) - offset, each
   operand read as its int8 value + offset. `inner` is the operand the kernel folds first:
   b, or a single-element operand (stride 0), as MlasQLinearAddKernelAvx2Helper does; c is
   z_y - fma(r_a, z_a, r_b z_b) + offset-shifted, computed at compile time in float32 (the
   same fma32 the reference uses). lo, hi: the kernel type's range (0, 255 for the u8
   kernel run on shifted s8 values). */
static void rt_qlinear_add_ort(const int8_t *restrict outer, const int8_t *restrict inner,
                               int8_t *restrict y, int n, int outer_stride, int inner_stride,
                               int offset, int lo, int hi, float r_outer, float r_inner,
                               float c)
{
    RT_PARALLEL_FOR
    for (int i = 0; i < n; i++) {
        const float a = (float)(outer[(int64_t)i * outer_stride] + offset);
        const float b = (float)(inner[(int64_t)i * inner_stride] + offset);
        y[i] = (int8_t)(rt_ort_round_clamp(fmaf(a, r_outer, fmaf(b, r_inner, c)), lo, hi) -
                        offset);
    }
}

/* GlobalAveragePoolOrt over [planes][count]: acc = sum(x) - zx * count in int32 (at most
   255 * count: exact below 2^31 / 255 elements, checked by the caller), then y =
   clip(rint(float32(acc) * scale) + zp) to int8. */
static void rt_global_avgpool_ort(const int8_t *restrict x, int8_t *restrict y, int planes,
                                  int count, int zx, int zp, float scale)
{
    RT_PARALLEL_FOR
    for (int p = 0; p < planes; p++) {
        const int8_t *xp = x + (int64_t)p * count;
        int32_t acc = 0;
        for (int i = 0; i < count; i++) acc += xp[i];
        acc -= zx * count;
        y[p] = (int8_t)(rt_ort_round_clamp((float)acc * scale, -128 - zp, 127 - zp) + zp);
    }
}
