/* The integer routines of the int8 flow (ops/quantized.py), bit-exact with the reference:
   every product and sum in int32 / int64 exactly as the reference's int64 arithmetic (which
   rejects results outside int32, so the C never wraps where the reference gives a value),
   rounding as round_shift defines it. Arithmetic right shift of a negative int64 is what GCC
   and Clang do (C99 leaves it to the implementation). */

/* round(v * 2^-s): s > 0 adds 2^(s-1) then shifts right (half up; half_even takes one back
   from an odd result on an exact tie); s <= 0 multiplies by 2^-s exactly. */
static inline int64_t rt_round_shift(int64_t v, int s, int half_even)
{
    int64_t half, y;
    if (s <= 0) return v * ((int64_t)1 << -s);
    half = (int64_t)1 << (s - 1);
    y = (v + half) >> s;
    if (half_even && (v & (((int64_t)1 << s) - 1)) == half) y -= y & 1;
    return y;
}

static inline int32_t rt_saturate(int64_t v, int lo, int hi)
{
    return (int32_t)(v < lo ? lo : v > hi ? hi : v);
}

/* QuantizeP2: y = saturate(round(x * 2^f)) (half up: floor(v + 1/2); half even: rint). */
static void rt_quantize_p2(const float *restrict x, int8_t *restrict y, ptrdiff_t n, int f,
                           int half_even, int lo, int hi)
{
    double scale = ldexp(1.0, f);
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        double v = (double)x[i] * scale;
        v = half_even ? rint(v) : floor(v + 0.5);
        y[i] = (int8_t)(v < lo ? lo : v > hi ? hi : v);
    }
}

/* DequantizeP2: y = x * 2^-f, exact in double, rounded to float. */
static void rt_dequantize_p2(const int8_t *restrict x, float *restrict y, ptrdiff_t n, int f)
{
    double scale = ldexp(1.0, -f);
    ptrdiff_t i;
    for (i = 0; i < n; i++) y[i] = (float)((double)x[i] * scale);
}

/* ONNX QuantizeLinear with one scale and zero point: y = saturate(rint(x / s) + zp), the
   division in float32 as ONNX's (and the reference's) definition. */
static void rt_quantize_linear(const float *restrict x, int8_t *restrict y, ptrdiff_t n,
                               int zp, int lo, int hi, float s)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) {
        float q = x[i] / s;
        double v = rint((double)q) + zp;
        y[i] = (int8_t)(v < lo ? lo : v > hi ? hi : v);
    }
}

/* ONNX DequantizeLinear with one scale and zero point: y = (float)(x - zp) * s in float32. */
static void rt_dequantize_linear(const int8_t *restrict x, float *restrict y, ptrdiff_t n,
                                 int zp, float s)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++) y[i] = (float)(x[i] - zp) * s;
}

/* Requantize / RequantizeMul of an int32 tensor viewed as [outer][C][inner], the channel
   axis in the middle: y = saturate(round_shift(x * m, s)), m and s per channel (arrays) or
   per tensor (m0, s0 where the arrays are NULL). */
static void rt_requantize_s32(const int32_t *restrict x, const int32_t *restrict mul,
                              const int32_t *restrict shift, int8_t *restrict y, int outer,
                              int C, ptrdiff_t inner, int m0, int s0, int lo, int hi,
                              int half_even)
{
    int o, c;
    for (o = 0; o < outer; o++)
        for (c = 0; c < C; c++) {
            int m = mul ? mul[c] : m0, s = shift ? shift[c] : s0;
            const int32_t *xc = x + ((ptrdiff_t)o * C + c) * inner;
            int8_t *yc = y + ((ptrdiff_t)o * C + c) * inner;
            ptrdiff_t i;
            for (i = 0; i < inner; i++)
                yc[i] = (int8_t)rt_saturate(rt_round_shift((int64_t)xc[i] * m, s, half_even),
                                            lo, hi);
        }
}

/* QAdd / QAddMul of two same-shaped int8 tensors: y = saturate(round_shift(a * ma + b * mb,
   s)); QAdd's alignment shifts are the multipliers 2^shift_a, 2^shift_b. */
static void rt_qadd_s8(const int8_t *restrict a, const int8_t *restrict b, int8_t *restrict y,
                       ptrdiff_t n, int ma, int mb, int s, int lo, int hi, int half_even)
{
    ptrdiff_t i;
    for (i = 0; i < n; i++)
        y[i] = (int8_t)rt_saturate(rt_round_shift((int64_t)a[i] * ma + (int64_t)b[i] * mb, s,
                                                  half_even), lo, hi);
}

/* Pad of the two spatial dims of an int8 [NC][H][W] map with zeros. */
static void rt_pad_s8(const int8_t *restrict x, int8_t *restrict y, int NC, int H, int W,
                      int pt, int pl, int Hp, int Wp)
{
    int p, h;
    memset(y, 0, (size_t)NC * Hp * Wp);
    for (p = 0; p < NC; p++)
        for (h = 0; h < H; h++)
            memcpy(y + ((ptrdiff_t)p * Hp + h + pt) * Wp + pl, x + ((ptrdiff_t)p * H + h) * W,
                   (size_t)W);
}

/* Gather of an int8 tensor viewed as [outer][n][inner] along its middle axis by constant
   indices (ONNX: negative counts from the end; the planner checked every index is in
   [-n, n)): y[o][j][i] = x[o][idx[j]][i]. */
static void rt_gather_s8(const int8_t *restrict x, const int32_t *restrict idx,
                         int8_t *restrict y, ptrdiff_t outer, int n, int count, ptrdiff_t inner)
{
    ptrdiff_t o;
    int j;
    for (o = 0; o < outer; o++)
        for (j = 0; j < count; j++) {
            int k = idx[j] < 0 ? idx[j] + n : idx[j];
            memcpy(y + (o * count + j) * inner, x + (o * n + k) * inner, (size_t)inner);
        }
}

/* Transpose of an int8 tensor of rank <= 6 (its shape d0..d5 padded in front with ones):
   output axis k is input axis p_k. */
static void rt_transpose_s8(const int8_t *restrict x, int8_t *restrict y, int d0, int d1,
                            int d2, int d3, int d4, int d5, int p0, int p1, int p2, int p3,
                            int p4, int p5)
{
    const int dim[6] = {d0, d1, d2, d3, d4, d5}, perm[6] = {p0, p1, p2, p3, p4, p5};
    ptrdiff_t stride[6], od[6], os[6], a, b, c, d, e, f;
    int k;
    stride[5] = 1;
    for (k = 4; k >= 0; k--) stride[k] = stride[k + 1] * dim[k + 1];
    for (k = 0; k < 6; k++) {
        od[k] = dim[perm[k]];
        os[k] = stride[perm[k]];
    }
    for (a = 0; a < od[0]; a++)
        for (b = 0; b < od[1]; b++)
            for (c = 0; c < od[2]; c++)
                for (d = 0; d < od[3]; d++)
                    for (e = 0; e < od[4]; e++) {
                        const int8_t *xs = x + a * os[0] + b * os[1] + c * os[2] + d * os[3] +
                                           e * os[4];
                        for (f = 0; f < od[5]; f++) *y++ = xs[f * os[5]];
                    }
}

/* MaxPool (pad -128: a real element always wins) and SumPool (zero pad, int32 sums) of an
   int8 [NC][H][W] map; windows R x S at strides (sh, sw) from (-pt, -pl). */
static void rt_pool_s8(const int8_t *restrict x, void *restrict out, int is_sum, int NC, int H,
                       int W, int R, int S, int sh, int sw, int pt, int pl, int OH, int OW)
{
    int p;
    RT_PARALLEL_FOR
    for (p = 0; p < NC; p++) {
        const int8_t *xp = x + (ptrdiff_t)p * H * W;
        int oh, ow, r, s;
        for (oh = 0; oh < OH; oh++) {
            int32_t row[4096];             /* OW <= 4096 (checked by the code generator) */
            for (ow = 0; ow < OW; ow++) row[ow] = is_sum ? 0 : -128;
            for (r = 0; r < R; r++) {
                int ih = oh * sh + r - pt;
                const int8_t *xr = xp + (ptrdiff_t)ih * W;
                if (ih < 0 || ih >= H) continue;
                for (s = 0; s < S; s++) {
                    /* the columns whose tap s lies inside the row: no test in the loop */
                    int lo = pl - s > 0 ? (pl - s + sw - 1) / sw : 0;
                    int hi = (W - 1 + pl - s) / sw + 1;
                    if (W - 1 + pl - s < 0) continue;
                    if (hi > OW) hi = OW;
                    if (is_sum)
                        for (ow = lo; ow < hi; ow++) row[ow] += xr[ow * sw + s - pl];
                    else
                        for (ow = lo; ow < hi; ow++) {
                            int32_t v = xr[ow * sw + s - pl];
                            row[ow] = v > row[ow] ? v : row[ow];
                        }
                }
            }
            if (is_sum)
                memcpy((int32_t *)out + ((ptrdiff_t)p * OH + oh) * OW, row, OW * sizeof *row);
            else
                for (ow = 0; ow < OW; ow++)
                    ((int8_t *)out)[((ptrdiff_t)p * OH + oh) * OW + ow] = (int8_t)row[ow];
        }
    }
}

/* Concat as copies: `rows` rows of `row` bytes from x into y at byte offset `offset` of rows
   of `stride` bytes (one call per concatenated input). */
static void rt_copy_rows(const void *restrict x, void *restrict y, ptrdiff_t rows,
                         ptrdiff_t row, ptrdiff_t stride, ptrdiff_t offset)
{
    ptrdiff_t i;
    for (i = 0; i < rows; i++)
        memcpy((char *)y + i * stride + offset, (const char *)x + i * row, (size_t)row);
}

/* rt_conv_s8: int8 convolution (any group count) of an already padded NCHW input with int32
   accumulation, bias, and, with out_s8, the requantisation fused:
     acc[n, k, oh, ow] = bias[k] + sum_{c,r,s} x[n, g*Cg + c, oh*sh + r, ow*sw + s] * w[k, c, r, s]
     y = out_s8 ? saturate(round_shift(acc * m[k], s[k])) : acc
   Weights packed once at build time, int32, per group in blocks of RT_IKB output channels,
   the block innermost: wp[G][ceil(Kg/RT_IKB)][Cg][R][S][RT_IKB], zero past Kg. Tiles as in
   rt_conv_f32: RT_IKB channels (vector lanes) by T columns of one output row. A dense layer is
   H = W = R = S = 1. */
#define RT_IKB 16
#define RT_INV (RT_IKB / RT_VL)
#if RT_VL >= 16
#define RT_ITMAX 12
#else
#define RT_ITMAX 6
#endif

RT_INLINE void
rt_conv_s8_tile(const int8_t *restrict x, const int32_t *restrict wb, int32_t *restrict tile,
                int C, ptrdiff_t HpWp, int Wp, int R, int S, int sw, int T)
{
    rt_vi acc[RT_ITMAX][RT_INV];
    int c, r, s, j, v;
    for (j = 0; j < T; j++)
        for (v = 0; v < RT_INV; v++) acc[j][v] = rt_vizero();
    for (c = 0; c < C; c++) {
        const int8_t *xc = x + c * HpWp;
        for (r = 0; r < R; r++) {
            const int8_t *xr = xc + r * Wp;
            for (s = 0; s < S; s++) {
                rt_vi w[RT_INV];
                for (v = 0; v < RT_INV; v++) w[v] = rt_viload(wb + v * RT_VL);
                wb += RT_IKB;
                for (j = 0; j < T; j++) {
                    int32_t xv = xr[s + j * sw];
                    for (v = 0; v < RT_INV; v++) acc[j][v] = rt_vimadd(acc[j][v], w[v], xv);
                }
            }
        }
    }
    for (j = 0; j < T; j++)
        for (v = 0; v < RT_INV; v++) rt_vistore(tile + j * RT_IKB + v * RT_VL, acc[j][v]);
}

static void rt_conv_s8(const int8_t *restrict x, const int32_t *restrict wp,
                       const int32_t *restrict bias, const int32_t *restrict mul,
                       const int32_t *restrict shift, void *restrict y, int N, int C, int Hp,
                       int Wp, int K, int R, int S, int sh, int sw, int OH, int OW, int G,
                       int out_s8, int m0, int s0, int lo, int hi, int half_even)
{
    int Cg = C / G, Kg = K / G, blocks = (Kg + RT_IKB - 1) / RT_IKB;
    int n;
    for (n = 0; n < N; n++) {
        int gb, oh;
        RT_PARALLEL_FOR2
        for (gb = 0; gb < G * blocks; gb++)
            for (oh = 0; oh < OH; oh++) {
                int g = gb / blocks, kb = gb % blocks;
                RT_ALIGN64 int32_t tile[RT_ITMAX * RT_IKB];
                const int32_t *wb = wp + (ptrdiff_t)gb * Cg * R * S * RT_IKB;
                const int8_t *xrow = x + ((ptrdiff_t)n * C + (ptrdiff_t)g * Cg) * Hp * Wp
                                     + (ptrdiff_t)oh * sh * Wp;
                int ow, l, j;
                for (ow = 0; ow < OW; ow += RT_ITMAX) {
                    int T = OW - ow < RT_ITMAX ? OW - ow : RT_ITMAX;
                    const int8_t *xt = xrow + (ptrdiff_t)ow * sw;
                    switch (T) {
#define RT_ICONV_CASE(t) case t: rt_conv_s8_tile(xt, wb, tile, Cg, (ptrdiff_t)Hp * Wp, Wp, R, S, sw, t); break;
                    RT_ICONV_CASE(1) RT_ICONV_CASE(2) RT_ICONV_CASE(3) RT_ICONV_CASE(4)
                    RT_ICONV_CASE(5) RT_ICONV_CASE(6)
#if RT_ITMAX > 6
                    RT_ICONV_CASE(7) RT_ICONV_CASE(8) RT_ICONV_CASE(9) RT_ICONV_CASE(10)
                    RT_ICONV_CASE(11) RT_ICONV_CASE(12)
#endif
#undef RT_ICONV_CASE
                    }
                    for (l = 0; l < RT_IKB && kb * RT_IKB + l < Kg; l++) {
                        int k = g * Kg + kb * RT_IKB + l;
                        ptrdiff_t o = (((ptrdiff_t)n * K + k) * OH + oh) * OW + ow;
                        int32_t b = bias ? bias[k] : 0;
                        if (out_s8) {
                            int m = mul ? mul[k] : m0, s = shift ? shift[k] : s0;
                            for (j = 0; j < T; j++)
                                ((int8_t *)y)[o + j] = (int8_t)rt_saturate(rt_round_shift(
                                    (int64_t)(b + tile[j * RT_IKB + l]) * m, s, half_even), lo, hi);
                        } else {
                            for (j = 0; j < T; j++)
                                ((int32_t *)y)[o + j] = b + tile[j * RT_IKB + l];
                        }
                    }
                }
            }
    }
}

/* AVX-512 (F and BW) where the compiler targets it: the int8 rows below as intrinsics (GCC's
   generic vector extensions widen int8 to int32 lanes one element at a time); elsewhere the
   plain loops after them, which compute the same. */
#if RT_VECTOR_EXTENSIONS && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define RT_S8_AVX512 1
#else
#define RT_S8_AVX512 0
#endif

/* The output stage of `n` int32 accumulators of one channel, each plus b:
   y = saturate(round_shift((acc + b) * m, s)), exactly rt_round_shift's result. With m = 1
   (Requantize by a right shift) it stays in int32: (v >> s) + ((v >> (s - 1)) & 1) is
   floor((v + 2^(s-1)) / 2^s), bit s-1 of v being whether the remainder reaches the half,
   without the sum that could overflow; other multipliers with a right shift go through int64;
   anything else through rt_round_shift. */
static inline void rt_requantize_row(const int32_t *restrict acc, int32_t b, int n, int m,
                                     int s, int lo, int hi, int half_even, int8_t *restrict y)
{
    int i = 0;
    if (m == 1 && s >= 1 && s <= 31) {
        const int32_t half = (int32_t)((uint32_t)1 << (s - 1));
        const int32_t below = (int32_t)(((uint32_t)1 << s) - 1);
#if RT_S8_AVX512
        const __m128i sr = _mm_cvtsi32_si128(s), sr1 = _mm_cvtsi32_si128(s - 1);
        const __m512i vb = _mm512_set1_epi32(b), one = _mm512_set1_epi32(1);
        const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi);
        for (; i < n; i += 16) {               /* the last lanes masked */
            __mmask16 k = (__mmask16)(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
            __m512i v = _mm512_add_epi32(_mm512_maskz_loadu_epi32(k, acc + i), vb);
            __m512i r = _mm512_add_epi32(_mm512_sra_epi32(v, sr),
                                         _mm512_and_si512(_mm512_sra_epi32(v, sr1), one));
            if (half_even) {
                __mmask16 tie = _mm512_cmpeq_epi32_mask(
                    _mm512_and_si512(v, _mm512_set1_epi32(below)), _mm512_set1_epi32(half));
                r = _mm512_mask_sub_epi32(r, tie, r, _mm512_and_si512(r, one));
            }
            r = _mm512_min_epi32(_mm512_max_epi32(r, vlo), vhi);
            _mm_mask_storeu_epi8(y + i, k, _mm512_cvtepi32_epi8(r));
        }
#endif
        for (; i < n; i++) {
            int32_t v = acc[i] + b;
            int32_t r = (v >> s) + ((v >> (s - 1)) & 1);
            if (half_even) r -= r & ((v & below) == half);
            r = r < lo ? lo : r;
            y[i] = (int8_t)(r > hi ? hi : r);
        }
    } else if (s >= 1 && s <= 62 && !half_even) {
        const int64_t half = (int64_t)1 << (s - 1);
        for (i = 0; i < n; i++) {
            int64_t v = ((int64_t)(acc[i] + b) * m + half) >> s;
            v = v < lo ? lo : v;
            y[i] = (int8_t)(v > hi ? hi : v);
        }
    } else
        for (i = 0; i < n; i++)
            y[i] = (int8_t)rt_saturate(rt_round_shift((int64_t)(acc[i] + b) * m, s, half_even),
                                       lo, hi);
}

#if RT_S8_AVX512
/* The first n <= 16 of 16 int8 at stride sw (1 or 2; any other gathered) as int32 lanes, the
   rest zero: masked loads, so no byte past the last one used is read. */
static inline __m512i rt_load16_s8(const int8_t *p, int sw, int n)
{
    int32_t t[16] = {0};
    int l;
    if (sw == 1) return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1), p));
    if (sw == 2) {                 /* the even bytes: each 16-bit pair's low byte, sign-extended */
        __m256i v = _mm256_maskz_loadu_epi8((__mmask32)((1u << (2 * n - 1)) - 1), p);
        return _mm512_cvtepi16_epi32(_mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8));
    }
    for (l = 0; l < n; l++) t[l] = p[l * sw];
    return _mm512_loadu_si512((const void *)t);
}
#endif

/* One output row of a depthwise convolution in int32, b plus the R x S taps. With AVX-512:
   16 columns at a time (the last ones masked) in one vector of accumulators across the taps,
   row[] written once; `sw` is a constant at every call (always inlined), so strides 1 and 2
   get their own loads. Otherwise tap by tap over the row. */
RT_INLINE void rt_dw_row_s8(const int8_t *restrict xr, const int8_t *restrict wc,
                         int32_t *restrict row, int32_t b, int Wp, int R, int S, int sw, int OW)
{
    int r, s;
#if RT_S8_AVX512
    int ow0;
    for (ow0 = 0; ow0 < OW; ow0 += 16) {
        int n = OW - ow0 < 16 ? OW - ow0 : 16;
        __m512i acc = _mm512_set1_epi32(b);
        for (r = 0; r < R; r++)
            for (s = 0; s < S; s++)
                acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(
                    _mm512_set1_epi32(wc[r * S + s]),
                    rt_load16_s8(xr + (ptrdiff_t)r * Wp + (ptrdiff_t)ow0 * sw + s, sw, n)));
        _mm512_mask_storeu_epi32(row + ow0, (__mmask16)((1u << n) - 1), acc);
    }
#else
    int l;
    for (l = 0; l < OW; l++) row[l] = b;
    for (r = 0; r < R; r++)
        for (s = 0; s < S; s++) {
            const int8_t *xp = xr + (ptrdiff_t)r * Wp + s;
            int32_t wv = wc[r * S + s];
            for (l = 0; l < OW; l++) row[l] += wv * xp[(ptrdiff_t)l * sw];
        }
#endif
}

/* rt_dwconv_s8: a depthwise int8 convolution (group = C = K) of an already padded input,
   the weights as they are ([C][1][R][S] int8), bias and the output stage as rt_conv_s8.
   Each output row is accumulated in int32 over the R x S taps (rt_dw_row_s8, strides 1 and 2
   specialised), then requantised by rt_requantize_row. */
static void rt_dwconv_s8(const int8_t *restrict x, const int8_t *restrict w,
                         const int32_t *restrict bias, const int32_t *restrict mul,
                         const int32_t *restrict shift, void *restrict y, int N, int C, int Hp,
                         int Wp, int R, int S, int sh, int sw, int OH, int OW, int out_s8,
                         int m0, int s0, int lo, int hi, int half_even)
{
    int p;
    RT_PARALLEL_FOR
    for (p = 0; p < N * C; p++) {
        int c = p % C, oh;
        int m = mul ? mul[c] : m0, sft = shift ? shift[c] : s0;
        int32_t b = bias ? bias[c] : 0;
        const int8_t *xp = x + (ptrdiff_t)p * Hp * Wp;
        const int8_t *wc = w + (ptrdiff_t)c * R * S;
        for (oh = 0; oh < OH; oh++) {
            RT_ALIGN64 int32_t row[4096];  /* OW <= 4096 (checked by the code generator) */
            ptrdiff_t o = ((ptrdiff_t)p * OH + oh) * OW;
            const int8_t *xr = xp + (ptrdiff_t)oh * sh * Wp;
            if (sw == 1) rt_dw_row_s8(xr, wc, row, b, Wp, R, S, 1, OW);
            else if (sw == 2) rt_dw_row_s8(xr, wc, row, b, Wp, R, S, 2, OW);
            else rt_dw_row_s8(xr, wc, row, b, Wp, R, S, sw, OW);
            if (out_s8)
                rt_requantize_row(row, 0, OW, m, sft, lo, hi, half_even, (int8_t *)y + o);
            else
                memcpy((int32_t *)y + o, row, OW * sizeof *row);
        }
    }
}
