/*
 * retarget's functional simulator of VTA (see vta_csim.h). The machine of the Python behavioural
 * simulator (targets/vta/sim), instruction for instruction:
 *
 * - the stream is decoded whole first (unknown opcodes, memory types, ALU opcodes), then each
 *   instruction is given its module and token queues (a LOAD of OUT, a flag the module has no
 *   neighbour for), then the work is judged, then it runs;
 * - each module runs its instructions in order, an instruction only when every queue it pops
 *   holds a token; among the runnable ones the earliest in the stream goes first, so a
 *   well-formed stream runs in program order; a stream that cannot go on is a deadlock report;
 * - an instruction is checked whole (SRAM indices of every loop iteration, DRAM bounds, the
 *   allowed ranges) before any of it runs, so a fault leaves the state of the instructions
 *   before it.
 *
 * GEMM runs on copies of INP and WGT laid out for the host's multiply-add instructions, kept
 * beside the int8 SRAMs and refreshed by every LOAD. With AVX-512 VNNI (vpdpbusd: unsigned x
 * signed bytes, four products per 32-bit lane) the inputs are stored as x + 128 (unsigned) and
 * the weights as [entry][BLOCK_IN/4][BLOCK_OUT][4], and the 128 * sum(w) the offset adds is
 * subtracted again; otherwise both are int16, the weights [entry][BLOCK_IN/2][BLOCK_OUT][2]
 * (pmaddwd, or plain C). Integer sums wrap modulo 2^32 like the hardware's accumulator, so
 * either form gives exactly the products' sum.
 */
#include "vta_csim.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define GEMM_VNNI 1
#endif
#if defined(GEMM_VNNI) || defined(__AVX2__)
#include <immintrin.h>
#endif
#ifdef GEMM_VNNI
typedef uint8_t inp_mirror_t;   /* x + 128 */
typedef int8_t wgt_mirror_t;    /* quads */
#define WGT_GROUP 4
#else
typedef int16_t inp_mirror_t;
typedef int16_t wgt_mirror_t;   /* pairs */
#define WGT_GROUP 2
#endif

/* The GEMM's inner step on VL 32-bit lanes (a GCC/Clang vector type; unsigned, so sums wrap
 * modulo 2^32 like the accumulator), for VL consecutive outputs o:
 * v_dot:  acc[o] += sum over one group j of x[j] * w[j][o] (a group is WGT_GROUP inputs, as
 *         the mirrors store them);
 * v_fix:  VNNI only: acc[o] -= 128 * sum(w[.][o]), undoing the inputs' +128 offset. */
#ifdef GEMM_VNNI
#define VL 16
#elif defined(__AVX2__)
#define VL 8
#else
#define VL 4       /* 16 bytes: what every target's vector registers (or a struct) hold */
#endif
typedef uint32_t vacc __attribute__((vector_size(VL * 4)));
static inline vacc v_zero(void) { return (vacc){0}; }
static inline vacc v_load(const int32_t *p) {
  vacc v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void v_store(int32_t *p, vacc v) { memcpy(p, &v, sizeof v); }
#ifdef GEMM_VNNI
static inline vacc v_dot(vacc a, const inp_mirror_t *x, const wgt_mirror_t *w) {
  int32_t quad;
  memcpy(&quad, x, 4);
  return (vacc)_mm512_dpbusd_epi32((__m512i)a, _mm512_set1_epi32(quad),
                                   _mm512_loadu_si512((const void *)w));
}
static inline vacc v_fix(vacc a, const int32_t *wsum) { return a - v_load(wsum); }
#else
static inline vacc v_dot(vacc a, const inp_mirror_t *x, const wgt_mirror_t *w) {
#ifdef __AVX2__
  int32_t pair;
  memcpy(&pair, x, 4);
  return a + (vacc)_mm256_madd_epi16(_mm256_set1_epi32(pair),
                                      _mm256_loadu_si256((const __m256i *)w));
#else
  for (int l = 0; l < VL; l++) a[l] += (uint32_t)(x[0] * w[2 * l] + x[1] * w[2 * l + 1]);
  return a;
#endif
}
static inline vacc v_fix(vacc a, const int32_t *wsum) { (void)wsum; return a; }
#endif

enum { OP_LOAD = 0, OP_STORE = 1, OP_GEMM = 2, OP_FINISH = 3, OP_ALU = 4 };
enum { MT_UOP = 0, MT_WGT = 1, MT_INP = 2, MT_ACC = 3, MT_OUT = 4, MT_ACC_8BIT = 5 };
enum { ALU_MIN = 0, ALU_MAX = 1, ALU_ADD = 2, ALU_SHR = 3, ALU_MUL = 4 };
enum { M_LOAD = 0, M_COMPUTE = 1, M_STORE = 2, M_ALU = 3 };
enum { Q_L2G = 0, Q_G2L = 1, Q_G2S = 2, Q_S2G = 3, Q_G2A = 4, Q_A2S = 5 };

static const char *const MODULE_NAMES[VTA_MODULES] = {"load", "compute", "store", "alu"};
static const char *const FLAG_NAMES[4] = {"pop_prev", "pop_next", "push_prev", "push_next"};
static const char *const MEM_NAMES[6] = {"UOP", "WGT", "INP", "ACC", "OUT", "ACC_8BIT"};

/* Per module, the queue of each flag (pop_prev, pop_next, push_prev, push_next); -1: none. */
static const int DEP_QUEUES[2][VTA_MODULES][4] = {
    {{-1, Q_G2L, -1, Q_L2G}, {Q_L2G, Q_S2G, Q_G2L, Q_G2S}, {Q_G2S, -1, Q_S2G, -1},
     {-1, -1, -1, -1}},
    {{-1, Q_G2L, -1, Q_L2G}, {Q_L2G, Q_S2G, Q_G2L, Q_G2A}, {Q_A2S, -1, Q_S2G, -1},
     {Q_G2A, -1, -1, Q_A2S}},
};

/* One decoded instruction. */
typedef struct insn {
  uint8_t opcode, module, mem_type, alu_op, reset, use_imm;
  uint8_t n_pop, n_push;
  int8_t pop[2], push[2];
  uint32_t sram_base, dram_base, y_size, x_size, x_stride, y_pad_0, y_pad_1, x_pad_0, x_pad_1;
  uint32_t uop_bgn, uop_end, iter_out, iter_in;
  uint32_t dst_fo, dst_fi, src_fo, src_fi, wgt_fo, wgt_fi;
  int32_t imm;
} insn;

struct vta_sim {
  vta_config cfg;
  uint8_t *dram;
  uint64_t dram_bytes;
  uint32_t *uop;          /* [uop_depth][3] */
  int8_t *inp;            /* [inp_depth][batch][block_in] */
  int8_t *wgt;            /* [wgt_depth][block_out][block_in] */
  int32_t *acc;           /* [acc_depth][batch][block_out] */
  int vector;             /* the GEMM uses the mirrors below (else plain loops on inp, wgt) */
  inp_mirror_t *inp_m;    /* [inp_depth][batch][block_in] */
  wgt_mirror_t *wgt_m;    /* [wgt_depth][block_in/G][block_out][G], G = WGT_GROUP */
  int32_t *wsum;          /* VNNI: [wgt_depth][block_out] 128 * sum over block_in of the weight */
  insn *decoded;          /* scratch for the stream being run */
  uint64_t decoded_cap;
  uint32_t *order;        /* per module, the stream positions it runs */
  uint64_t order_cap;
  const vta_range *allowed;
  size_t n_allowed;
};

/* ---- errors --------------------------------------------------------------------------------- */

static int fail(vta_result *r, int status, int kind, int64_t index, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof r->message, fmt, ap);
  va_end(ap);
  r->fault = kind;
  r->error_index = index;
  return status;
}

#define FAULT(...) fail(r, VTA_ERR_FAULT, VTA_FAULT_INSN, index, __VA_ARGS__)

void vta_format_error(const vta_result *r, char *buf, size_t size) {
  if (r->error_index >= 0 && (r->fault == VTA_FAULT_INSN || r->fault == VTA_FAULT_DECODE))
    snprintf(buf, size, "instruction #%lld: %s", (long long)r->error_index, r->message);
  else
    snprintf(buf, size, "%s", r->message);
}

/* ---- configuration -------------------------------------------------------------------------- */

static uint32_t log2_depth(uint64_t depth) {   /* bits to index `depth` entries (>= 1) */
  uint32_t w = 0;
  while (((uint64_t)1 << w) < depth) w++;
  return w ? w : 1;
}

static uint32_t pack(vta_field *f, const int *ids, const uint32_t *widths, int n, uint32_t at) {
  for (int i = 0; i < n; i++) {
    f[ids[i]].lo = at;
    f[ids[i]].width = widths[i];
    at += widths[i];
  }
  return at;
}

int vta_config_derive(vta_config *cfg, int log_batch, int log_block_in, int log_block_out,
                      int log_uop_buff, int log_inp_buff, int log_wgt_buff, int log_acc_buff,
                      int alu_stage, char *err, size_t err_size) {
  memset(cfg, 0, sizeof *cfg);
  if (log_batch < 0 || log_batch > 8 || log_block_in < 0 || log_block_in > 8 ||
      log_block_out < 0 || log_block_out > 8 || log_uop_buff < 2 || log_uop_buff > 40 ||
      log_inp_buff > 40 || log_wgt_buff > 40 || log_acc_buff > 40) {
    snprintf(err, err_size, "a LOG_* parameter is out of range");
    return -1;
  }
  cfg->batch = 1u << log_batch;
  cfg->block_in = 1u << log_block_in;
  cfg->block_out = 1u << log_block_out;
  cfg->alu_stage = alu_stage ? 1 : 0;
  uint64_t inp_elem = (uint64_t)cfg->batch * cfg->block_in;
  uint64_t wgt_elem = (uint64_t)cfg->block_out * cfg->block_in;
  uint64_t acc_elem = (uint64_t)cfg->batch * cfg->block_out * 4;
  uint64_t depths[4] = {((uint64_t)1 << log_uop_buff) / 4, ((uint64_t)1 << log_inp_buff) / inp_elem,
                        ((uint64_t)1 << log_wgt_buff) / wgt_elem,
                        ((uint64_t)1 << log_acc_buff) / acc_elem};
  for (int i = 0; i < 4; i++)
    if (depths[i] < 1 || depths[i] > 65536) {
      snprintf(err, err_size, "a buffer holds %llu entries; 1..65536 fit the 16-bit sram_base",
               (unsigned long long)depths[i]);
      return -1;
    }
  cfg->uop_depth = (uint32_t)depths[0];
  cfg->inp_depth = (uint32_t)depths[1];
  cfg->wgt_depth = (uint32_t)depths[2];
  cfg->acc_depth = (uint32_t)depths[3];
  uint32_t uop_w = log2_depth(cfg->uop_depth), inp_w = log2_depth(cfg->inp_depth);
  uint32_t wgt_w = log2_depth(cfg->wgt_depth), acc_w = log2_depth(cfg->acc_depth);
  vta_field *f = cfg->field;
  static const int common[] = {VTA_F_OPCODE, VTA_F_POP_PREV, VTA_F_POP_NEXT, VTA_F_PUSH_PREV,
                               VTA_F_PUSH_NEXT};
  static const uint32_t common_w[] = {3, 1, 1, 1, 1};
  uint32_t next = pack(f, common, common_w, 5, 0);
  static const int mem_lo[] = {VTA_F_MEM_TYPE, VTA_F_SRAM_BASE, VTA_F_DRAM_BASE};
  static const uint32_t mem_lo_w[] = {3, 16, 32};
  pack(f, mem_lo, mem_lo_w, 3, next);
  static const int mem_hi[] = {VTA_F_Y_SIZE, VTA_F_X_SIZE, VTA_F_X_STRIDE, VTA_F_Y_PAD_0,
                               VTA_F_Y_PAD_1, VTA_F_X_PAD_0, VTA_F_X_PAD_1};
  static const uint32_t mem_hi_w[] = {16, 16, 16, 4, 4, 4, 4};
  pack(f, mem_hi, mem_hi_w, 7, 64);
  static const int cmp_lo[] = {VTA_F_RESET, VTA_F_UOP_BGN, VTA_F_UOP_END, VTA_F_ITER_OUT,
                               VTA_F_ITER_IN};
  uint32_t cmp_lo_w[] = {1, uop_w, uop_w + 1, 14, 14};
  if (pack(f, cmp_lo, cmp_lo_w, 5, next) > 64) {
    snprintf(err, err_size, "uop depth %u overflows the GEMM/ALU low word", cfg->uop_depth);
    return -1;
  }
  static const int factors[] = {VTA_F_DST_FACTOR_OUT, VTA_F_DST_FACTOR_IN, VTA_F_SRC_FACTOR_OUT,
                                VTA_F_SRC_FACTOR_IN};
  uint32_t factors_w[] = {acc_w, acc_w, inp_w, inp_w};
  uint32_t fac_end = pack(f, factors, factors_w, 4, 64);
  static const int wgt_f[] = {VTA_F_WGT_FACTOR_OUT, VTA_F_WGT_FACTOR_IN};
  uint32_t wgt_f_w[] = {wgt_w, wgt_w};
  static const int alu_f[] = {VTA_F_ALU_OP, VTA_F_USE_IMM, VTA_F_IMM};
  static const uint32_t alu_f_w[] = {3, 1, 16};
  if (pack(f, wgt_f, wgt_f_w, 2, fac_end) > 128 || pack(f, alu_f, alu_f_w, 3, fac_end) > 128) {
    snprintf(err, err_size, "the loop factors overflow the GEMM/ALU high word");
    return -1;
  }
  static const int uop_f[] = {VTA_F_UOP_DST, VTA_F_UOP_SRC, VTA_F_UOP_WGT};
  uint32_t uop_f_w[] = {acc_w, inp_w > acc_w ? inp_w : acc_w, wgt_w};
  if (pack(f, uop_f, uop_f_w, 3, 0) > 32) {
    snprintf(err, err_size, "a micro-op's indices need more than 32 bits");
    return -1;
  }
  return 0;
}

/* ---- creation ------------------------------------------------------------------------------- */

static int vector_ok(const vta_config *c) {
#ifdef GEMM_VNNI
  return c->block_in % 4 == 0 && c->block_out % 16 == 0;
#else
  return c->block_in % 2 == 0 && c->block_out % VL == 0;
#endif
}

vta_sim *vta_sim_create(const vta_config *cfg, uint8_t *dram, uint64_t dram_bytes) {
  vta_sim *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cfg = *cfg;
  const vta_config *c = &s->cfg;
  s->dram = dram;
  s->dram_bytes = dram_bytes;
  uint64_t inp_n = (uint64_t)c->inp_depth * c->batch * c->block_in;
  uint64_t wgt_n = (uint64_t)c->wgt_depth * c->block_out * c->block_in;
  uint64_t acc_n = (uint64_t)c->acc_depth * c->batch * c->block_out;
  s->uop = calloc((size_t)c->uop_depth * 3, sizeof *s->uop);
  s->inp = calloc(inp_n, 1);
  s->wgt = calloc(wgt_n, 1);
  s->acc = calloc(acc_n, sizeof *s->acc);
  s->vector = vector_ok(c);
  s->inp_m = calloc(s->vector ? inp_n : 1, sizeof *s->inp_m);
  s->wgt_m = calloc(s->vector ? wgt_n : 1, sizeof *s->wgt_m);
  s->wsum = calloc(s->vector ? (size_t)c->wgt_depth * c->block_out : 1, sizeof *s->wsum);
  if (!s->uop || !s->inp || !s->wgt || !s->acc || !s->inp_m || !s->wgt_m || !s->wsum) {
    vta_sim_free(s);
    return NULL;
  }
#ifdef GEMM_VNNI
  if (s->vector) memset(s->inp_m, 0x80, inp_n);   /* the mirror of 0 */
#endif
  return s;
}

void vta_sim_free(vta_sim *s) {
  if (!s) return;
  free(s->uop);
  free(s->inp);
  free(s->wgt);
  free(s->acc);
  free(s->inp_m);
  free(s->wgt_m);
  free(s->wsum);
  free(s->decoded);
  free(s->order);
  free(s);
}

void vta_sim_set_dram(vta_sim *s, uint8_t *dram, uint64_t dram_bytes) {
  s->dram = dram;
  s->dram_bytes = dram_bytes;
}

void *vta_sim_sram(vta_sim *s, int which, uint64_t *nbytes) {
  const vta_config *c = &s->cfg;
  switch (which) {
    case VTA_SRAM_UOP: *nbytes = (uint64_t)c->uop_depth * 3 * 4; return s->uop;
    case VTA_SRAM_INP: *nbytes = (uint64_t)c->inp_depth * c->batch * c->block_in; return s->inp;
    case VTA_SRAM_WGT: *nbytes = (uint64_t)c->wgt_depth * c->block_out * c->block_in; return s->wgt;
    case VTA_SRAM_ACC: *nbytes = (uint64_t)c->acc_depth * c->batch * c->block_out * 4; return s->acc;
    default: *nbytes = 0; return NULL;
  }
}

int vta_csim_abi(void) { return VTA_CSIM_ABI; }
size_t vta_sizeof_result(void) { return sizeof(vta_result); }
size_t vta_sizeof_config(void) { return sizeof(vta_config); }

/* ---- decoding ------------------------------------------------------------------------------- */

static inline uint32_t get(const vta_config *c, uint64_t lo, uint64_t hi, int id) {
  vta_field f = c->field[id];
  uint64_t w = f.lo >= 64 ? hi >> (f.lo - 64) : lo >> f.lo;
  return (uint32_t)(w & ((f.width >= 64 ? ~0ull : (1ull << f.width) - 1)));
}

static inline uint64_t load_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint64_t dram_elem_bytes(const vta_config *c, int mem_type) {
  switch (mem_type) {
    case MT_UOP: return 4;
    case MT_INP: return (uint64_t)c->batch * c->block_in;
    case MT_WGT: return (uint64_t)c->block_out * c->block_in;
    case MT_ACC: return (uint64_t)c->batch * c->block_out * 4;
    default: return (uint64_t)c->batch * c->block_out;   /* OUT, ACC_8BIT: one byte per lane */
  }
}

/* The unsigned 32-bit fields of a LOAD/STORE, and the loop fields GEMM and ALU share, as
 * (field, where it goes in `insn`). */
typedef struct field_slot { int field; size_t at; } field_slot;
static const field_slot MEM_SLOTS[] = {
    {VTA_F_SRAM_BASE, offsetof(insn, sram_base)}, {VTA_F_DRAM_BASE, offsetof(insn, dram_base)},
    {VTA_F_Y_SIZE, offsetof(insn, y_size)},       {VTA_F_X_SIZE, offsetof(insn, x_size)},
    {VTA_F_X_STRIDE, offsetof(insn, x_stride)},   {VTA_F_Y_PAD_0, offsetof(insn, y_pad_0)},
    {VTA_F_Y_PAD_1, offsetof(insn, y_pad_1)},     {VTA_F_X_PAD_0, offsetof(insn, x_pad_0)},
    {VTA_F_X_PAD_1, offsetof(insn, x_pad_1)}};
static const field_slot LOOP_SLOTS[] = {
    {VTA_F_UOP_BGN, offsetof(insn, uop_bgn)},        {VTA_F_UOP_END, offsetof(insn, uop_end)},
    {VTA_F_ITER_OUT, offsetof(insn, iter_out)},      {VTA_F_ITER_IN, offsetof(insn, iter_in)},
    {VTA_F_DST_FACTOR_OUT, offsetof(insn, dst_fo)},  {VTA_F_DST_FACTOR_IN, offsetof(insn, dst_fi)},
    {VTA_F_SRC_FACTOR_OUT, offsetof(insn, src_fo)},  {VTA_F_SRC_FACTOR_IN, offsetof(insn, src_fi)}};

static void get_slots(const vta_config *c, uint64_t lo, uint64_t hi, insn *d,
                      const field_slot *slots, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t v = get(c, lo, hi, slots[i].field);
    memcpy((char *)d + slots[i].at, &v, sizeof v);
  }
}

/* Decode word `index`; 0 or a fault. */
static int decode(const vta_config *c, const uint8_t *p, int64_t index, insn *d, vta_result *r) {
  uint64_t lo = load_le64(p), hi = load_le64(p + 8);
  memset(d, 0, sizeof *d);
  d->opcode = (uint8_t)get(c, lo, hi, VTA_F_OPCODE);
  uint32_t flags[4] = {get(c, lo, hi, VTA_F_POP_PREV), get(c, lo, hi, VTA_F_POP_NEXT),
                       get(c, lo, hi, VTA_F_PUSH_PREV), get(c, lo, hi, VTA_F_PUSH_NEXT)};
  d->pop[0] = (int8_t)flags[0];   /* the raw flags until the module is known */
  d->pop[1] = (int8_t)flags[1];
  d->push[0] = (int8_t)flags[2];
  d->push[1] = (int8_t)flags[3];
  switch (d->opcode) {
    case OP_FINISH: return 0;
    case OP_LOAD:
    case OP_STORE:
      d->mem_type = (uint8_t)get(c, lo, hi, VTA_F_MEM_TYPE);
      if (d->mem_type > MT_ACC_8BIT)
        return fail(r, VTA_ERR_FAULT, VTA_FAULT_DECODE, index,
                    "%s with unknown memory type %u; known: UOP=0, WGT=1, INP=2, ACC=3, OUT=4, "
                    "ACC_8BIT=5", d->opcode == OP_LOAD ? "LOAD" : "STORE", d->mem_type);
      get_slots(c, lo, hi, d, MEM_SLOTS, sizeof MEM_SLOTS / sizeof *MEM_SLOTS);
      return 0;
    case OP_GEMM:
    case OP_ALU:
      d->reset = (uint8_t)get(c, lo, hi, VTA_F_RESET);
      get_slots(c, lo, hi, d, LOOP_SLOTS, sizeof LOOP_SLOTS / sizeof *LOOP_SLOTS);
      if (d->opcode == OP_GEMM) {
        d->wgt_fo = get(c, lo, hi, VTA_F_WGT_FACTOR_OUT);
        d->wgt_fi = get(c, lo, hi, VTA_F_WGT_FACTOR_IN);
        return 0;
      }
      d->alu_op = (uint8_t)get(c, lo, hi, VTA_F_ALU_OP);
      if (d->alu_op > ALU_MUL)
        return fail(r, VTA_ERR_FAULT, VTA_FAULT_DECODE, index,
                    "ALU with unknown alu_opcode %u; known: MIN=0, MAX=1, ADD=2, SHR=3, MUL=4",
                    d->alu_op);
      d->use_imm = (uint8_t)get(c, lo, hi, VTA_F_USE_IMM);
      d->imm = (int32_t)(int16_t)(uint16_t)get(c, lo, hi, VTA_F_IMM);
      return 0;
    default:
      return fail(r, VTA_ERR_FAULT, VTA_FAULT_DECODE, index,
                  "unknown opcode %u (word 0x%016llx%016llx); known: LOAD=0, STORE=1, GEMM=2, "
                  "FINISH=3, ALU=4", d->opcode, (unsigned long long)hi, (unsigned long long)lo);
  }
}

static const char *insn_name(const insn *d) {
  switch (d->opcode) {
    case OP_LOAD: return "LOAD";
    case OP_STORE: return "STORE";
    case OP_GEMM: return "GEMM";
    case OP_ALU: return "ALU";
    default: return "FINISH";
  }
}

/* The module that runs `d`, and its token queues; 0 or a fault. */
static int assign_module(const vta_config *c, insn *d, int64_t index, vta_result *r) {
  int m;
  if (d->opcode == OP_STORE) m = M_STORE;
  else if (d->opcode == OP_LOAD) {
    if (d->mem_type == MT_INP || d->mem_type == MT_WGT) m = M_LOAD;
    else if (d->mem_type == MT_OUT)
      return FAULT("LOAD cannot target memory type OUT");
    else m = M_COMPUTE;
  } else if (d->opcode == OP_ALU && c->alu_stage) m = M_ALU;
  else m = M_COMPUTE;
  d->module = (uint8_t)m;
  int flags[4] = {d->pop[0], d->pop[1], d->push[0], d->push[1]};
  d->n_pop = d->n_push = 0;
  for (int k = 0; k < 4; k++) {
    if (!flags[k]) continue;
    int q = DEP_QUEUES[c->alu_stage ? 1 : 0][m][k];
    if (q < 0)
      return FAULT("%s is set but the %s module has no %s stage", FLAG_NAMES[k], MODULE_NAMES[m],
                   (k == 0 || k == 2) ? "previous" : "next");
    if (k < 2) d->pop[d->n_pop++] = (int8_t)q;
    else d->push[d->n_push++] = (int8_t)q;
  }
  return 0;
}

static double insn_work(const vta_config *c, const insn *d) {
  if (d->opcode != OP_GEMM && d->opcode != OP_ALU) return 0;
  double n = (double)d->iter_out * d->iter_in *
             (d->uop_end > d->uop_bgn ? d->uop_end - d->uop_bgn : 0) * c->batch * c->block_out;
  return d->opcode == OP_GEMM ? n * c->block_in : n;
}

/* ---- DRAM checks ---------------------------------------------------------------------------- */

static int check_dram(vta_sim *s, uint64_t base, uint64_t rows, uint64_t row_bytes,
                      uint64_t stride_bytes, const char *what, int64_t index, vta_result *r) {
  uint64_t end = base + (rows - 1) * stride_bytes + row_bytes;
  if (end > s->dram_bytes)
    return FAULT("DRAM address outside memory: %s touches bytes [0x%llx, 0x%llx) but DRAM has "
                 "%llu bytes (0x%llx)", what, (unsigned long long)base, (unsigned long long)end,
                 (unsigned long long)s->dram_bytes, (unsigned long long)s->dram_bytes);
  if (s->allowed) {
    for (size_t i = 0; i < s->n_allowed; i++)
      if (s->allowed[i].start <= base && end <= s->allowed[i].end) return 0;
    char given[256] = "none";
    size_t at = 0;
    for (size_t i = 0; i < s->n_allowed && at < sizeof given - 48; i++)
      at += (size_t)snprintf(given + at, sizeof given - at, "%s[0x%llx, 0x%llx)", i ? ", " : "",
                             (unsigned long long)s->allowed[i].start,
                             (unsigned long long)s->allowed[i].end);
    r->outside[0] = base;
    r->outside[1] = end;
    r->outside_prefix = (uint32_t)strlen("memory confinement: ") + (uint32_t)strlen(what);
    return FAULT("memory confinement: %s: bytes [0x%llx, 0x%llx) are outside the memory this "
                 "task was given (its allocations: %s)", what, (unsigned long long)base,
                 (unsigned long long)end, given);
  }
  return 0;
}

/* ---- LOAD / STORE --------------------------------------------------------------------------- */

/* Refresh the GEMM's copy of INP entry `entry` (after its int8 bytes changed). */
static void inp_refresh(vta_sim *s, uint64_t entry) {
  if (!s->vector) return;
  uint64_t n = (uint64_t)s->cfg.batch * s->cfg.block_in;
  inp_mirror_t *restrict m = s->inp_m + entry * n;
  const int8_t *restrict x = s->inp + entry * n;
  for (uint64_t k = 0; k < n; k++)
#ifdef GEMM_VNNI
    m[k] = (uint8_t)((uint8_t)x[k] ^ 0x80);
#else
    m[k] = x[k];
#endif
}

/* Refresh the GEMM's copy of weight entry `entry`: [BLOCK_OUT][BLOCK_IN] int8 becomes groups of
 * G consecutive inputs, output-major within each group: [BLOCK_IN/G][BLOCK_OUT][G]. */
static void wgt_refresh(vta_sim *s, uint64_t entry) {
  if (!s->vector) return;
  const vta_config *c = &s->cfg;
  const uint32_t bi = c->block_in, bo = c->block_out, ng = bi / WGT_GROUP;
  const int8_t *restrict w = s->wgt + entry * bo * bi;
  wgt_mirror_t *restrict m = s->wgt_m + entry * bo * bi;
  for (uint32_t o = 0; o < bo; o++) {
    int32_t sum = 0;
    for (uint32_t g = 0; g < ng; g++)
      for (uint32_t j = 0; j < WGT_GROUP; j++) {
        m[(g * bo + o) * WGT_GROUP + j] = w[o * bi + g * WGT_GROUP + j];
        sum += w[o * bi + g * WGT_GROUP + j];
      }
    s->wsum[entry * bo + o] = 128 * sum;
  }
}

static void zero_entry(vta_sim *s, int mem_type, uint64_t e) {
  const vta_config *c = &s->cfg;
  switch (mem_type) {
    case MT_UOP: memset(s->uop + e * 3, 0, 12); break;
    case MT_INP: {
      uint64_t n = (uint64_t)c->batch * c->block_in;
      memset(s->inp + e * n, 0, n);
      inp_refresh(s, e);
      break;
    }
    case MT_WGT: {
      uint64_t n = (uint64_t)c->block_out * c->block_in;
      memset(s->wgt + e * n, 0, n);
      wgt_refresh(s, e);
      break;
    }
    default: memset(s->acc + e * c->batch * c->block_out, 0, (size_t)c->batch * c->block_out * 4);
  }
}

static void fill_entry(vta_sim *s, int mem_type, uint64_t e, const uint8_t *src) {
  const vta_config *c = &s->cfg;
  switch (mem_type) {
    case MT_UOP: {
      uint32_t w = (uint32_t)src[0] | (uint32_t)src[1] << 8 | (uint32_t)src[2] << 16 |
                   (uint32_t)src[3] << 24;
      static const int ids[3] = {VTA_F_UOP_DST, VTA_F_UOP_SRC, VTA_F_UOP_WGT};
      for (int k = 0; k < 3; k++) {
        vta_field f = c->field[ids[k]];
        s->uop[e * 3 + k] = (w >> f.lo) & (uint32_t)((1ull << f.width) - 1);
      }
      break;
    }
    case MT_INP: {
      uint64_t n = (uint64_t)c->batch * c->block_in;
      memcpy(s->inp + e * n, src, n);
      inp_refresh(s, e);
      break;
    }
    case MT_WGT: {
      uint64_t n = (uint64_t)c->block_out * c->block_in;
      memcpy(s->wgt + e * n, src, n);
      wgt_refresh(s, e);
      break;
    }
    case MT_ACC: {
      uint64_t n = (uint64_t)c->batch * c->block_out;
      int32_t *a = s->acc + e * n;
      for (uint64_t k = 0; k < n; k++)
        a[k] = (int32_t)((uint32_t)src[4 * k] | (uint32_t)src[4 * k + 1] << 8 |
                         (uint32_t)src[4 * k + 2] << 16 | (uint32_t)src[4 * k + 3] << 24);
      break;
    }
    default: {   /* ACC_8BIT: int8 sign-extended into the accumulator lanes */
      uint64_t n = (uint64_t)c->batch * c->block_out;
      int32_t *a = s->acc + e * n;
      for (uint64_t k = 0; k < n; k++) a[k] = (int8_t)src[k];
    }
  }
}

static int run_load(vta_sim *s, const insn *d, int64_t index, vta_result *r) {
  const vta_config *c = &s->cfg;
  uint64_t depth;
  const char *name;
  switch (d->mem_type) {
    case MT_UOP: depth = c->uop_depth; name = "uop"; break;
    case MT_INP: depth = c->inp_depth; name = "inp"; break;
    case MT_WGT: depth = c->wgt_depth; name = "wgt"; break;
    default: depth = c->acc_depth; name = "acc";
  }
  uint64_t rows = (uint64_t)d->y_pad_0 + d->y_size + d->y_pad_1;
  uint64_t width = (uint64_t)d->x_pad_0 + d->x_size + d->x_pad_1;
  uint64_t total = rows * width;
  if (d->sram_base + total > depth)
    return FAULT("%s SRAM index out of range: the load writes entries [%u, %llu) (%llu rows x "
                 "%llu incl. padding) but the %s buffer has depth %llu", name, d->sram_base,
                 (unsigned long long)(d->sram_base + total), (unsigned long long)rows,
                 (unsigned long long)width, name, (unsigned long long)depth);
  uint64_t eb = dram_elem_bytes(c, d->mem_type);
  uint64_t base = (uint64_t)d->dram_base * eb;
  if (d->y_size) {
    char what[160];
    snprintf(what, sizeof what, "LOAD %s of %u rows x %u elements (%llu B each, stride %u) from "
             "element %u", MEM_NAMES[d->mem_type], d->y_size, d->x_size, (unsigned long long)eb,
             d->x_stride, d->dram_base);
    int st = check_dram(s, base, d->y_size, d->x_size * eb, (uint64_t)d->x_stride * eb, what,
                        index, r);
    if (st) return st;
  }
  for (uint64_t y = 0; y < rows; y++) {
    int pad_row = y < d->y_pad_0 || y >= d->y_pad_0 + d->y_size;
    const uint8_t *src = pad_row ? NULL
                         : s->dram + base + (y - d->y_pad_0) * (uint64_t)d->x_stride * eb;
    for (uint64_t x = 0; x < width; x++) {
      uint64_t e = d->sram_base + y * width + x;
      if (pad_row || x < d->x_pad_0 || x >= d->x_pad_0 + d->x_size) zero_entry(s, d->mem_type, e);
      else fill_entry(s, d->mem_type, e, src + (x - d->x_pad_0) * eb);
    }
  }
  return 0;
}

static int run_store(vta_sim *s, const insn *d, int64_t index, vta_result *r) {
  const vta_config *c = &s->cfg;
  if (d->mem_type != MT_OUT)
    return FAULT("STORE supports only the OUT buffer, not %s", MEM_NAMES[d->mem_type]);
  if (d->y_pad_0 || d->y_pad_1 || d->x_pad_0 || d->x_pad_1)
    return FAULT("STORE does not support padding (pads must be 0)");
  uint64_t n = (uint64_t)d->y_size * d->x_size;
  if (d->sram_base + n > c->acc_depth)
    return FAULT("out SRAM index out of range: the store reads entries [%u, %llu) but the out "
                 "buffer has depth %u", d->sram_base, (unsigned long long)(d->sram_base + n),
                 c->acc_depth);
  if (n == 0) return 0;
  uint64_t eb = dram_elem_bytes(c, MT_OUT), base = (uint64_t)d->dram_base * eb;
  char what[160];
  snprintf(what, sizeof what, "STORE OUT of %u rows x %u elements (%llu B each, stride %u) to "
           "element %u", d->y_size, d->x_size, (unsigned long long)eb, d->x_stride, d->dram_base);
  int st = check_dram(s, base, d->y_size, d->x_size * eb, (uint64_t)d->x_stride * eb, what, index,
                      r);
  if (st) return st;
  /* Row by row, in order: when rows overlap in DRAM, later rows win. The int8 narrowing keeps
   * the low 8 bits of each lane. */
  for (uint64_t y = 0; y < d->y_size; y++) {
    uint8_t *dst = s->dram + base + y * (uint64_t)d->x_stride * eb;
    const int32_t *a = s->acc + (d->sram_base + y * d->x_size) * eb;
    for (uint64_t k = 0; k < d->x_size * eb; k++) dst[k] = (uint8_t)a[k];
  }
  return 0;
}

/* ---- GEMM / ALU ----------------------------------------------------------------------------- */

static int check_uop_range(const vta_sim *s, const insn *d, int64_t index, vta_result *r) {
  if (d->uop_bgn > d->uop_end)
    return FAULT("uop_bgn %u > uop_end %u", d->uop_bgn, d->uop_end);
  if (d->uop_end > s->cfg.uop_depth)
    return FAULT("uop SRAM index out of range: micro-ops [%u, %u) but the uop buffer has depth %u",
                 d->uop_bgn, d->uop_end, s->cfg.uop_depth);
  return 0;
}

/* Every (y, x, u) index of micro-op column `col` with the given factors must be < depth; the
 * factors and indices are unsigned, so the largest is checked first and the first offending
 * iteration is searched only on a fault. */
static int check_column(const vta_sim *s, const insn *d, int col, uint32_t fo, uint32_t fi,
                        uint64_t depth, const char *name, const char *field, int64_t index,
                        vta_result *r) {
  const uint32_t *u = s->uop;
  uint64_t top = 0;
  for (uint32_t k = d->uop_bgn; k < d->uop_end; k++)
    if (u[k * 3 + col] > top) top = u[k * 3 + col];
  top += (uint64_t)(d->iter_out - 1) * fo + (uint64_t)(d->iter_in - 1) * fi;
  if (top < depth) return 0;
  uint64_t bad = 0, first_y = 0, first_x = 0, first_u = 0, first_v = 0, total = 0;
  for (uint64_t y = 0; y < d->iter_out; y++)
    for (uint64_t x = 0; x < d->iter_in; x++)
      for (uint32_t k = d->uop_bgn; k < d->uop_end; k++) {
        uint64_t v = u[k * 3 + col] + y * fo + x * fi;
        total++;
        if (v >= depth && !bad++) {
          first_y = y, first_x = x, first_u = k, first_v = v;
        }
      }
  return FAULT("%s SRAM index out of range: index %llu >= depth %llu (or negative) at y=%llu, "
               "x=%llu, uop %llu (%s_idx=%u); %llu of %llu iterations are out of range", name,
               (unsigned long long)first_v, (unsigned long long)depth,
               (unsigned long long)first_y, (unsigned long long)first_x,
               (unsigned long long)first_u, field, u[first_u * 3 + col], (unsigned long long)bad,
               (unsigned long long)total);
}

/* One (y, x) iteration of a GEMM: every micro-op's block product added into the accumulator.
 * Micro-ops in a row that share a destination (a conv's reduction over input channels and
 * window taps) are summed in registers and written once; four independent sums keep the
 * multiply-adds from waiting on each other. Integer sums in any order are the same (mod 2^32),
 * so this is exactly the sequential result. */
static void gemm_point(vta_sim *s, const insn *d, uint64_t dy, uint64_t sy, uint64_t wy) {
  const vta_config *c = &s->cfg;
  const uint32_t bi = c->block_in, bo = c->block_out, ng = bi / WGT_GROUP, batch = c->batch;
  const uint32_t *u = s->uop;
  for (uint32_t b = 0; b < batch; b++)
    for (uint32_t o = 0; o < bo; o += VL) {
      uint64_t cur = UINT64_MAX;
      vacc s0 = v_zero(), s1 = v_zero(), s2 = v_zero(), s3 = v_zero();
      for (uint32_t k = d->uop_bgn; k < d->uop_end; k++) {
        uint64_t dst = u[k * 3] + dy;
        if (dst != cur) {
          if (cur != UINT64_MAX) {
            int32_t *a = s->acc + (cur * batch + b) * bo + o;
            v_store(a, v_load(a) + ((s0 + s1) + (s2 + s3)));
            s0 = s1 = s2 = s3 = v_zero();
          }
          cur = dst;
        }
        uint64_t we = u[k * 3 + 2] + wy;
        const inp_mirror_t *x = s->inp_m + ((u[k * 3 + 1] + sy) * batch + b) * bi;
        const wgt_mirror_t *w = s->wgt_m + we * bo * bi + o * WGT_GROUP;
        const uint32_t stride = bo * WGT_GROUP;
        s3 = v_fix(s3, s->wsum + we * bo + o);
        uint32_t g = 0;
        for (; g + 4 <= ng; g += 4) {
          s0 = v_dot(s0, x + g * WGT_GROUP, w + g * stride);
          s1 = v_dot(s1, x + (g + 1) * WGT_GROUP, w + (g + 1) * stride);
          s2 = v_dot(s2, x + (g + 2) * WGT_GROUP, w + (g + 2) * stride);
          s3 = v_dot(s3, x + (g + 3) * WGT_GROUP, w + (g + 3) * stride);
        }
        for (; g < ng; g++) s0 = v_dot(s0, x + g * WGT_GROUP, w + g * stride);
      }
      int32_t *a = s->acc + (cur * batch + b) * bo + o;
      v_store(a, v_load(a) + ((s0 + s1) + (s2 + s3)));
    }
}

/* The same for any core (odd BLOCK_IN, BLOCK_OUT below the vector width): one micro-op at a
 * time, plain loops over the int8 SRAMs. */
static void gemm_point_scalar(vta_sim *s, const insn *d, uint64_t dy, uint64_t sy, uint64_t wy) {
  const vta_config *c = &s->cfg;
  const uint32_t bi = c->block_in, bo = c->block_out, batch = c->batch;
  const uint32_t *u = s->uop;
  for (uint32_t k = d->uop_bgn; k < d->uop_end; k++)
    for (uint32_t b = 0; b < batch; b++) {
      int32_t *a = s->acc + ((u[k * 3] + dy) * batch + b) * bo;
      const int8_t *x = s->inp + ((u[k * 3 + 1] + sy) * batch + b) * bi;
      const int8_t *w = s->wgt + (u[k * 3 + 2] + wy) * bo * bi;
      for (uint32_t o = 0; o < bo; o++) {
        uint32_t sum = (uint32_t)a[o];
        for (uint32_t i = 0; i < bi; i++) sum += (uint32_t)(x[i] * w[o * bi + i]);
        a[o] = (int32_t)sum;
      }
    }
}

static int run_gemm(vta_sim *s, const insn *d, int64_t index, vta_result *r) {
  const vta_config *c = &s->cfg;
  int st = check_uop_range(s, d, index, r);
  if (st || d->iter_out == 0 || d->iter_in == 0 || d->uop_bgn == d->uop_end) return st;
  if ((st = check_column(s, d, 0, d->dst_fo, d->dst_fi, c->acc_depth, "acc", "dst", index, r)))
    return st;
  if (!d->reset &&
      ((st = check_column(s, d, 1, d->src_fo, d->src_fi, c->inp_depth, "inp", "src", index, r)) ||
       (st = check_column(s, d, 2, d->wgt_fo, d->wgt_fi, c->wgt_depth, "wgt", "wgt", index, r))))
    return st;
  const uint32_t *u = s->uop;
  uint64_t lanes = (uint64_t)c->batch * c->block_out;
  for (uint64_t y = 0; y < d->iter_out; y++)
    for (uint64_t x = 0; x < d->iter_in; x++) {
      uint64_t dy = y * d->dst_fo + x * d->dst_fi;
      if (d->reset) {
        for (uint32_t k = d->uop_bgn; k < d->uop_end; k++)
          memset(s->acc + (u[k * 3] + dy) * lanes, 0, lanes * 4);
        continue;
      }
      uint64_t sy = y * d->src_fo + x * d->src_fi, wy = y * d->wgt_fo + x * d->wgt_fi;
      if (s->vector) gemm_point(s, d, dy, sy, wy);
      else gemm_point_scalar(s, d, dy, sy, wy);
    }
  return 0;
}

/* The tensor ALU on one int32 lane, wrapping like the hardware. */
static inline int32_t alu_lane(int op, int32_t a, int32_t b) {
  switch (op) {
    case ALU_MIN: return a < b ? a : b;
    case ALU_MAX: return a > b ? a : b;
    case ALU_ADD: return (int32_t)((uint32_t)a + (uint32_t)b);
    case ALU_MUL: return (int32_t)((uint32_t)a * (uint32_t)b);
    default:   /* SHR: b >= 0 shifts right (arithmetic), b < 0 left by -b; low 5 bits */
      if (b >= 0) return a >> (b & 31);
      return (int32_t)((uint32_t)a << ((-(int64_t)b) & 31));
  }
}

/* One accumulator entry's lanes against another entry `b` (which is `a` itself or disjoint
 * from it) or, when `b` is NULL, the immediate. Inlined with `op` a constant (alu_entry), so
 * the switch folds away and the loops vectorise. */
static inline __attribute__((always_inline)) void alu_lanes(int op, int32_t *a, const int32_t *b,
                                                            int32_t imm, uint64_t n) {
  if (b)
    for (uint64_t l = 0; l < n; l++) a[l] = alu_lane(op, a[l], b[l]);
  else
    for (uint64_t l = 0; l < n; l++) a[l] = alu_lane(op, a[l], imm);
}

static void alu_entry(int op, int32_t *a, const int32_t *b, int32_t imm, uint64_t n) {
  switch (op) {
    case ALU_MIN: alu_lanes(ALU_MIN, a, b, imm, n); break;
    case ALU_MAX: alu_lanes(ALU_MAX, a, b, imm, n); break;
    case ALU_ADD: alu_lanes(ALU_ADD, a, b, imm, n); break;
    case ALU_MUL: alu_lanes(ALU_MUL, a, b, imm, n); break;
    default: alu_lanes(ALU_SHR, a, b, imm, n);
  }
}

static int run_alu(vta_sim *s, const insn *d, int64_t index, vta_result *r) {
  const vta_config *c = &s->cfg;
  if (d->uop_end == d->uop_bgn) return 0;   /* a token carrier: no micro-ops, no work */
  if (d->reset) return FAULT("ALU with reset_reg=1 is not defined by the spec (only GEMM resets)");
  int st = check_uop_range(s, d, index, r);
  if (st || d->iter_out == 0 || d->iter_in == 0) return st;
  if ((st = check_column(s, d, 0, d->dst_fo, d->dst_fi, c->acc_depth, "acc", "dst", index, r)))
    return st;
  if (!d->use_imm &&
      (st = check_column(s, d, 1, d->src_fo, d->src_fi, c->acc_depth, "acc", "src", index, r)))
    return st;
  const uint32_t *u = s->uop;
  uint64_t lanes = (uint64_t)c->batch * c->block_out;
  /* In loop order, one micro-op iteration at a time: a destination written twice or read after
   * a write sees the earlier result, as on the hardware. */
  for (uint64_t y = 0; y < d->iter_out; y++)
    for (uint64_t x = 0; x < d->iter_in; x++) {
      uint64_t dy = y * d->dst_fo + x * d->dst_fi, sy = y * d->src_fo + x * d->src_fi;
      for (uint32_t k = d->uop_bgn; k < d->uop_end; k++) {
        int32_t *a = s->acc + (u[k * 3] + dy) * lanes;
        alu_entry(d->alu_op, a, d->use_imm ? NULL : s->acc + (u[k * 3 + 1] + sy) * lanes,
                  d->imm, lanes);
      }
    }
  return 0;
}

static void count(const vta_config *c, const insn *d, vta_counters *k) {
  int64_t n = (int64_t)d->y_size * d->x_size;
  switch (d->opcode) {
    case OP_STORE: k->out_store_nbytes += n * (int64_t)dram_elem_bytes(c, MT_OUT); break;
    case OP_LOAD:
      switch (d->mem_type) {
        case MT_INP: k->inp_load_nbytes += n * (int64_t)dram_elem_bytes(c, MT_INP); break;
        case MT_WGT: k->wgt_load_nbytes += n * (int64_t)dram_elem_bytes(c, MT_WGT); break;
        case MT_UOP: k->uop_load_nbytes += n * 4; break;
        /* ACC and ACC_8BIT: the accumulator element, as the published profiler counts it */
        default: k->acc_load_nbytes += n * (int64_t)dram_elem_bytes(c, MT_ACC);
      }
      break;
    case OP_GEMM:
      if (!d->reset) k->gemm_counter += (int64_t)d->iter_out * d->iter_in * (d->uop_end - d->uop_bgn);
      break;
    case OP_ALU: k->alu_counter += (int64_t)d->iter_out * d->iter_in * (d->uop_end - d->uop_bgn); break;
    default: break;
  }
}

static int execute(vta_sim *s, const insn *d, int64_t index, vta_result *r) {
  switch (d->opcode) {
    case OP_LOAD: return d->x_size ? run_load(s, d, index, r) : 0;    /* x_size 0: a token */
    case OP_STORE: return d->x_size ? run_store(s, d, index, r) : 0;  /* carrier, nothing moves */
    case OP_GEMM: return run_gemm(s, d, index, r);
    case OP_ALU: return run_alu(s, d, index, r);
    default: return 0;
  }
}

/* ---- the machine ---------------------------------------------------------------------------- */

static int grow(void **buf, uint64_t *cap, uint64_t need, size_t elem) {
  if (need <= *cap) return 0;
  void *p = realloc(*buf, need * elem);
  if (!p) return -1;
  *buf = p;
  *cap = need;
  return 0;
}

int vta_sim_run(vta_sim *s, const uint8_t *insns, uint64_t count_, const vta_range *allowed,
                size_t n_allowed, double max_work, vta_result *r) {
  memset(r, 0, sizeof *r);
  r->finish_index = -1;
  r->error_index = -1;
  for (int m = 0; m < VTA_MODULES; m++) r->blocked[m] = -1;
  if (!s || !r || (!insns && count_))
    return fail(r, VTA_ERR_ARG, VTA_FAULT_NONE, -1, "NULL simulator or stream");
  const vta_config *c = &s->cfg;
  if (grow((void **)&s->decoded, &s->decoded_cap, count_ ? count_ : 1, sizeof(insn)) ||
      grow((void **)&s->order, &s->order_cap, count_ ? count_ : 1, sizeof(uint32_t)))
    return fail(r, VTA_ERR_ARG, VTA_FAULT_NONE, -1, "out of host memory for %llu instructions",
                (unsigned long long)count_);
  if (count_ > 0xffffffffull)
    return fail(r, VTA_ERR_ARG, VTA_FAULT_NONE, -1, "too many instructions");
  insn *ds = s->decoded;
  int st;
  for (uint64_t i = 0; i < count_; i++)
    if ((st = decode(c, insns + 16 * i, (int64_t)i, &ds[i], r))) return st;
  /* each module's instructions in stream order, as runs in one array */
  uint64_t n_of[VTA_MODULES] = {0}, start[VTA_MODULES], head[VTA_MODULES];
  double work = 0;
  for (uint64_t i = 0; i < count_; i++) {
    if ((st = assign_module(c, &ds[i], (int64_t)i, r))) return st;
    n_of[ds[i].module]++;
    work += insn_work(c, &ds[i]);
  }
  r->work = work;
  if (max_work > 0 && work > max_work)
    return fail(r, VTA_ERR_WORK, VTA_FAULT_NONE, -1,
                "the stream would perform about %.3g operations, over the %.3g work limit", work,
                max_work);
  int nm = c->alu_stage ? 4 : 3;
  for (int m = 0, at = 0; m < VTA_MODULES; m++) {
    start[m] = head[m] = (uint64_t)at;
    at += (int)n_of[m];
  }
  uint64_t fill[VTA_MODULES];
  memcpy(fill, start, sizeof fill);
  for (uint64_t i = 0; i < count_; i++) s->order[fill[ds[i].module]++] = (uint32_t)i;
  s->allowed = allowed;
  s->n_allowed = n_allowed;

  int64_t *tokens = r->tokens;
  for (;;) {
    int64_t best = -1;
    int best_m = -1;
    for (int m = 0; m < nm; m++) {
      if (head[m] >= start[m] + n_of[m]) continue;
      int64_t i = s->order[head[m]];
      if (best >= 0 && i >= best) continue;
      const insn *d = &ds[i];
      int ready = 1;
      for (int k = 0; k < d->n_pop; k++) ready &= tokens[d->pop[k]] > 0;
      if (ready) best = i, best_m = m;
    }
    if (best < 0) break;
    const insn *d = &ds[best];
    for (int k = 0; k < d->n_pop; k++) tokens[d->pop[k]]--;
    if ((st = execute(s, d, best, r))) {
      s->allowed = NULL;
      return st;
    }
    count(c, d, &r->counters);
    for (int k = 0; k < d->n_push; k++) tokens[d->push[k]]++;
    head[best_m]++;
    r->instructions++;
    if (best_m == M_LOAD) r->counters.load_insns++;
    else if (best_m == M_STORE) r->counters.store_insns++;
    else r->counters.compute_insns++;   /* compute and alu */
    if (d->opcode == OP_FINISH) {
      r->finish_index = best;
      break;
    }
  }
  s->allowed = NULL;
  int pending = 0;
  for (int m = 0; m < nm; m++)
    if (head[m] < start[m] + n_of[m]) {
      int64_t i = s->order[head[m]];
      r->blocked[m] = i;
      pending++;
      for (int k = 0; k < ds[i].n_pop; k++)
        if (tokens[ds[i].pop[k]] == 0) r->waits[m] |= 1u << ds[i].pop[k];
    }
  if (r->finish_index < 0) {
    if (!pending)
      return fail(r, VTA_ERR_FAULT, VTA_FAULT_NO_FINISH, count_ ? (int64_t)count_ - 1 : -1,
                  "missing FINISH: the stream of %llu instruction(s) ran to its end without a "
                  "FINISH", (unsigned long long)count_);
    char lines[700] = "";
    size_t at = 0;
    for (int m = 0; m < nm && at < sizeof lines - 80; m++)
      if (r->blocked[m] >= 0)
        at += (size_t)snprintf(lines + at, sizeof lines - at, "%s%s module blocked at instruction "
                               "#%lld (%s)", at ? "; " : "", MODULE_NAMES[m],
                               (long long)r->blocked[m], insn_name(&ds[r->blocked[m]]));
    int64_t first = -1;
    for (int m = 0; m < nm && first < 0; m++) first = r->blocked[m];
    return fail(r, VTA_ERR_DEADLOCK, VTA_FAULT_DEADLOCK, first,
                "token deadlock after %lld instruction(s): %s", (long long)r->instructions, lines);
  }
  if (pending)
    return fail(r, VTA_ERR_FAULT, VTA_FAULT_EARLY_FINISH, r->finish_index,
                "FINISH (instruction #%lld) ended the stream while instructions had not run; "
                "FINISH must come after them in the stream and wait for them through tokens",
                (long long)r->finish_index);
  return VTA_OK;
}
