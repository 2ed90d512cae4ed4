/* athread_emu.h: the subset of Sunway's athread interface that retarget's generated code uses,
 * emulated on a host (RT_EMULATE, the default here) or mapped onto the real library.
 *
 * The generated code never names athread directly: it uses the RT_* layer below, so the same
 * MPE and CPE sources build for the host emulation and (untested: there is no Sunway machine
 * here) for sw5cc -host / -slave.
 *
 * Built with -DRT_EMULATE the layer is the host emulation in athread_emu.c; without it, a
 * thin mapping onto the real athread (athread_spawn/join, athread_get/put with reply words,
 * athread_syn, __thread_local LDM arrays), which we could not compile here: there is no
 * sw5cc on this machine, so that branch is written from the public athread interface only.
 *
 * What the emulation enforces, per CPE (a host thread):
 * - LDM: a 64 KB arena (RT_LDM_BYTES); RT_LDM buffers are carved out of it at the start of
 *   each spawn; over-use stops the run with an error (the generator already refuses it).
 * - Main memory only through DMA: a slave sees a tensor as an rt_gmem handle, a struct with
 *   no pointer in it, so a dereference does not compile. rt_dma_get / rt_dma_put check the
 *   byte range against the tensor's registered size and the LDM range against the arena.
 * - Global loads / stores (rt_gld / rt_gst, the OpenACC-style baseline's) are bounds-checked
 *   too, and unavailable when RT_NO_GLOBAL_ACCESS is defined (retarget's own schedule).
 * - Asynchronous gets (rt_dma_iget, double buffering): the emulation checks them when issued
 *   but copies the bytes only at rt_dma_wait_async, so code that reads a prefetched buffer
 *   before waiting for it reads stale data (and the test against the reference fails).
 * - Counters per CPE: DMA bytes in and out, DMA calls and contiguous transfers, global loads
 *   and stores, LDM bytes used; the MPE reads them after each layer.
 * Errors stop every CPE (a failed CPE wakes the others at RT_SYNC instead of deadlocking) and
 * make rt_spawn return nonzero; rt_error() says what happened.
 */
#ifndef ATHREAD_EMU_H
#define ATHREAD_EMU_H

#include <stddef.h>
#include <stdint.h>

#ifndef RT_EMULATE
/* ---- on a Sunway: the real athread (sw5cc -host / -slave). Untested here: no Sunway ---- */
#include <athread.h>
#include <string.h>

typedef struct { unsigned char *p; } rt_gmem;   /* still a struct: no accidental dereference */
typedef struct { long long get_bytes, put_bytes, dma_calls, gld, gst, ldm_bytes; } rt_counters;
#ifdef __sw_slave__
static __thread_local volatile int rt_reply = 0;   /* the DMA reply word of this CPE */
static inline int rt_myid(void) { return athread_get_id(-1); }
static inline int rt_cpes(void) { return 64; }
static inline void rt_dma_get(void *ldm, rt_gmem src, size_t offset, size_t bytes)
{
    rt_reply = 0;
    athread_get(PE_MODE, src.p + offset, ldm, (int)bytes, (void *)&rt_reply, 0, 0, 0);
    while (rt_reply != 1) {}
}
static inline void rt_dma_put(rt_gmem dst, size_t offset, const void *ldm, size_t bytes)
{
    rt_reply = 0;
    athread_put(PE_MODE, (void *)ldm, dst.p + offset, (int)bytes, (void *)&rt_reply, 0, 0);
    while (rt_reply != 1) {}
}
static inline void rt_dma_wait(void) {}
/* double buffering: gets that complete in the background, counted on their own reply word */
static __thread_local volatile int rt_async_reply = 0;
static __thread_local int rt_async_issued = 0;
static inline void rt_dma_iget(void *ldm, rt_gmem src, size_t offset, size_t bytes)
{
    athread_get(PE_MODE, src.p + offset, ldm, (int)bytes, (void *)&rt_async_reply, 0, 0, 0);
    rt_async_issued++;
}
static inline void rt_dma_wait_async(void)
{
    while (rt_async_reply != rt_async_issued) {}
    rt_async_reply = 0;
    rt_async_issued = 0;
}
static inline void rt_sync(void) { athread_syn(ARRAY_SCOPE, 0xffff); }
#ifndef RT_NO_GLOBAL_ACCESS                       /* a CPE's gld / gst: plain accesses */
#define rt_gld_f(h, i) (((const float *)(h).p)[i])
#define rt_gld_d(h, i) (((const double *)(h).p)[i])
#define rt_gld_or_f(h, ok, i, fill) ((ok) ? rt_gld_f(h, i) : (fill))
#define rt_gld_or_d(h, ok, i, fill) ((ok) ? rt_gld_d(h, i) : (fill))
#define rt_gst_f(h, i, v) (((float *)(h).p)[i] = (v))
#define rt_gst_d(h, i, v) (((double *)(h).p)[i] = (v))
#endif
#define RT_LDM(type, name, count) \
    static __thread_local type name##_ldm[count]; type *const name = name##_ldm
#else
static inline int rt_init(int cpes, size_t ldm_bytes)
{
    (void)cpes; (void)ldm_bytes;
    return athread_init();
}
static inline void rt_forget_tensors(void) {}
static inline rt_gmem rt_register(void *base, size_t bytes)
{
    rt_gmem h = { (unsigned char *)base };
    (void)bytes;
    return h;
}
static inline const char *rt_error(void) { return ""; }
static inline const rt_counters *rt_cpe_counters(int cpe)
{
    static const rt_counters none = {0, 0, 0, 0, 0, 0};   /* no counters on the chip */
    (void)cpe;
    return &none;
}
#define RT_SPAWN(layer, para) (athread_spawn(layer, para), athread_join(), 0)
#endif
#define RT_SLAVE_PROTO(layer) extern void slave_##layer(void *)

#else
/* ---- the host emulation (athread_emu.c) ------------------------------------------------- */
#define RT_MAX_CPES 256
#define RT_MAX_TENSORS 64

typedef struct { int id; } rt_gmem;   /* a main-memory tensor, as a CPE sees it */

typedef struct {
    long long get_bytes, put_bytes;   /* DMA bytes main memory -> LDM and back */
    long long dma_calls;              /* rt_dma_get / rt_dma_put calls */
    long long gld, gst;               /* global loads and stores (elements) */
    long long ldm_bytes;              /* LDM in use at the end of the layer */
} rt_counters;

#define RT_SLAVE_PROTO(layer) void slave_##layer(void *arg)
#define RT_SPAWN(layer, para) rt_spawn(slave_##layer, para)

/* ---- MPE side -------------------------------------------------------------------------- */
int rt_init(int cpes, size_t ldm_bytes);          /* athread_init; 0 on success */
void rt_forget_tensors(void);                     /* before each layer's registrations */
rt_gmem rt_register(void *base, size_t bytes);    /* a tensor the next spawn may touch */
int rt_spawn(void (*slave)(void *), void *para);  /* athread_spawn + athread_join */
const char *rt_error(void);
const rt_counters *rt_cpe_counters(int cpe);      /* after rt_spawn */

/* ---- CPE side -------------------------------------------------------------------------- */
int rt_myid(void);                                 /* _MYID */
int rt_cpes(void);
void *rt_ldm_alloc(size_t bytes, const char *what);
void rt_dma_get(void *ldm, rt_gmem src, size_t offset, size_t bytes);
void rt_dma_put(rt_gmem dst, size_t offset, const void *ldm, size_t bytes);
void rt_dma_wait(void);                            /* every DMA of this CPE has replied */
/* an asynchronous get (double buffering): checked now, the bytes land at rt_dma_wait_async */
void rt_dma_iget(void *ldm, rt_gmem src, size_t offset, size_t bytes);
void rt_dma_wait_async(void);                      /* every rt_dma_iget so far has landed */
void rt_sync(void);                                /* athread_syn over all CPEs */
#ifndef RT_NO_GLOBAL_ACCESS
float rt_gld_f(rt_gmem src, size_t index);
/* a padded read: counted as one global load; reads element `index` only when `in_range` */
float rt_gld_or_f(rt_gmem src, int in_range, size_t index, float fill);
double rt_gld_or_d(rt_gmem src, int in_range, size_t index, double fill);
void rt_gst_f(rt_gmem dst, size_t index, float value);
double rt_gld_d(rt_gmem src, size_t index);
void rt_gst_d(rt_gmem dst, size_t index, double value);
#endif

/* An LDM buffer of `count` elements of `type`, 64-byte aligned. */
#define RT_LDM(type, name, count) \
    type *const name = (type *)rt_ldm_alloc(sizeof(type) * (size_t)(count), #name)
#endif /* RT_EMULATE */

/* The share of a loop of `n` iterations that CPE `id` of `p` runs: [RT_LO, RT_HI). */
#define RT_LO(n, id, p) ((int)(((long long)(n) * (id)) / (p)))
#define RT_HI(n, id, p) ((int)(((long long)(n) * ((id) + 1)) / (p)))
#endif /* ATHREAD_EMU_H */
