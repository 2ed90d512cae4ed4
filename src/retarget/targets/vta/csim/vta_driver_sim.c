/*
 * The VTA driver API (vta_driver.h) on retarget's C simulator (vta_csim.h).
 *
 * One simulated DRAM per process, VTA_CSIM_DRAM_BYTES large (allocated on first use; calloc
 * maps pages lazily, so an untouched DRAM costs nothing). A physical address is a byte offset
 * into it; allocations are page aligned (VTA_PAGE_BYTES, so every element size divides their
 * addresses) and start after the first page, so physical address 0 is never a buffer.
 * VTAMemAlloc returns the host address of the buffer's bytes inside the simulated DRAM, so
 * the host writes where the accelerator reads, as on a board with shared memory; the cache
 * calls are no-ops.
 *
 * VTADeviceRun runs the stream on the device's simulator, confined to the live allocations: a
 * stream that reads or writes outside every buffer the program allocated is refused at that
 * instruction, with nothing after it run. The core is the compile-time configuration below
 * (the published LOG_* parameters; pynq's by default). wait_cycles is not used: a functional
 * simulator has no clock; a stream that cannot finish is reported as a deadlock (return 1,
 * what a board reports as a timeout). VTACsimLastError() says what went wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vta_csim.h"
#include "vta_driver.h"

#ifndef VTA_LOG_BATCH
#define VTA_LOG_BATCH 0
#endif
#ifndef VTA_LOG_BLOCK_IN
#define VTA_LOG_BLOCK_IN 4
#endif
#ifndef VTA_LOG_BLOCK_OUT
#define VTA_LOG_BLOCK_OUT 4
#endif
#ifndef VTA_LOG_UOP_BUFF_SIZE
#define VTA_LOG_UOP_BUFF_SIZE 15
#endif
#ifndef VTA_LOG_INP_BUFF_SIZE
#define VTA_LOG_INP_BUFF_SIZE 15
#endif
#ifndef VTA_LOG_WGT_BUFF_SIZE
#define VTA_LOG_WGT_BUFF_SIZE 18
#endif
#ifndef VTA_LOG_ACC_BUFF_SIZE
#define VTA_LOG_ACC_BUFF_SIZE 17
#endif
#ifndef VTA_ALU_STAGE
#define VTA_ALU_STAGE 0
#endif
#ifndef VTA_CSIM_DRAM_BYTES
#define VTA_CSIM_DRAM_BYTES (1ull << 30)
#endif

typedef struct block { uint64_t start, size; } block;

static uint8_t *g_dram;
static block *g_live;        /* live allocations, sorted by start */
static size_t g_n_live, g_cap_live;
static vta_result g_last;    /* the last run's result */
static char g_error[1200];

const char *VTACsimLastError(void) { return g_error; }
const vta_result *VTACsimLastResult(void) { return &g_last; }

static void set_error(const char *what) {
  snprintf(g_error, sizeof g_error, "%s", what);
}

static int dram_ready(void) {
  if (!g_dram) g_dram = calloc(1, (size_t)VTA_CSIM_DRAM_BYTES);
  if (!g_dram) set_error("VTA simulator: cannot allocate the simulated DRAM");
  return g_dram != NULL;
}

void *VTAMemAlloc(size_t size, int cached) {
  (void)cached;
  if (!dram_ready()) return NULL;
  if (size == 0 || size > VTA_MAX_XFER) {
    snprintf(g_error, sizeof g_error, "VTAMemAlloc(%zu): size must be 1..%d bytes", size,
             VTA_MAX_XFER);
    return NULL;
  }
  uint64_t need = (size + VTA_PAGE_BYTES - 1) / VTA_PAGE_BYTES * VTA_PAGE_BYTES;
  /* first fit in the gaps between live allocations, after the reserved first page */
  uint64_t at = VTA_PAGE_BYTES;
  size_t pos = 0;
  for (; pos < g_n_live; pos++) {
    if (g_live[pos].start >= at + need) break;
    uint64_t end = g_live[pos].start + g_live[pos].size;
    if (end > at) at = end;
  }
  if (at + need > VTA_CSIM_DRAM_BYTES) {
    snprintf(g_error, sizeof g_error, "VTAMemAlloc(%zu): the simulated DRAM (%llu bytes) is full",
             size, (unsigned long long)VTA_CSIM_DRAM_BYTES);
    return NULL;
  }
  if (g_n_live == g_cap_live) {
    size_t cap = g_cap_live ? 2 * g_cap_live : 64;
    block *p = realloc(g_live, cap * sizeof *p);
    if (!p) {
      set_error("VTAMemAlloc: out of host memory");
      return NULL;
    }
    g_live = p;
    g_cap_live = cap;
  }
  memmove(g_live + pos + 1, g_live + pos, (g_n_live - pos) * sizeof *g_live);
  g_live[pos].start = at;
  g_live[pos].size = need;
  g_n_live++;
  memset(g_dram + at, 0, need);
  return g_dram + at;
}

static long find_live(const void *buf) {
  if (!g_dram) return -1;
  const uint8_t *p = buf;
  if (p < g_dram || p >= g_dram + VTA_CSIM_DRAM_BYTES) return -1;
  uint64_t off = (uint64_t)(p - g_dram);
  for (size_t i = 0; i < g_n_live; i++)
    if (g_live[i].start <= off && off < g_live[i].start + g_live[i].size) return (long)i;
  return -1;
}

void VTAMemFree(void *buf) {
  long i = find_live(buf);
  if (i < 0 || (uint8_t *)buf != g_dram + g_live[i].start) {
    snprintf(g_error, sizeof g_error, "VTAMemFree(%p): not a buffer from VTAMemAlloc", buf);
    return;
  }
  memmove(g_live + i, g_live + i + 1, (g_n_live - (size_t)i - 1) * sizeof *g_live);
  g_n_live--;
}

vta_phy_addr_t VTAMemGetPhyAddr(void *buf) {
  if (find_live(buf) < 0) {
    snprintf(g_error, sizeof g_error, "VTAMemGetPhyAddr(%p): not inside a VTAMemAlloc buffer", buf);
    return 0;
  }
  return (vta_phy_addr_t)((uint8_t *)buf - g_dram);
}

void VTAMemCopyFromHost(void *dst, const void *src, size_t size) { memcpy(dst, src, size); }
void VTAMemCopyToHost(void *dst, const void *src, size_t size) { memcpy(dst, src, size); }
void VTAFlushCache(void *vir_addr, vta_phy_addr_t phy_addr, int size) {
  (void)vir_addr, (void)phy_addr, (void)size;
}
void VTAInvalidateCache(void *vir_addr, vta_phy_addr_t phy_addr, int size) {
  (void)vir_addr, (void)phy_addr, (void)size;
}

VTADeviceHandle VTADeviceAlloc(void) {
  if (!dram_ready()) return NULL;
  vta_config cfg;
  char err[200];
  if (vta_config_derive(&cfg, VTA_LOG_BATCH, VTA_LOG_BLOCK_IN, VTA_LOG_BLOCK_OUT,
                        VTA_LOG_UOP_BUFF_SIZE, VTA_LOG_INP_BUFF_SIZE, VTA_LOG_WGT_BUFF_SIZE,
                        VTA_LOG_ACC_BUFF_SIZE, VTA_ALU_STAGE, err, sizeof err)) {
    snprintf(g_error, sizeof g_error, "VTADeviceAlloc: invalid configuration: %s", err);
    return NULL;
  }
  vta_sim *sim = vta_sim_create(&cfg, g_dram, VTA_CSIM_DRAM_BYTES);
  if (!sim) set_error("VTADeviceAlloc: out of host memory");
  return sim;
}

void VTADeviceFree(VTADeviceHandle handle) { vta_sim_free((vta_sim *)handle); }

int VTADeviceRun(VTADeviceHandle device, vta_phy_addr_t insn_phy_addr, uint32_t insn_count,
                 uint32_t wait_cycles) {
  (void)wait_cycles;
  if (!device || !g_dram) {
    set_error("VTADeviceRun: no device (VTADeviceAlloc first)");
    return VTA_ERR_ARG;
  }
  uint64_t end = (uint64_t)insn_phy_addr + 16ull * insn_count;
  long i = find_live(g_dram + (insn_phy_addr < VTA_CSIM_DRAM_BYTES ? insn_phy_addr : 0));
  if (insn_count == 0 || insn_phy_addr % 16 || i < 0 || end > g_live[i].start + g_live[i].size) {
    snprintf(g_error, sizeof g_error, "VTADeviceRun: %u instructions at physical address 0x%llx "
             "are not inside one buffer (or not 16-byte aligned)", insn_count,
             (unsigned long long)insn_phy_addr);
    return VTA_ERR_ARG;
  }
  vta_range *allowed = malloc((g_n_live ? g_n_live : 1) * sizeof *allowed);
  if (!allowed) {
    set_error("VTADeviceRun: out of host memory");
    return VTA_ERR_ARG;
  }
  for (size_t k = 0; k < g_n_live; k++) {
    allowed[k].start = g_live[k].start;
    allowed[k].end = g_live[k].start + g_live[k].size;
  }
  int st = vta_sim_run((vta_sim *)device, g_dram + insn_phy_addr, insn_count, allowed, g_n_live,
                       0, &g_last);
  free(allowed);
  if (st == VTA_OK) g_error[0] = 0;
  else vta_format_error(&g_last, g_error, sizeof g_error);
  return st;
}
