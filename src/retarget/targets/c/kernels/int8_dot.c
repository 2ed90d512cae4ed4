/* rt_conv_s8_dot: an int8 convolution of group 1 (a dense layer: H = W = R = S = 1) as
   dot products of 4 input channels at a time, the AVX-512 VNNI instruction vpdpbusd (16 lanes
   of int32 += 4 u8 x s8 products each) where the compiler targets it, the same sums from
   vpmaddwd on AVX-512 BW without VNNI, plain C elsewhere:

   1. the input [N][C][H][W], zero-padded to Hp x Wp (at row pt, column pl) on the way, is
      rewritten into the scratch xs[N][ceil(C/4)][Hp][Wp][4] of unsigned bytes x + 128
      (x ^ 0x80), 4 channels of one pixel per 32-bit word, channels past C 128
      (rt_interleave4_u8);
   2. weights were packed at build time as wq[ceil(K/32)][ceil(C/4)][R][S][32][4] (int8, zero
      past K and C) with corr[k] = -128 * sum(w[k]) (int32), so that
      sum (x + 128) * w + corr = sum x * w exactly (products and sums stay far inside int32);
   3. a register tile is 32 output channels (two 16-lane vectors) by T <= RT_DTMAX output
      columns of one row: per (channel quad, r, s) one 128-byte weight load, one 32-bit
      broadcast per column, two vpdpbusd per column;
   4. the epilogue adds corr and the bias and, with out_s8, requantises like rt_conv_s8. */
#define RT_DKB 32
#define RT_DTMAX 12
#if defined(__AVX512VNNI__) && defined(__AVX512F__) && RT_VECTOR_EXTENSIONS
#include <immintrin.h>
#define RT_VNNI 1
typedef __m512i rt_dot16;
typedef __m512i rt_dot16w;       /* 64 bytes */
#define RT_DOT_ZERO() _mm512_setzero_si512()
#define RT_DOT_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define RT_DOT_STEP(acc, x4, w) _mm512_dpbusd_epi32((acc), _mm512_set1_epi32(x4), (w))
#define RT_FLAT_STEP(acc, xv, w4) _mm512_dpbusd_epi32((acc), (xv), _mm512_set1_epi32(w4))
#define RT_DOT_STORE(p, acc) _mm512_storeu_si512((void *)(p), (acc))
#elif defined(__AVX512BW__) && RT_VECTOR_EXTENSIONS
/* vpdpbusd from AVX-512 BW: the u8 bytes zero- and the s8 bytes sign-extended to int16, even
   and odd bytes apart, then vpmaddwd, whose int16 x int16 pair sums go to int32 exactly (not
   vpmaddubsw, whose u8 x s8 pair sums saturate at int16: 255 * 127 * 2 does not fit). */
#include <immintrin.h>
#define RT_VNNI 0
typedef __m512i rt_dot16;
typedef __m512i rt_dot16w;
static inline __m512i rt_dpbusd(__m512i acc, __m512i u8, __m512i s8)
{
    __m512i u_even = _mm512_and_si512(u8, _mm512_set1_epi16(0x00ff));
    __m512i u_odd = _mm512_srli_epi16(u8, 8);
    __m512i s_even = _mm512_srai_epi16(_mm512_slli_epi16(s8, 8), 8);
    __m512i s_odd = _mm512_srai_epi16(s8, 8);
    return _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_madd_epi16(u_even, s_even),
                                                  _mm512_madd_epi16(u_odd, s_odd)));
}
#define RT_DOT_ZERO() _mm512_setzero_si512()
#define RT_DOT_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define RT_DOT_STEP(acc, x4, w) rt_dpbusd((acc), _mm512_set1_epi32(x4), (w))
#define RT_FLAT_STEP(acc, xv, w4) rt_dpbusd((acc), (xv), _mm512_set1_epi32(w4))
#define RT_DOT_STORE(p, acc) _mm512_storeu_si512((void *)(p), (acc))
#else
#define RT_VNNI 0
typedef struct { int32_t v[16]; } rt_dot16;
typedef struct { int8_t b[64]; } rt_dot16w;
static inline rt_dot16 rt_dot_zero(void) { rt_dot16 r; memset(r.v, 0, sizeof r.v); return r; }
static inline rt_dot16w rt_dot_load(const int8_t *p) { rt_dot16w r; memcpy(r.b, p, 64); return r; }
static inline rt_dot16 rt_dot_step(rt_dot16 acc, int32_t x4, rt_dot16w w)
{
    unsigned char xb[4];
    int l, i;
    memcpy(xb, &x4, 4);
    for (l = 0; l < 16; l++)
        for (i = 0; i < 4; i++) acc.v[l] += (int32_t)xb[i] * (int32_t)w.b[4 * l + i];
    return acc;
}
#define RT_DOT_ZERO() rt_dot_zero()
#define RT_DOT_LOAD(p) rt_dot_load((const int8_t *)(p))
static inline rt_dot16 rt_flat_step(rt_dot16 acc, rt_dot16w xv, int32_t w4)
{
    signed char wb[4];
    int l, i;
    memcpy(wb, &w4, 4);
    for (l = 0; l < 16; l++)
        for (i = 0; i < 4; i++)
            acc.v[l] += (int32_t)(unsigned char)xv.b[4 * l + i] * (int32_t)wb[i];
    return acc;
}
#define RT_DOT_STEP(acc, x4, w) rt_dot_step((acc), (x4), (w))
#define RT_FLAT_STEP(acc, xv, w4) rt_flat_step((acc), (xv), (w4))
#define RT_DOT_STORE(p, acc) memcpy((p), (acc).v, sizeof (acc).v)
#endif

#if RT_VNNI
/* The output stage of one column of a tile, 32 channels at once in int64 lanes: exactly
   rt_saturate(rt_round_shift((acc + corr + bias) * m, s)) per channel, stored to the 32
   channel planes (`stride` bytes apart). */
typedef int64_t rt_v8l __attribute__((vector_size(64)));
typedef int32_t rt_v8i __attribute__((vector_size(32), aligned(4)));
static inline rt_v8l rt_v8l_load(const int32_t *p)   /* 8 int32, sign-extended */
{
    rt_v8i v;
    __builtin_memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, rt_v8l);
}

static inline void rt_requantize_block32(const int32_t *restrict acc, const int32_t *restrict corr,
                                         const int32_t *restrict bias, const int32_t *restrict mul,
                                         const int32_t *restrict shift, int8_t *restrict y,
                                         ptrdiff_t stride, int m0, int s0, int lo, int hi,
                                         int half_even)
{
    const rt_v8l one = {1, 1, 1, 1, 1, 1, 1, 1}, zero = {0};
    int q, l;
    for (q = 0; q < 4; q++) {
        rt_v8l v = rt_v8l_load(acc + 8 * q) + rt_v8l_load(corr + 8 * q);
        rt_v8l m = mul ? rt_v8l_load(mul + 8 * q) : zero + m0;
        rt_v8l s = shift ? rt_v8l_load(shift + 8 * q) : zero + s0;
        rt_v8l pos, sr, half, right, left, r;
        if (bias) v += rt_v8l_load(bias + 8 * q);
        v = v * m;
        pos = s > 0;                                   /* -1 where a right shift */
        sr = (s & pos) | (one & ~pos);                 /* the right shift, >= 1 */
        half = one << (sr - 1);
        right = (v + half) >> sr;
        if (half_even)
            right -= right & one & ((v & ((one << sr) - 1)) == half);
        left = v << ((-s) & ~pos);
        r = (right & pos) | (left & ~pos);
        r = (r & (r >= lo)) | ((zero + lo) & ~(r >= lo));
        r = (r & (r <= hi)) | ((zero + hi) & ~(r <= hi));
        for (l = 0; l < 8; l++) y[(8 * q + l) * stride] = (int8_t)r[l];
    }
}
#endif

/* Step 1 of rt_conv_s8_dot and rt_conv_s8_flat: C planes of H x W int8 as
   xs[ceil(C/4)][Hp][Wp] words of 4 unsigned bytes x + 128 (x ^ 0x80), the byte of channel
   4 * c4 + i at byte i of word (c4, h, w), the plane zero-padded on the way (the map at row pt,
   column pl: the pads and channels past C are 128, a zero input; the weights of channels past
   C are zero). */
static void rt_interleave4_u8(const int8_t *restrict x, int32_t *restrict xs, int C, int H,
                              int W, int pt, int pl, int Hp, int Wp)
{
    const ptrdiff_t plane = (ptrdiff_t)H * W;
    int C4 = (C + 3) / 4, c4;
    RT_PARALLEL_FOR
    for (c4 = 0; c4 < C4; c4++) {
        int32_t *xp = xs + (ptrdiff_t)c4 * Hp * Wp;
        const unsigned char *src = (const unsigned char *)x + 4 * c4 * plane;
        int h, w, i;
        for (h = 0; h < Hp; h++) {
            unsigned char *dst = (unsigned char *)(xp + (ptrdiff_t)h * Wp);
            const unsigned char *row = src + (ptrdiff_t)(h - pt) * W;
            if (h < pt || h >= pt + H) {
                memset(dst, 0x80, (size_t)Wp * 4);
                continue;
            }
            memset(dst, 0x80, (size_t)pl * 4);
            memset(dst + 4 * (pl + W), 0x80, (size_t)(Wp - pl - W) * 4);
            dst += 4 * pl;
            if (4 * c4 + 4 <= C)           /* four channels: a loop the compiler vectorises */
                for (w = 0; w < W; w++) {
                    dst[4 * w] = row[w] ^ 0x80;
                    dst[4 * w + 1] = row[plane + w] ^ 0x80;
                    dst[4 * w + 2] = row[2 * plane + w] ^ 0x80;
                    dst[4 * w + 3] = row[3 * plane + w] ^ 0x80;
                }
            else
                for (i = 0; i < 4; i++)
                    for (w = 0; w < W; w++)
                        dst[4 * w + i] = 4 * c4 + i < C ? row[i * plane + w] ^ 0x80 : 0x80;
        }
    }
}

RT_INLINE void
rt_conv_s8_dot_tile(const int32_t *restrict xs, const int8_t *restrict wb,
                    int32_t *restrict tile, int C4, ptrdiff_t HpWp, int Wp, int R, int S,
                    int sw, int T)
{
    rt_dot16 acc0[RT_DTMAX], acc1[RT_DTMAX];
    rt_dot16w w0, w1;
    int c, r, s, j;
    for (j = 0; j < T; j++) { acc0[j] = RT_DOT_ZERO(); acc1[j] = RT_DOT_ZERO(); }
    for (c = 0; c < C4; c++) {
        const int32_t *xc = xs + c * HpWp;
        for (r = 0; r < R; r++) {
            const int32_t *xr = xc + r * Wp;
            for (s = 0; s < S; s++) {
                w0 = RT_DOT_LOAD(wb);
                w1 = RT_DOT_LOAD(wb + 64);
                wb += 4 * RT_DKB;
                for (j = 0; j < T; j++) {
                    int32_t x4 = xr[s + j * sw];
                    acc0[j] = RT_DOT_STEP(acc0[j], x4, w0);
                    acc1[j] = RT_DOT_STEP(acc1[j], x4, w1);
                }
            }
        }
    }
    for (j = 0; j < T; j++) {
        RT_DOT_STORE(tile + j * RT_DKB, acc0[j]);
        RT_DOT_STORE(tile + j * RT_DKB + 16, acc1[j]);
    }
}

static void rt_conv_s8_dot(const int8_t *restrict x, const int8_t *restrict wq,
                           const int32_t *restrict corr, const int32_t *restrict bias,
                           const int32_t *restrict mul, const int32_t *restrict shift,
                           void *restrict y, int32_t *restrict xs, int N, int C, int H,
                           int W, int pt, int pl, int Hp, int Wp, int K, int R, int S, int sh,
                           int sw, int OH, int OW, int out_s8, int m0, int s0, int lo, int hi,
                           int half_even)
{
    int C4 = (C + 3) / 4, blocks = (K + RT_DKB - 1) / RT_DKB;
    ptrdiff_t HpWp = (ptrdiff_t)Hp * Wp;
    int n;
    for (n = 0; n < N; n++) {
        const int8_t *xn = x + (ptrdiff_t)n * C * H * W;
        int32_t *xsn = xs + (ptrdiff_t)n * C4 * HpWp;
        int kb, oh;
        rt_interleave4_u8(xn, xsn, C, H, W, pt, pl, Hp, Wp);
        RT_PARALLEL_FOR2
        for (kb = 0; kb < blocks; kb++)
            for (oh = 0; oh < OH; oh++) {
                RT_ALIGN64 int32_t tile[RT_DTMAX * RT_DKB];
                const int8_t *wb = wq + (ptrdiff_t)kb * C4 * R * S * RT_DKB * 4;
                const int32_t *xrow = xsn + (ptrdiff_t)oh * sh * Wp;
                int ow, l, j;
                for (ow = 0; ow < OW; ow += RT_DTMAX) {
                    int T = OW - ow < RT_DTMAX ? OW - ow : RT_DTMAX;
                    const int32_t *xt = xrow + (ptrdiff_t)ow * sw;
                    switch (T) {
#define RT_DCONV_CASE(t) case t: rt_conv_s8_dot_tile(xt, wb, tile, C4, HpWp, Wp, R, S, sw, t); break;
                    RT_DCONV_CASE(1) RT_DCONV_CASE(2) RT_DCONV_CASE(3) RT_DCONV_CASE(4)
                    RT_DCONV_CASE(5) RT_DCONV_CASE(6) RT_DCONV_CASE(7) RT_DCONV_CASE(8)
                    RT_DCONV_CASE(9) RT_DCONV_CASE(10) RT_DCONV_CASE(11) RT_DCONV_CASE(12)
#undef RT_DCONV_CASE
                    }
#if RT_VNNI
                    if (out_s8 && kb * RT_DKB + RT_DKB <= K) {   /* a full block: vectors */
                        int k0 = kb * RT_DKB;
                        ptrdiff_t o = (((ptrdiff_t)n * K + k0) * OH + oh) * OW + ow;
                        for (j = 0; j < T; j++)
                            rt_requantize_block32(tile + j * RT_DKB, corr + k0,
                                                  bias ? bias + k0 : 0, mul ? mul + k0 : 0,
                                                  shift ? shift + k0 : 0, (int8_t *)y + o + j,
                                                  (ptrdiff_t)OH * OW, m0, s0, lo, hi,
                                                  half_even);
                        continue;
                    }
#endif
                    for (l = 0; l < RT_DKB && kb * RT_DKB + l < K; l++) {
                        int k = kb * RT_DKB + l;
                        ptrdiff_t o = (((ptrdiff_t)n * K + k) * OH + oh) * OW + ow;
                        int32_t b = corr[k] + (bias ? bias[k] : 0);
                        if (out_s8) {
                            int m = mul ? mul[k] : m0, s = shift ? shift[k] : s0;
                            for (j = 0; j < T; j++)
                                ((int8_t *)y)[o + j] = (int8_t)rt_saturate(rt_round_shift(
                                    (int64_t)(b + tile[j * RT_DKB + l]) * m, s, half_even), lo, hi);
                        } else {
                            for (j = 0; j < T; j++)
                                ((int32_t *)y)[o + j] = b + tile[j * RT_DKB + l];
                        }
                    }
                }
            }
    }
}


/* rt_conv_s8_flat: a group-1 int8 convolution of stride 1 with the output positions in the
   vector lanes and the channels' dot products of 4 as in rt_conv_s8_dot, for maps where
   rt_conv_s8_dot's tiles (channels in the lanes) would leave its output stage storing one
   byte at a time and its tiles short of columns:

   1. the input, padded on the way, as rt_interleave4_u8's xs[ceil(C/4)][Hp * Wp] words
      (+ RT_FTAIL words of 128s that the last tile may read);
   2. the output positions (oh, ow) as flat positions p = oh * Wp + ow of the padded map, whose
      window (r, s) starts at xs word p + r * Wp + s: a vector of 16 consecutive p is one
      64-byte load per (channel quad, r, s), whatever the row length (positions with
      ow >= OW, between rows, are computed and dropped);
   3. a register tile is RT_FKB output channels by RT_FPV vectors of 16 positions: per
      (channel quad, r, s) RT_FPV loads, RT_FKB 4-byte weight broadcasts and RT_FKB * RT_FPV
      vpdpbusd (the positions' u8 times the weights' s8: no int16 pair sums to saturate);
   4. weights packed at build time as wf[ceil(K/RT_FKB)][ceil(C/4)][R][S][RT_FKB][4] (int8,
      zero past K and C) with corr as rt_conv_s8_dot's; the output stage adds corr and the
      bias and requantises one channel's positions at a time (rt_requantize_row), copying out
      each row's run of valid positions. */
#define RT_FKB 8
#define RT_FPV 3
#define RT_FTAIL 16
#ifndef RT_FLAT_L2
#define RT_FLAT_L2 (128 * 1024)
#endif

RT_INLINE void
rt_conv_s8_flat_tile(const int32_t *restrict xs, const int8_t *restrict wb,
                     int32_t *restrict tile, int C4, ptrdiff_t plane, int Wp, int R, int S,
                     int P)
{
    rt_dot16 acc[RT_FKB][RT_FPV];
    rt_dot16w xv[RT_FPV];
    int c, r, s, k, v;
    for (k = 0; k < RT_FKB; k++)
        for (v = 0; v < P; v++) acc[k][v] = RT_DOT_ZERO();
    for (c = 0; c < C4; c++)
        for (r = 0; r < R; r++)
            for (s = 0; s < S; s++) {
                const int32_t *xp = xs + c * plane + (ptrdiff_t)r * Wp + s;
                for (v = 0; v < P; v++) xv[v] = RT_DOT_LOAD(xp + 16 * v);
                for (k = 0; k < RT_FKB; k++) {
                    int32_t w4;
                    memcpy(&w4, wb + 4 * k, 4);
                    for (v = 0; v < P; v++) acc[k][v] = RT_FLAT_STEP(acc[k][v], xv[v], w4);
                }
                wb += 4 * RT_FKB;
            }
    for (k = 0; k < RT_FKB; k++)
        for (v = 0; v < P; v++) RT_DOT_STORE(tile + (k * RT_FPV + v) * 16, acc[k][v]);
}

static void rt_conv_s8_flat(const int8_t *restrict x, const int8_t *restrict wf,
                            const int32_t *restrict corr, const int32_t *restrict bias,
                            const int32_t *restrict mul, const int32_t *restrict shift,
                            void *restrict y, int32_t *restrict xs, int N, int C, int H,
                            int W, int pt, int pl, int Hp, int Wp, int K, int R, int S, int OH,
                            int OW, int out_s8, int m0, int s0, int lo, int hi, int half_even)
{
    int C4 = (C + 3) / 4, kts = (K + RT_FKB - 1) / RT_FKB;
    ptrdiff_t plane = (ptrdiff_t)Hp * Wp, np = (ptrdiff_t)(OH - 1) * Wp + OW;
    int tiles = (int)((np + 16 * RT_FPV - 1) / (16 * RT_FPV));
    /* the channel tiles whose weights stay in the L2 cache while every position tile passes */
    ptrdiff_t kt_bytes = (ptrdiff_t)C4 * R * S * RT_FKB * 4;
    int chunk = kt_bytes * kts <= RT_FLAT_L2 ? kts : (int)(RT_FLAT_L2 / kt_bytes) + !(RT_FLAT_L2 / kt_bytes);
    int n, i;
    for (i = 0; i < RT_FTAIL; i++) xs[C4 * plane + i] = (int32_t)0x80808080u;
    for (n = 0; n < N; n++) {
        int k0, kt, t;
        rt_interleave4_u8(x + (ptrdiff_t)n * C * H * W, xs, C, H, W, pt, pl, Hp, Wp);
        for (k0 = 0; k0 < kts; k0 += chunk)
        RT_PARALLEL_FOR2
        for (t = 0; t < tiles; t++)
            for (kt = k0; kt < (k0 + chunk < kts ? k0 + chunk : kts); kt++) {
                RT_ALIGN64 int32_t tile[RT_FKB * RT_FPV * 16];
                int8_t q[RT_FPV * 16];
                ptrdiff_t p0 = (ptrdiff_t)t * 16 * RT_FPV, pend = p0 + 16 * RT_FPV, p;
                const int8_t *wb = wf + (ptrdiff_t)kt * C4 * R * S * RT_FKB * 4;
                int k;
                if (pend > np) pend = np;
                switch ((pend - p0 + 15) / 16) {
                case 1: rt_conv_s8_flat_tile(xs + p0, wb, tile, C4, plane, Wp, R, S, 1); break;
                case 2: rt_conv_s8_flat_tile(xs + p0, wb, tile, C4, plane, Wp, R, S, 2); break;
                default: rt_conv_s8_flat_tile(xs + p0, wb, tile, C4, plane, Wp, R, S, 3);
                }
                for (k = 0; k < RT_FKB && kt * RT_FKB + k < K; k++) {
                    int kk = kt * RT_FKB + k;
                    int32_t b = corr[kk] + (bias ? bias[kk] : 0);
                    const int32_t *acc = tile + k * RT_FPV * 16;
                    ptrdiff_t base = ((ptrdiff_t)n * K + kk) * OH * OW;
                    if (out_s8)
                        rt_requantize_row(acc, b, (int)(pend - p0), mul ? mul[kk] : m0,
                                          shift ? shift[kk] : s0, lo, hi, half_even, q);
                    for (p = p0; p < pend;) {       /* each row's run of valid positions */
                        ptrdiff_t oh = p / Wp, ow = p - oh * Wp, len, j;
                        if (ow >= OW) {
                            p = (oh + 1) * Wp;
                            continue;
                        }
                        len = OW - ow < pend - p ? OW - ow : pend - p;
                        if (out_s8)
                            memcpy((int8_t *)y + base + oh * OW + ow, q + (p - p0), (size_t)len);
                        else
                            for (j = 0; j < len; j++)
                                ((int32_t *)y)[base + oh * OW + ow + j] = b + acc[p - p0 + j];
                        p += len;
                    }
                }
            }
    }
}
