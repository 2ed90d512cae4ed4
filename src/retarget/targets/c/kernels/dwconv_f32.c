/* rt_dwconv_f32: a depthwise convolution (group = C = K, one filter per channel) of an
   already padded NCHW input, the weights as they are ([C][1][R][S]), with the same fused
   epilogue as rt_conv_f32 (bias, residual add, activation):

     y[n, c, oh, ow] = act(bias[c] + sum_{r,s} x[n, c, oh*sh + r, ow*sw + s] * w[c, r, s]
                           + res[n, c, oh, ow])

   Each output row is accumulated over the R x S taps with the columns innermost (a
   contiguous or strided sweep the compiler vectorises); threads split the channel planes. */
#define RT_DW_MAX_WIDTH 4096

static void rt_dwconv_f32(const float *restrict x, const float *restrict w,
                          const float *restrict bias, const float *restrict res,
                          float *restrict y, int N, int C, int Hp, int Wp, int R, int S,
                          int sh, int sw, int OH, int OW, int act, float lo, float hi)
{
    int p;
    RT_PARALLEL_FOR
    for (p = 0; p < N * C; p++) {
        int c = p % C, oh, ow, r, s;
        const float *xp = x + (ptrdiff_t)p * Hp * Wp;
        const float *wc = w + (ptrdiff_t)c * R * S;
        for (oh = 0; oh < OH; oh++) {
            RT_ALIGN64 float row[RT_DW_MAX_WIDTH];
            ptrdiff_t o = ((ptrdiff_t)p * OH + oh) * OW;
            float b = bias ? bias[c] : 0.0f;
            for (ow = 0; ow < OW; ow++) row[ow] = 0.0f;
            for (r = 0; r < R; r++) {
                const float *xr = xp + (ptrdiff_t)(oh * sh + r) * Wp;
                for (s = 0; s < S; s++) {
                    float wv = wc[r * S + s];
                    for (ow = 0; ow < OW; ow++) row[ow] += wv * xr[ow * sw + s];
                }
            }
            for (ow = 0; ow < OW; ow++) {
                float v = b + row[ow];
                if (res) v = v + res[o + ow];
                y[o + ow] = rt_act(v, act, lo, hi);
            }
        }
    }
}
