/* TFLite's integer arithmetic (the int8-tflite number format, ops/quantized_tflite.py) as C,
   bit-exact with the reference where it gives a value: gemmlowp's fixed-point primitives on
   32-bit (and, for HARD_SWISH, 16-bit) values, every product formed in int64 so that nothing
   wraps where the reference (exact int64 arithmetic that rejects values outside int32)
   computes. Arithmetic right shift of a negative value is what GCC and Clang do; C99's
   integer division truncates towards zero, as C++'s (gemmlowp's) does. */

/* SaturatingRoundingDoublingHighMul of two `bits`-bit values: the high half of 2 a b,
   rounded to nearest with ties upwards (the nudge 1 - 2^(bits-2) when negative) or, with
   round = 0, truncated (SQDMULH); MIN * MIN, the one overflow, saturates to MAX. */
static inline int32_t rt_tfl_high_mul(int64_t a, int64_t b, int bits, int round)
{
    const int64_t min = -((int64_t)1 << (bits - 1));
    int64_t ab = a * b, nudge = 0;
    if (a == min && b == min) return (int32_t)(-min - 1);
    if (round) nudge = ab >= 0 ? (int64_t)1 << (bits - 2) : 1 - ((int64_t)1 << (bits - 2));
    return (int32_t)((ab + nudge) / ((int64_t)1 << (bits - 1)));
}

static inline int32_t rt_tfl_srdhm(int64_t a, int64_t b) { return rt_tfl_high_mul(a, b, 32, 1); }

/* RoundingDivideByPOT: x / 2^e rounded half away from zero, 0 <= e <= 31. */
static inline int32_t rt_tfl_rdbpot(int64_t x, int e)
{
    const int64_t mask = ((int64_t)1 << e) - 1;
    const int64_t threshold = (mask >> 1) + (x < 0);
    return (int32_t)((x >> e) + ((x & mask) > threshold));
}

/* x << k saturated to `bits` bits (SaturatingRoundingMultiplyByPOT with k >= 0). */
static inline int64_t rt_tfl_sat_shl(int64_t x, int k, int bits)
{
    const int64_t hi = ((int64_t)1 << (bits - 1)) - 1;
    int64_t v = x * ((int64_t)1 << k);
    return v > hi ? hi : v < -hi - 1 ? -hi - 1 : v;
}

/* MultiplyByQuantizedMultiplier: x * m * 2^(shift - 31). Two roundings (the doubling high
   multiply, then the power-of-two division: CONV_2D, ADD, MUL, MEAN, QUANTIZE) or, single,
   one rounding (half up) of the exact 64-bit product (LiteRT's FULLY_CONNECTED). */
static inline int64_t rt_tfl_mbqm(int64_t x, int32_t m, int shift, int single)
{
    if (single) {
        int total = 31 - shift;
        return (x * m + ((int64_t)1 << (total - 1))) >> total;
    }
    return rt_tfl_rdbpot(rt_tfl_srdhm(x * ((int64_t)1 << (shift > 0 ? shift : 0)), m),
                         shift < 0 ? -shift : 0);
}

static inline int8_t rt_tfl_clamp(int64_t v, int lo, int hi)
{
    return (int8_t)(v < lo ? lo : v > hi ? hi : v);
}

/* RequantizeQ31 of an int32 tensor viewed as [outer][C][inner] (channel axis in the middle):
   y = clamp(mbqm(x, m, shift) + zp, lo, hi), m and shift per channel (arrays) or per tensor
   (m0, s0 where the arrays are NULL). */
static void rt_requantize_q31(const int32_t *restrict x, const int32_t *restrict mul,
                              const int32_t *restrict shift, int8_t *restrict y,
                              ptrdiff_t outer, int C, ptrdiff_t inner, int m0, int s0, int zp,
                              int lo, int hi, int single)
{
    ptrdiff_t o, i;
    int c;
    for (o = 0; o < outer; o++)
        for (c = 0; c < C; c++) {
            const int32_t m = mul ? mul[c] : m0;
            const int s = shift ? shift[c] : s0;
            const ptrdiff_t base = (o * C + c) * inner;
            for (i = 0; i < inner; i++)
                y[base + i] = rt_tfl_clamp(rt_tfl_mbqm(x[base + i], m, s, single) + zp, lo, hi);
        }
}

/* The parameters of TFLite's int8 ADD and MUL (MUL uses only the zero points, m and s). */
typedef struct {
    int za, zb, zp, lo, hi, sa, sb, s;
    int32_t ma, mb, m;
} rt_tfl_binary;

/* TFLite's int8 ADD along a row (operand strides 0 where broadcast): each operand offset,
   scaled up by 2^20, rescaled (shifts <= 0: a rounding division) to a common scale, summed,
   rescaled to the output, offset, clamped. */
static void rt_tfl_add_row(const int8_t *a, ptrdiff_t as, const int8_t *b, ptrdiff_t bs,
                           int8_t *restrict y, ptrdiff_t n, const rt_tfl_binary *p)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        int64_t va = rt_tfl_rdbpot(rt_tfl_srdhm(((int64_t)a[i * as] - p->za) * (1 << 20), p->ma),
                                   -p->sa);
        int64_t vb = rt_tfl_rdbpot(rt_tfl_srdhm(((int64_t)b[i * bs] - p->zb) * (1 << 20), p->mb),
                                   -p->sb);
        y[i] = rt_tfl_clamp((int64_t)rt_tfl_rdbpot(rt_tfl_srdhm(va + vb, p->m), -p->s) + p->zp,
                            p->lo, p->hi);
    }
}

/* TFLite's int8 MUL along a row: clamp(mbqm((a - za) (b - zb), m, s) + zp). */
static void rt_tfl_mul_row(const int8_t *a, ptrdiff_t as, const int8_t *b, ptrdiff_t bs,
                           int8_t *restrict y, ptrdiff_t n, const rt_tfl_binary *p)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++)
        y[i] = rt_tfl_clamp(rt_tfl_mbqm(((int64_t)a[i * as] - p->za) * ((int64_t)b[i * bs] - p->zb),
                                        p->m, p->s, 0) + p->zp, p->lo, p->hi);
}

/* QAddQ31 (is_mul = 0) or QMulQ31 (is_mul = 1) with NumPy broadcasting: output dims o0..o5
   (padded in front with ones), each operand read at element strides a0..a5 / b0..b5 (0 along
   the axes it is broadcast over); the last axis is a row. */
static void rt_qbinary_q31(const int8_t *a, const int8_t *b, int8_t *restrict y, int is_mul,
                           int o0, int o1, int o2, int o3, int o4, int o5, ptrdiff_t a0,
                           ptrdiff_t a1, ptrdiff_t a2, ptrdiff_t a3, ptrdiff_t a4, ptrdiff_t a5,
                           ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t b2, ptrdiff_t b3, ptrdiff_t b4,
                           ptrdiff_t b5, int za, int32_t ma, int sa, int zb, int32_t mb, int sb,
                           int32_t m, int s, int zp, int lo, int hi)
{
    const rt_tfl_binary p = {za, zb, zp, lo, hi, sa, sb, s, ma, mb, m};
    ptrdiff_t i, j, k, l, q;
    for (i = 0; i < o0; i++)
        for (j = 0; j < o1; j++)
            for (k = 0; k < o2; k++)
                for (l = 0; l < o3; l++)
                    for (q = 0; q < o4; q++) {
                        const int8_t *ar = a + i * a0 + j * a1 + k * a2 + l * a3 + q * a4;
                        const int8_t *br = b + i * b0 + j * b1 + k * b2 + l * b3 + q * b4;
                        if (is_mul)
                            rt_tfl_mul_row(ar, a5, br, b5, y, o5, &p);
                        else
                            rt_tfl_add_row(ar, a5, br, b5, y, o5, &p);
                        y += o5;
                    }
}

/* TFLite's int8 AVERAGE_POOL_2D of an [NC][H][W] map: each window's in-bounds sum divided by
   the number of in-bounds elements, rounded half away from zero (C's division truncates, so
   (sum +- count/2) / count), clamped; windows R x S at strides (sh, sw) from (-pt, -pl). */
static void rt_avgpool_s8(const int8_t *restrict x, int8_t *restrict y, int NC, int H, int W,
                          int R, int S, int sh, int sw, int pt, int pl, int OH, int OW, int lo,
                          int hi)
{
    int p;
    RT_PARALLEL_FOR
    for (p = 0; p < NC; p++) {
        const int8_t *xp = x + (ptrdiff_t)p * H * W;
        int oh, ow, r, s;
        for (oh = 0; oh < OH; oh++)
            for (ow = 0; ow < OW; ow++) {
                int32_t sum = 0, count = 0;
                for (r = 0; r < R; r++) {
                    int ih = oh * sh + r - pt;
                    if (ih < 0 || ih >= H) continue;
                    for (s = 0; s < S; s++) {
                        int iw = ow * sw + s - pl;
                        if (iw < 0 || iw >= W) continue;
                        sum += xp[(ptrdiff_t)ih * W + iw];
                        count++;
                    }
                }
                sum = (sum > 0 ? sum + count / 2 : sum - count / 2) / count;
                y[((ptrdiff_t)p * OH + oh) * OW + ow] = rt_tfl_clamp(sum, lo, hi);
            }
    }
}

/* TFLite's int8 MEAN over the spatial axes of an [N][HW][C] (NHWC) map: the sum of x - zin
   rescaled by mbqm (the ratio includes the division by H W), offset, clamped to int8. */
static void rt_mean_s8(const int8_t *restrict x, int8_t *restrict y, int N, ptrdiff_t HW, int C,
                       int zin, int32_t m, int s, int zp)
{
    int n, c;
    ptrdiff_t i;
    for (n = 0; n < N; n++)
        for (c = 0; c < C; c++) {
            int64_t acc = 0;
            for (i = 0; i < HW; i++) acc += (int64_t)x[((ptrdiff_t)n * HW + i) * C + c] - zin;
            y[(ptrdiff_t)n * C + c] = rt_tfl_clamp(rt_tfl_mbqm(acc, m, s, 0) + zp, -128, 127);
        }
}

/* gemmlowp's exp on [-1/4, 0), Q0.31 in and out (a Taylor polynomial around -1/8). */
static int32_t rt_tfl_exp_quarter(int32_t a)
{
    const int32_t constant_term = 1895147668, one_third = 715827883;
    int64_t x = (int64_t)a + (1 << 28);
    int64_t x2 = rt_tfl_srdhm(x, x), x3 = rt_tfl_srdhm(x2, x), x4 = rt_tfl_srdhm(x2, x2);
    int64_t x4_over_4 = rt_tfl_rdbpot(x4, 2);
    int64_t poly = rt_tfl_rdbpot(rt_tfl_srdhm(x4_over_4 + x3, one_third) + x2, 1);
    return (int32_t)(constant_term + rt_tfl_srdhm(constant_term, x + poly));
}

/* exp(a) for a <= 0 in Q5.26 (softmax's 5 integer bits), result Q0.31: the exp of a mod 1/4
   times exp(-2^k) for each bit k of the rest (gemmlowp's exp_on_negative_values). */
static int32_t rt_tfl_exp_negative(int32_t a)
{
    static const int32_t barrel[7] = {1672461947, 1302514674, 790015084, 290630308, 39332535,
                                      720401, 242};                  /* exp(-2^k), k = -2..4 */
    const int frac = 26;
    const int64_t quarter = (int64_t)1 << (frac - 2);
    int64_t a_mod = (a & (quarter - 1)) - quarter, remainder = a_mod - a;
    int64_t result = rt_tfl_exp_quarter((int32_t)rt_tfl_sat_shl(a_mod, 5, 32));
    int k;
    for (k = -2; k <= 4; k++)
        if (remainder & ((int64_t)1 << (frac + k))) result = rt_tfl_srdhm(result, barrel[k + 2]);
    return a == 0 ? INT32_MAX : (int32_t)result;
}

/* 1 / (1 + a) for a in [0, 1), Q0.31 in and out: Newton-Raphson from 48/17 - 32/17 d, three
   steps (gemmlowp's one_over_one_plus_x_for_x_in_0_1). */
static int32_t rt_tfl_one_over_one_plus_x(int64_t a)
{
    int64_t half_denominator = (a + INT32_MAX + 1) / 2;     /* RoundingHalfSum(a, 1) */
    int64_t x = 1515870810 + (int64_t)rt_tfl_srdhm(half_denominator, -1010580540);
    int i;
    for (i = 0; i < 3; i++) {
        int64_t one_minus = ((int64_t)1 << 29) - rt_tfl_srdhm(half_denominator, x);
        x = x + rt_tfl_sat_shl(rt_tfl_srdhm(x, one_minus), 2, 32);
    }
    return (int32_t)rt_tfl_sat_shl(x, 1, 32);
}

/* TFLite's reference int8 SOFTMAX over rows of D (D <= 511: the final division's exponent
   stays <= 31): x - max(x) rescaled into Q5.26, exp in fixed point, the sum in Q12.19, its
   reciprocal, the output at scale 1/256 and zero point -128. */
static void rt_softmax_s8(const int8_t *restrict x, int8_t *restrict y, ptrdiff_t rows, int D,
                          int32_t m, int left, int diff_min)
{
    ptrdiff_t r;
    RT_PARALLEL_FOR
    for (r = 0; r < rows; r++) {
        const int8_t *xr = x + r * D;
        int8_t *yr = y + r * D;
        int32_t exps[511];
        int64_t total = 0;
        int j, max = xr[0], headroom;
        int32_t scale;
        for (j = 1; j < D; j++) max = xr[j] > max ? xr[j] : max;
        for (j = 0; j < D; j++) {
            int diff = xr[j] - max;
            int live = diff >= diff_min;
            int64_t shifted = (int64_t)(live ? diff : 0) * ((int64_t)1 << left);
            exps[j] = rt_tfl_exp_negative(rt_tfl_srdhm(shifted, m));
            if (live) total += rt_tfl_rdbpot(exps[j], 12);
        }
        for (headroom = 0; headroom < 32 && !(total & ((int64_t)1 << (31 - headroom)));
             headroom++) {}                                  /* leading zeros of the uint32 */
        scale = rt_tfl_one_over_one_plus_x(((total << headroom) & 0xFFFFFFFF) -
                                           ((int64_t)1 << 31));
        for (j = 0; j < D; j++) {
            int64_t out = (int64_t)rt_tfl_rdbpot(rt_tfl_srdhm(scale, exps[j]),
                                                 12 - headroom + 31 - 8) - 128;
            yr[j] = xr[j] - max >= diff_min ? rt_tfl_clamp(out, -128, 127) : -128;
        }
    }
}

/* An int8 -> int8 function as a 256-entry table (TFLite's int8 LOGISTIC): y = table[x + 128]. */
static void rt_lookup_s8(const int8_t *restrict x, const int8_t *restrict table,
                         int8_t *restrict y, ptrdiff_t n)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) y[i] = table[x[i] + 128];
}

/* TFLite's reference int8 HARD_SWISH, in 16-bit fixed point: x * relu6(x + 3) / 6. */
static void rt_hard_swish_s8(const int8_t *restrict x, int8_t *restrict y, ptrdiff_t n, int zin,
                             int zout, int out_m, int out_e, int relu_m, int relu_e)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        int64_t v = ((int64_t)x[i] - zin) * 128;                   /* the hi-res input scale */
        int64_t pre_out = rt_tfl_high_mul(v, out_m, 16, 1), reluish = v;
        if (relu_e > 0) reluish = rt_tfl_sat_shl(reluish, relu_e - 1, 16);
        reluish = rt_tfl_high_mul(reluish, relu_m, 16, 1);
        if (relu_e > 0) reluish = rt_tfl_sat_shl(reluish, 1, 16);
        if (relu_e < 0) reluish = rt_tfl_rdbpot(reluish, -relu_e);
        reluish = (reluish + (1 << 15)) >> 1;                      /* [-1, 1] -> [0, 1] */
        y[i] = rt_tfl_clamp((int64_t)rt_tfl_rdbpot(rt_tfl_high_mul(reluish, pre_out, 16, 0),
                                                   -out_e) + zout, -128, 127);
    }
}

/* TFLite's QUANTIZE float32 -> int8: clamp(round_half_away(x / s) + zp), the division in
   float32 (round() rounds half away from zero). */
static void rt_quantize_affine_s8(const float *restrict x, int8_t *restrict y, ptrdiff_t n,
                                  int zp, float s)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        float q = x[i] / s;
        double v = round((double)q) + zp;
        y[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
    }
}

/* Pad of an int8 tensor of rank <= 6 (dims d0..d5 padded in front with ones) with a constant
   `value`: output dims o0..o5, the input placed at offsets p0..p5 (every pad >= 0). */
static void rt_pad_value_s8(const int8_t *restrict x, int8_t *restrict y, int value, int d0,
                            int d1, int d2, int d3, int d4, int d5, int p0, int p1, int p2,
                            int p3, int p4, int p5, int o0, int o1, int o2, int o3, int o4,
                            int o5)
{
    const int d[6] = {d0, d1, d2, d3, d4, d5}, p[6] = {p0, p1, p2, p3, p4, p5};
    const int o[6] = {o0, o1, o2, o3, o4, o5};
    ptrdiff_t a, b, c, e, f;
    memset(y, value, (size_t)o0 * o1 * o2 * o3 * o4 * o5);
    for (a = 0; a < d[0]; a++)
        for (b = 0; b < d[1]; b++)
            for (c = 0; c < d[2]; c++)
                for (e = 0; e < d[3]; e++)
                    for (f = 0; f < d[4]; f++) {
                        ptrdiff_t row = ((((a * d[1] + b) * d[2] + c) * d[3] + e) * d[4] + f);
                        ptrdiff_t out = (((((a + p[0]) * o[1] + b + p[1]) * o[2] + c + p[2])
                                          * o[3] + e + p[3]) * o[4] + f + p[4]) * o[5] + p[5];
                        memcpy(y + out, x + row * d[5], (size_t)d[5]);
                    }
}

/* A strided view of an int8 tensor copied out (ONNX Slice, any steps): output dims o0..o5
   (padded in front with ones), y[i] = x[base + sum_k i_k t_k] with element strides t_k that
   may be negative. */
static void rt_slice_s8(const int8_t *restrict x, int8_t *restrict y, ptrdiff_t base, int o0,
                        int o1, int o2, int o3, int o4, int o5, ptrdiff_t t0, ptrdiff_t t1,
                        ptrdiff_t t2, ptrdiff_t t3, ptrdiff_t t4, ptrdiff_t t5)
{
    ptrdiff_t a, b, c, e, f, g;
    for (a = 0; a < o0; a++)
        for (b = 0; b < o1; b++)
            for (c = 0; c < o2; c++)
                for (e = 0; e < o3; e++)
                    for (f = 0; f < o4; f++) {
                        const int8_t *xs = x + base + a * t0 + b * t1 + c * t2 + e * t3 + f * t4;
                        for (g = 0; g < o5; g++) *y++ = xs[g * t5];
                    }
}

/* Cast int8 -> int32 (the offset of an int8 -> int8 QUANTIZE's input). */
static void rt_widen_s8(const int8_t *restrict x, int32_t *restrict y, ptrdiff_t n)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) y[i] = x[i];
}

/* Sub of a constant: y = x - c in int32 (two's complement wrap, as NumPy's int32). */
static void rt_sub_s32(const int32_t *restrict x, int32_t *restrict y, ptrdiff_t n, int32_t c)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) y[i] = (int32_t)(uint32_t)((uint32_t)x[i] - (uint32_t)c);
}
