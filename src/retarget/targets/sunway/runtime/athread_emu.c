/* athread_emu.c: the host emulation of athread_emu.h (pthreads). */
#define _POSIX_C_SOURCE 200809L
#ifndef RT_EMULATE
#define RT_EMULATE
#endif
#include "athread_emu.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned char *base; size_t bytes; } rt_tensor;

static int n_cpes = 64;
static size_t ldm_size = 65536;
static unsigned char *ldm_arenas;                 /* n_cpes * ldm_size */
static size_t ldm_used[RT_MAX_CPES];
static rt_counters counters[RT_MAX_CPES];
static rt_tensor tensors[RT_MAX_TENSORS];
static int n_tensors;

/* Asynchronous gets in flight, per CPE: copied only when waited for, so a read before the
   wait sees the buffer's old contents. */
typedef struct { void *ldm; const unsigned char *src; size_t bytes; } rt_pending;
static rt_pending *pending[RT_MAX_CPES];
static size_t n_pending[RT_MAX_CPES], cap_pending[RT_MAX_CPES];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int failed;
static char message[512];
static int arrived;
static unsigned long generation;

static __thread int my_id = -1;

static void fail(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&lock);
    if (!failed) {
        int n = snprintf(message, sizeof message, "cpe %d: ", my_id);
        va_start(ap, fmt);
        vsnprintf(message + n, sizeof message - (size_t)n, fmt, ap);
        va_end(ap);
        failed = 1;
    }
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    if (my_id >= 0)
        pthread_exit(NULL);        /* a CPE stops here; the MPE sees the error after join */
}

int rt_init(int cpes, size_t ldm_bytes)
{
    if (cpes < 1 || cpes > RT_MAX_CPES || ldm_bytes < 64)
        return 1;
    if (!ldm_arenas || cpes != n_cpes || ldm_bytes != ldm_size) {
        void *p = NULL;
        free(ldm_arenas);
        ldm_arenas = NULL;
        if (posix_memalign(&p, 64, (size_t)cpes * ldm_bytes) != 0)
            return 1;
        ldm_arenas = (unsigned char *)p;
    }
    n_cpes = cpes;
    ldm_size = ldm_bytes;
    return 0;
}

void rt_forget_tensors(void) { n_tensors = 0; }

rt_gmem rt_register(void *base, size_t bytes)
{
    rt_gmem h = { -1 };
    if (n_tensors < RT_MAX_TENSORS) {
        tensors[n_tensors].base = (unsigned char *)base;
        tensors[n_tensors].bytes = bytes;
        h.id = n_tensors++;
    }
    return h;
}

const char *rt_error(void) { return failed ? message : ""; }
const rt_counters *rt_cpe_counters(int cpe)
{
    return cpe >= 0 && cpe < n_cpes ? &counters[cpe] : NULL;
}

#define RT_CPE_STACK_BYTES (1u << 20)

typedef struct { void (*slave)(void *); void *para; int id; } rt_start;

static void *cpe_main(void *arg)
{
    rt_start *s = (rt_start *)arg;
    my_id = s->id;
    s->slave(s->para);
    return NULL;
}

int rt_spawn(void (*slave)(void *), void *para)
{
    pthread_t threads[RT_MAX_CPES];
    rt_start starts[RT_MAX_CPES];
    int i, started = 0;
    if (!ldm_arenas) {
        snprintf(message, sizeof message, "rt_spawn before rt_init");
        failed = 1;
        return 1;
    }
    failed = 0;
    message[0] = 0;
    arrived = 0;
    memset(counters, 0, sizeof counters);
    memset(ldm_used, 0, sizeof ldm_used);
    /* A CPE's buffers live in its LDM arena, not on its stack: 1 MiB stacks instead of the
       default 8 MiB keep 64 emulated CPEs within a small address-space limit (ulimit -v). */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, RT_CPE_STACK_BYTES);
    for (i = 0; i < n_cpes; i++) {
        starts[i].slave = slave;
        starts[i].para = para;
        starts[i].id = i;
        if (pthread_create(&threads[i], &attr, cpe_main, &starts[i]) != 0) {
            fail("cannot start CPE thread %d", i);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);
    for (i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    for (i = 0; i < n_cpes; i++) {
        if (n_pending[i] && !failed) {
            snprintf(message, sizeof message, "cpe %d: %zu asynchronous gets were never "
                     "waited for", i, n_pending[i]);
            failed = 1;
        }
        n_pending[i] = 0;
    }
    for (i = 0; i < n_cpes; i++)
        counters[i].ldm_bytes = (long long)ldm_used[i];
    return failed;
}

int rt_myid(void) { return my_id; }
int rt_cpes(void) { return n_cpes; }

void *rt_ldm_alloc(size_t bytes, const char *what)
{
    size_t at = (ldm_used[my_id] + 63) & ~(size_t)63;
    if (at + bytes > ldm_size)
        fail("LDM overflow: %s needs %zu bytes at offset %zu of the %zu-byte LDM", what, bytes,
             at, ldm_size);
    ldm_used[my_id] = at + bytes;
    return ldm_arenas + (size_t)my_id * ldm_size + at;
}

static unsigned char *global(rt_gmem h, size_t offset, size_t bytes, const char *op)
{
    if (h.id < 0 || h.id >= n_tensors)
        fail("%s: tensor handle %d is not registered for this layer", op, h.id);
    if (offset > tensors[h.id].bytes || bytes > tensors[h.id].bytes - offset)
        fail("%s: bytes [%zu, %zu) are outside tensor %d (%zu bytes)", op, offset,
             offset + bytes, h.id, tensors[h.id].bytes);
    return tensors[h.id].base + offset;
}

static void check_ldm(const void *ldm, size_t bytes, const char *op)
{
    const unsigned char *p = (const unsigned char *)ldm;
    const unsigned char *lo = ldm_arenas + (size_t)my_id * ldm_size;
    if (p < lo || p + bytes > lo + ldm_used[my_id])
        fail("%s: %zu bytes at LDM offset %td are outside this CPE's allocated LDM", op,
             bytes, p - lo);
}

void rt_dma_get(void *ldm, rt_gmem src, size_t offset, size_t bytes)
{
    unsigned char *g = global(src, offset, bytes, "dma get");
    check_ldm(ldm, bytes, "dma get");
    memcpy(ldm, g, bytes);
    counters[my_id].get_bytes += (long long)bytes;
    counters[my_id].dma_calls++;
}

void rt_dma_put(rt_gmem dst, size_t offset, const void *ldm, size_t bytes)
{
    unsigned char *g = global(dst, offset, bytes, "dma put");
    check_ldm(ldm, bytes, "dma put");
    memcpy(g, ldm, bytes);
    counters[my_id].put_bytes += (long long)bytes;
    counters[my_id].dma_calls++;
}

void rt_dma_wait(void) { /* the emulated DMA completes at once */ }

void rt_dma_iget(void *ldm, rt_gmem src, size_t offset, size_t bytes)
{
    unsigned char *g = global(src, offset, bytes, "dma iget");
    check_ldm(ldm, bytes, "dma iget");
    if (n_pending[my_id] == cap_pending[my_id]) {
        size_t cap = cap_pending[my_id] ? 2 * cap_pending[my_id] : 64;
        rt_pending *more = (rt_pending *)realloc(pending[my_id], cap * sizeof *more);
        if (!more)
            fail("dma iget: out of memory for %zu DMAs in flight", cap);
        pending[my_id] = more;
        cap_pending[my_id] = cap;
    }
    pending[my_id][n_pending[my_id]].ldm = ldm;
    pending[my_id][n_pending[my_id]].src = g;
    pending[my_id][n_pending[my_id]].bytes = bytes;
    n_pending[my_id]++;
    counters[my_id].get_bytes += (long long)bytes;
    counters[my_id].dma_calls++;
}

void rt_dma_wait_async(void)
{
    size_t i;
    for (i = 0; i < n_pending[my_id]; i++)
        memcpy(pending[my_id][i].ldm, pending[my_id][i].src, pending[my_id][i].bytes);
    n_pending[my_id] = 0;
}

void rt_sync(void)
{
    unsigned long gen;
    pthread_mutex_lock(&lock);
    gen = generation;
    if (++arrived == n_cpes) {
        arrived = 0;
        generation++;
        pthread_cond_broadcast(&wake);
    } else {
        while (gen == generation && !failed)
            pthread_cond_wait(&wake, &lock);
    }
    pthread_mutex_unlock(&lock);
    if (failed)
        pthread_exit(NULL);
}

#ifndef RT_NO_GLOBAL_ACCESS
/* The baseline's global loads and stores, for float (f) and double (d). */
#define RT_GLOBAL_ACCESS(T, S)                                                              \
    T rt_gld_##S(rt_gmem src, size_t index)                                                 \
    {                                                                                       \
        T v;                                                                                \
        memcpy(&v, global(src, index * sizeof v, sizeof v, "global load"), sizeof v);      \
        counters[my_id].gld++;                                                              \
        return v;                                                                           \
    }                                                                                       \
    T rt_gld_or_##S(rt_gmem src, int in_range, size_t index, T fill)                        \
    {                                                                                       \
        if (in_range)                                                                       \
            return rt_gld_##S(src, index);                                                  \
        counters[my_id].gld++;                                                              \
        return fill;                                                                        \
    }                                                                                       \
    void rt_gst_##S(rt_gmem dst, size_t index, T value)                                     \
    {                                                                                       \
        memcpy(global(dst, index * sizeof value, sizeof value, "global store"), &value,    \
               sizeof value);                                                               \
        counters[my_id].gst++;                                                              \
    }

RT_GLOBAL_ACCESS(float, f)
RT_GLOBAL_ACCESS(double, d)
#endif
