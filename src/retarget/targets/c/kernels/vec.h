/* Vector types of the hand-written micro-kernels (targets/c/kernels): one float vector of
   RT_VL lanes and the few operations the kernels use. With GCC or Clang they are vector
   extensions (__attribute__((vector_size))): -march=native turns them into AVX-512, AVX2 or
   NEON code with no intrinsics. -DRT_PORTABLE (or another compiler) gives plain C99 arrays
   and loops with the same meaning: the portable build. */
/* Every lane sums its terms in the same order whatever the vector width. The one
   multiply-add, rt_vfma, is fused (one rounding) where the build targets x86 FMA hardware
   (__FMA__: AVX2-era and later CPUs) and RT_FMA is not set to 0, in the vector build
   (AVX-512 or AVX2 intrinsics) and the portable one (C99 fmaf) alike; elsewhere it is a
   multiply then an add (GCC's -std=c99 keeps contraction off everywhere else). So builds
   with the same RT_FMA give bit-identical results, and a build with and one without FMA
   agree to rounding (docs/aot-c.md, "Fused multiply-add"). Where a CPU issues multiplies
   and adds to its FMA units, the unfused form takes two issue slots for the fused one's
   one. */
#ifndef RT_FMA
#  if defined(__FMA__)
#    define RT_FMA 1
#  else
#    define RT_FMA 0
#  endif
#endif
#if RT_FMA && !defined(RT_PORTABLE) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define RT_INLINE static inline __attribute__((always_inline))
#else
#define RT_INLINE static inline
#endif

/* A loop of a constant trip count that GCC does not unroll completely by itself (above 16
   iterations, or a body with branches), whose array must live in registers
   (rt_pointwise_cl_f32's 25 accumulators, rt_dwconv_f32's 16 transposed outputs). */
#if defined(__GNUC__) || defined(__clang__)
#define RT_UNROLL _Pragma("GCC unroll 32")
#else
#define RT_UNROLL
#endif

/* The routines' parallel loops (C99 _Pragma, so the same text builds without OpenMP). */
#ifdef _OPENMP
#define RT_PARALLEL_FOR _Pragma("omp parallel for schedule(static)")
#define RT_PARALLEL_FOR2 _Pragma("omp parallel for collapse(2) schedule(static)")
#else
#define RT_PARALLEL_FOR
#define RT_PARALLEL_FOR2
#endif

#ifndef RT_VL
#  if defined(__AVX512F__) && !defined(RT_PORTABLE)
#    define RT_VL 16
#  else
#    define RT_VL 8
#  endif
#endif

#if defined(RT_PORTABLE) || !(defined(__GNUC__) || defined(__clang__))
#define RT_VECTOR_EXTENSIONS 0
typedef struct { float v[RT_VL]; } rt_vf;
static inline rt_vf rt_vload(const float *p) { rt_vf r; memcpy(r.v, p, sizeof r.v); return r; }
static inline void rt_vstore(float *p, rt_vf a) { memcpy(p, a.v, sizeof a.v); }
static inline rt_vf rt_vbcast(float x) { rt_vf r; int l; for (l = 0; l < RT_VL; l++) r.v[l] = x; return r; }
static inline rt_vf rt_vfma(rt_vf acc, rt_vf a, float b)
#if RT_FMA
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] = fmaf(a.v[l], b, acc.v[l]); return acc; }
#else
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] += a.v[l] * b; return acc; }
#endif
static inline rt_vf rt_vfmav(rt_vf acc, rt_vf a, rt_vf b)
#if RT_FMA
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] = fmaf(a.v[l], b.v[l], acc.v[l]); return acc; }
#else
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] += a.v[l] * b.v[l]; return acc; }
#endif
typedef struct { int32_t v[RT_VL]; } rt_vi;
static inline rt_vi rt_viload(const int32_t *p) { rt_vi r; memcpy(r.v, p, sizeof r.v); return r; }
static inline void rt_vistore(int32_t *p, rt_vi a) { memcpy(p, a.v, sizeof a.v); }
static inline rt_vi rt_vizero(void) { rt_vi r; memset(r.v, 0, sizeof r.v); return r; }
static inline rt_vi rt_vimadd(rt_vi acc, rt_vi a, int32_t b)
{ int l; for (l = 0; l < RT_VL; l++) acc.v[l] += a.v[l] * b; return acc; }
#else
#define RT_VECTOR_EXTENSIONS 1
/* Loads and stores through the under-aligned vector type itself (a vector type may alias
   its element type), not a memcpy into a local: tuned for AVX2 (-march=haswell), GCC 12
   copied such a memcpy in 16-byte halves through the stack and read it back whole, a
   stalled store forward per load (ResNet-18 in 399 ms instead of ~30; docs/aot-c.md). */
typedef float rt_vf __attribute__((vector_size(RT_VL * 4), aligned(4)));
static inline rt_vf rt_vload(const float *p) { return *(const rt_vf *)p; }
static inline void rt_vstore(float *p, rt_vf a) { *(rt_vf *)p = a; }
static inline rt_vf rt_vbcast(float x) { return (rt_vf){0} + x; }
#if RT_FMA && RT_VL == 16 && defined(__AVX512F__)
static inline rt_vf rt_vfma(rt_vf acc, rt_vf a, float b)
{ return (rt_vf)_mm512_fmadd_ps((__m512)a, _mm512_set1_ps(b), (__m512)acc); }
#elif RT_FMA && RT_VL == 8 && defined(__FMA__)
static inline rt_vf rt_vfma(rt_vf acc, rt_vf a, float b)
{ return (rt_vf)_mm256_fmadd_ps((__m256)a, _mm256_set1_ps(b), (__m256)acc); }
#elif RT_FMA
#error "RT_FMA=1 needs AVX2-era FMA (x86) for these vectors; build with -DRT_FMA=0"
#else
static inline rt_vf rt_vfma(rt_vf acc, rt_vf a, float b) { return acc + a * b; }
#endif
/* rt_vfmav: rt_vfma with a vector of multipliers (one per lane), rounded as rt_vfma is */
#if RT_FMA && RT_VL == 16
static inline rt_vf rt_vfmav(rt_vf acc, rt_vf a, rt_vf b)
{ return (rt_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc); }
#elif RT_FMA
static inline rt_vf rt_vfmav(rt_vf acc, rt_vf a, rt_vf b)
{ return (rt_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc); }
#else
static inline rt_vf rt_vfmav(rt_vf acc, rt_vf a, rt_vf b) { return acc + a * b; }
#endif
typedef int32_t rt_vi __attribute__((vector_size(RT_VL * 4), aligned(4)));
static inline rt_vi rt_viload(const int32_t *p) { return *(const rt_vi *)p; }
static inline void rt_vistore(int32_t *p, rt_vi a) { *(rt_vi *)p = a; }
static inline rt_vi rt_vizero(void) { return (rt_vi){0}; }
static inline rt_vi rt_vimadd(rt_vi acc, rt_vi a, int32_t b) { return acc + a * b; }
#endif

/* The epilogue's activation, as the loop-nest IR defines max / min (b only where strictly
   larger / smaller): RT_ACT_NONE, RT_ACT_RELU (max(v, 0)), RT_ACT_CLIP (min(max(v, lo), hi)). */
#define RT_ACT_NONE 0
#define RT_ACT_RELU 1
#define RT_ACT_CLIP 2
static inline float rt_act(float v, int act, float lo, float hi)
{
    if (act == RT_ACT_RELU) return 0.0f > v ? 0.0f : v;
    if (act == RT_ACT_CLIP) { v = lo > v ? lo : v; return hi < v ? hi : v; }
    return v;
}
/* rt_act on every lane (the same comparisons, so the same bits, NaN and -0 included), and
   the loop-nest IR's max (b where strictly larger): with vector extensions a lane mask
   selects b where it is strictly larger / smaller. */
#if RT_VECTOR_EXTENSIONS
RT_INLINE rt_vf rt_vsel(rt_vi take_b, rt_vf a, rt_vf b)
{ return (rt_vf)(((rt_vi)a & ~take_b) | ((rt_vi)b & take_b)); }
RT_INLINE rt_vf rt_vmax(rt_vf a, rt_vf b) { return rt_vsel(b > a, a, b); }
RT_INLINE rt_vf rt_vact(rt_vf v, int act, float lo, float hi)
{
    rt_vf z = rt_vbcast(0.0f), l = rt_vbcast(lo), h = rt_vbcast(hi);
    if (act == RT_ACT_RELU) return rt_vsel(z > v, v, z);
    if (act == RT_ACT_CLIP) { v = rt_vsel(l > v, v, l); return rt_vsel(h < v, v, h); }
    return v;
}
#else
static inline rt_vf rt_vmax(rt_vf a, rt_vf b)
{ int l; for (l = 0; l < RT_VL; l++) a.v[l] = b.v[l] > a.v[l] ? b.v[l] : a.v[l]; return a; }
static inline rt_vf rt_vact(rt_vf v, int act, float lo, float hi)
{ int l; for (l = 0; l < RT_VL; l++) v.v[l] = rt_act(v.v[l], act, lo, hi); return v; }
#endif
static inline rt_vf rt_vadd(rt_vf a, rt_vf b)
#if RT_VECTOR_EXTENSIONS
{ return a + b; }
#else
{ int l; for (l = 0; l < RT_VL; l++) a.v[l] += b.v[l]; return a; }
#endif

/* Of the 2 RT_VL floats a, b (a's first): the even and the odd lanes (a row split into its
   two column phases), and the RT_VL lanes one before and one after b's first (a row's
   neighbouring columns without loading them again). And the int lanes of the depthwise
   flat path: where column ow + ds leaves 0 .. OW - 1 (all ones there), and ow moved on by
   `step` (below OW), wrapped back into 0 .. OW - 1. */
#if RT_VECTOR_EXTENSIONS
#  if defined(__clang__) && RT_VL == 16
#    define RT_SHUFFLE2(a, b, o) __builtin_shufflevector(a, b, o, o + 2, o + 4, o + 6, \
         o + 8, o + 10, o + 12, o + 14, o + 16, o + 18, o + 20, o + 22, o + 24, o + 26, \
         o + 28, o + 30)
#  elif defined(__clang__)
#    define RT_SHUFFLE2(a, b, o) __builtin_shufflevector(a, b, o, o + 2, o + 4, o + 6, \
         o + 8, o + 10, o + 12, o + 14)
#  elif RT_VL == 16
#    define RT_SHUFFLE2(a, b, o) __builtin_shuffle(a, b, (rt_vi){o, o + 2, o + 4, o + 6, \
         o + 8, o + 10, o + 12, o + 14, o + 16, o + 18, o + 20, o + 22, o + 24, o + 26, \
         o + 28, o + 30})
#  else
#    define RT_SHUFFLE2(a, b, o) __builtin_shuffle(a, b, (rt_vi){o, o + 2, o + 4, o + 6, \
         o + 8, o + 10, o + 12, o + 14})
#  endif
#  if defined(__clang__) && RT_VL == 16
#    define RT_SHUFFLE1(a, b, o) __builtin_shufflevector(a, b, o, o + 1, o + 2, o + 3, \
         o + 4, o + 5, o + 6, o + 7, o + 8, o + 9, o + 10, o + 11, o + 12, o + 13, o + 14, \
         o + 15)
#  elif defined(__clang__)
#    define RT_SHUFFLE1(a, b, o) __builtin_shufflevector(a, b, o, o + 1, o + 2, o + 3, \
         o + 4, o + 5, o + 6, o + 7)
#  elif RT_VL == 16
#    define RT_SHUFFLE1(a, b, o) __builtin_shuffle(a, b, (rt_vi){o, o + 1, o + 2, o + 3, \
         o + 4, o + 5, o + 6, o + 7, o + 8, o + 9, o + 10, o + 11, o + 12, o + 13, o + 14, \
         o + 15})
#  else
#    define RT_SHUFFLE1(a, b, o) __builtin_shuffle(a, b, (rt_vi){o, o + 1, o + 2, o + 3, \
         o + 4, o + 5, o + 6, o + 7})
#  endif
/* rt_vtranspose: lane j of m[i] <-> lane i of m[j]. One step per bit s of a lane number
   (s = 1, 2, 4, ...) swaps that bit between the row and the lane number of every float:
   rows i and i + s (bit s of i clear) become two two-input shuffles of themselves. */
#  define RT_TLO(c, s) (((c) & (s)) ? RT_VL + (c) - (s) : (c))
#  define RT_THI(c, s) (((c) & (s)) ? RT_VL + (c) : (c) + (s))
#  if RT_VL == 16
#    define RT_TLANES(F, s) F(0, s), F(1, s), F(2, s), F(3, s), F(4, s), F(5, s), F(6, s), \
         F(7, s), F(8, s), F(9, s), F(10, s), F(11, s), F(12, s), F(13, s), F(14, s), F(15, s)
#  else
#    define RT_TLANES(F, s) F(0, s), F(1, s), F(2, s), F(3, s), F(4, s), F(5, s), F(6, s), \
         F(7, s)
#  endif
#  if defined(__clang__)
#    define RT_TSHUF(a, b, F, s) __builtin_shufflevector(a, b, RT_TLANES(F, s))
#  else
#    define RT_TSHUF(a, b, F, s) __builtin_shuffle(a, b, (rt_vi){RT_TLANES(F, s)})
#  endif
#  define RT_TSTEP(m, s) do { int i_; for (i_ = 0; i_ < RT_VL; i_++) if (!(i_ & (s))) { \
         rt_vf lo_ = RT_TSHUF(m[i_], m[i_ + (s)], RT_TLO, s); \
         m[i_ + (s)] = RT_TSHUF(m[i_], m[i_ + (s)], RT_THI, s); m[i_] = lo_; } } while (0)
RT_INLINE void rt_vtranspose(rt_vf *m)
{
    RT_TSTEP(m, 1); RT_TSTEP(m, 2); RT_TSTEP(m, 4);
#  if RT_VL == 16
    RT_TSTEP(m, 8);
#  endif
}
RT_INLINE rt_vf rt_veven(rt_vf a, rt_vf b) { return RT_SHUFFLE2(a, b, 0); }
RT_INLINE rt_vf rt_vodd(rt_vf a, rt_vf b) { return RT_SHUFFLE2(a, b, 1); }
RT_INLINE rt_vf rt_vprev1(rt_vf a, rt_vf b) { return RT_SHUFFLE1(a, b, RT_VL - 1); }
RT_INLINE rt_vf rt_vnext1(rt_vf a, rt_vf b) { return RT_SHUFFLE1(a, b, 1); }
RT_INLINE rt_vi rt_vi_outside(rt_vi ow, int ds, rt_vi OW)
{ rt_vi c = ow + ds; return (c < 0) | (c >= OW); }
RT_INLINE rt_vi rt_vi_step(rt_vi ow, rt_vi step, rt_vi OW)
{ ow = ow + step; return ow - ((ow >= OW) & OW); }
#else
static inline void rt_vtranspose(rt_vf *m)
{
    int i, j;
    for (i = 0; i < RT_VL; i++)
        for (j = 0; j < i; j++) { float t = m[i].v[j]; m[i].v[j] = m[j].v[i]; m[j].v[i] = t; }
}
static inline rt_vf rt_veven(rt_vf a, rt_vf b)
{ int l; rt_vf r; for (l = 0; l < RT_VL; l++) r.v[l] = 2 * l < RT_VL ? a.v[2 * l] : b.v[2 * l - RT_VL]; return r; }
static inline rt_vf rt_vodd(rt_vf a, rt_vf b)
{ int l; rt_vf r; for (l = 0; l < RT_VL; l++) r.v[l] = 2 * l < RT_VL ? a.v[2 * l + 1] : b.v[2 * l + 1 - RT_VL]; return r; }
static inline rt_vf rt_vprev1(rt_vf a, rt_vf b)
{ int l; rt_vf r; r.v[0] = a.v[RT_VL - 1]; for (l = 1; l < RT_VL; l++) r.v[l] = b.v[l - 1]; return r; }
static inline rt_vf rt_vnext1(rt_vf a, rt_vf b)
{ int l; rt_vf r; for (l = 0; l + 1 < RT_VL; l++) r.v[l] = a.v[l + 1]; r.v[RT_VL - 1] = b.v[0]; return r; }
static inline rt_vf rt_vsel(rt_vi take_b, rt_vf a, rt_vf b)
{ int l; for (l = 0; l < RT_VL; l++) if (take_b.v[l]) a.v[l] = b.v[l]; return a; }
static inline rt_vi rt_vi_outside(rt_vi ow, int ds, rt_vi OW)
{ int l; for (l = 0; l < RT_VL; l++) ow.v[l] = ow.v[l] + ds < 0 || ow.v[l] + ds >= OW.v[l] ? -1 : 0; return ow; }
static inline rt_vi rt_vi_step(rt_vi ow, rt_vi step, rt_vi OW)
{ int l; for (l = 0; l < RT_VL; l++) { ow.v[l] += step.v[l]; if (ow.v[l] >= OW.v[l]) ow.v[l] -= OW.v[l]; } return ow; }
#endif
