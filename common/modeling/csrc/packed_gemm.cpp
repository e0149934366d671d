// treespec's bf16 projection kernel: y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]), bf16 in and out,
// fp32 accumulation. Built at worker start by common/modeling/native.py (g++ -O3 -march=native).
//
// Why: a decode step streams every weight once for 1..64 rows (a token or a token tree), so it is
// memory-bandwidth bound. W is repacked once into panels of 64 output channels, each a contiguous
// run of k-pairs ([N/64][K/2][64][2], zero-padded): one sequential stream per thread (what hardware
// prefetchers follow best), and with AVX512-BF16 one VDPBF16PS multiplies a broadcast pair of
// activations by a pair of weights for 16 outputs, so no horizontal sums are needed (the
// register-blocked GEMM micro-kernel of Goto & van de Geijn 2008, section 5, with the "VNNI"
// pair layout oneDNN uses for bf16). Up to MB rows share each weight load. Every row is
// accumulated in the same order whatever M is, so a row's result does not depend on how many rows
// ride with it. Where the CPU has AMX-BF16, bf16 calls of many rows take 16-row tiles instead (below;
// their rows agree with this path to fp32 summation order).
//
// Variants by compiler target: AVX512-BF16, AVX2+FMA, portable C++ (same layout, same results up
// to fp32 summation order within a row).
//
// int8 weights (symmetric, one scale per output channel: W ~= q * scale[n]) use the same panel
// layout with 1 byte per weight: half the bytes streamed per step. The kernel widens q to bf16 in
// registers (exact: |q| <= 127 fits bf16's 8-bit significand), accumulates x . q in fp32 like the
// bf16 kernel, and scales each output once at the end.
//
// int4 weights (asymmetric, per group of 64 input channels: W ~= q * scale[g, n] + lo[g, n], q in
// 0..15) pack a k-pair's 128 codes of a panel into 64 bytes (byte b: element b in the low nibble,
// element 64 + b in the high one). With AVX512-BF16 a code becomes its bf16 value by one table
// lookup (VPERMW over the 16 values 0..15), so x . q is exact-input bf16 dot products; per group
//   sum_k x_k w_k = scale * (sum_k x_k q_k) + lo * (sum_k x_k),
// the second sum computed once per row and group (the group-wise zero-point algebra of GPTQ/AWQ
// kernels). Other targets use portable C++ for int4.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#include "bf16.h"
#include "int4_scales.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#include "amx.h"
#define BF16_AMX 1
#endif

static const int64_t PANEL = 64;  // output channels per panel
static const int64_t KC = 1024;   // k's per chunk: a panel's chunk (128 KiB) stays in L2 across row blocks

static inline int64_t kpad(int64_t K) { return (K + 1) & ~int64_t(1); }
static inline int64_t npad(int64_t N) { return (N + PANEL - 1) / PANEL * PANEL; }

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define VARIANT "avx512bf16"
static const bool FP32_X = false;
static const int PF_MIN_BLOCKS = 3;
static const int MB = 3;  // rows per register block: 3 x 8 accumulators + 4 weight registers
// A k-pair of a panel as 4 x 32 bf16 (16 outputs x the pair each): bf16 panels load it, int8
// panels (the same [K/2][64][2] order, one byte each) widen it in registers (exact: |q| <= 127).
static inline void load_pair(const bf16* p, __m512bh w[4]) {
  for (int v = 0; v < 4; ++v) w[v] = (__m512bh)_mm512_loadu_si512(p + v * 32);
}
static inline void load_pair(const int8_t* p, __m512bh w[4]) {
  for (int v = 0; v < 4; ++v) {
    __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p + v * 32))));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p + v * 32 + 16))));
    w[v] = _mm512_cvtne2ps_pbh(hi, lo);  // lanes 0..15 from lo, 16..31 from hi
  }
}
template <int R, typename W>
static inline void fma_pair(const bf16* x, int64_t K, int64_t k, const W* p, __m512 a[R][4]) {
  __m512bh w[4];
  load_pair(p, w);
  for (int i = 0; i < R; ++i) {
    int32_t pair; std::memcpy(&pair, x + i * K + k, 4);
    const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
    for (int v = 0; v < 4; ++v) a[i][v] = _mm512_dpbf16_ps(a[i][v], xb, w[v]);
  }
}
// acc[i][0:64] += x[i, k0:k0+kc] . panel[k0:k0+kc] for R rows (x rows have even length K).
// Two accumulator sets, even and odd k-pairs, summed at the chunk's end: twice the independent
// VDPBF16PS chains, which a one-row pass needs to keep enough loads in flight (one set streamed
// 24 GB/s on the 2-core Xeon host, two sets 30 GB/s, the host's read bandwidth). Every R sums in
// this same order, so a row's result still does not depend on the rows beside it.
template <int R, typename W>
static void micro(const bf16* x, const float*, int64_t K, const W* panel, int64_t k0, int64_t kc, float* acc,
                  const char* pf = nullptr, int pf_lines = 0) {
  __m512 a[R][4], b[R][4];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 4; ++v) a[i][v] = _mm512_loadu_ps(acc + i * PANEL + v * 16), b[i][v] = _mm512_setzero_ps();
  const W* p = panel + k0 * PANEL;
  int64_t k = k0;
  for (; k + 4 <= k0 + kc; k += 4, p += 4 * PANEL) {
    for (int j = 0; j < pf_lines; ++j, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);  // the next chunk, into L2
    if constexpr (R == 1 && std::is_same_v<W, bf16>) {  // weights as memory operands: 10% faster here
      int32_t p0, p1; std::memcpy(&p0, x + k, 4); std::memcpy(&p1, x + k + 2, 4);
      const __m512bh x0 = (__m512bh)_mm512_set1_epi32(p0), x1 = (__m512bh)_mm512_set1_epi32(p1);
      for (int v = 0; v < 4; ++v) a[0][v] = _mm512_dpbf16_ps(a[0][v], x0, (__m512bh)_mm512_loadu_si512(p + v * 32));
      for (int v = 0; v < 4; ++v) b[0][v] = _mm512_dpbf16_ps(b[0][v], x1, (__m512bh)_mm512_loadu_si512(p + 128 + v * 32));
    } else {
      fma_pair<R>(x, K, k, p, a);
      fma_pair<R>(x, K, k + 2, p + 2 * PANEL, b);
    }
  }
  if (k < k0 + kc) fma_pair<R>(x, K, k, p, a);  // an odd number of pairs in the chunk
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(acc + i * PANEL + v * 16, _mm512_add_ps(a[i][v], b[i][v]));
}

// int4 panel: per k-pair 64 bytes (see the header); per group of 64 k: 64 scales then 64 lows.
static const int64_t GROUP = 64;
static inline __m512i bf16_table() {  // bf16 bit patterns of 0..15 (twice: VPERMW reads 5 index bits)
  alignas(64) static const uint16_t t[32] = {0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
                                             0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
                                             0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
                                             0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};
  return _mm512_load_si512((const void*)t);
}
template <int R>
static void micro4(const bf16* x, int64_t K, const uint8_t* p, const float* sl, const float* xsum, int64_t groups,
                   int64_t kc, float* acc) {
  const __m512i table = bf16_table(), low = _mm512_set1_epi16(15);
  for (int64_t g = 0; g < kc / GROUP; ++g) {
    __m512 a[R][4];
    for (int i = 0; i < R; ++i) for (int v = 0; v < 4; ++v) a[i][v] = _mm512_setzero_ps();
    for (int64_t k = g * GROUP; k < (g + 1) * GROUP; k += 2, p += PANEL) {
      __m512i z0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)p));
      __m512i z1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(p + 32)));
      __m512bh w0 = (__m512bh)_mm512_permutexvar_epi16(_mm512_and_si512(z0, low), table);
      __m512bh w1 = (__m512bh)_mm512_permutexvar_epi16(_mm512_and_si512(z1, low), table);
      __m512bh w2 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(z0, 4), table);
      __m512bh w3 = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(z1, 4), table);
      for (int i = 0; i < R; ++i) {
        int32_t pair; std::memcpy(&pair, x + i * K + k, 4);
        __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
        a[i][0] = _mm512_dpbf16_ps(a[i][0], xb, w0); a[i][1] = _mm512_dpbf16_ps(a[i][1], xb, w1);
        a[i][2] = _mm512_dpbf16_ps(a[i][2], xb, w2); a[i][3] = _mm512_dpbf16_ps(a[i][3], xb, w3);
      }
    }
    const float* s = sl + g * 2 * PANEL;
    for (int i = 0; i < R; ++i) {
      const __m512 xs = _mm512_set1_ps(xsum[i * groups + g]);
      for (int v = 0; v < 4; ++v) {
        __m512 t = _mm512_fmadd_ps(a[i][v], _mm512_loadu_ps(s + v * 16), _mm512_loadu_ps(acc + i * PANEL + v * 16));
        _mm512_storeu_ps(acc + i * PANEL + v * 16, _mm512_fmadd_ps(_mm512_loadu_ps(s + PANEL + v * 16), xs, t));
      }
    }
  }
}
#define HAVE_MICRO4 1
#elif defined(__AVX2__) && defined(__FMA__)
#define VARIANT "avx2"
// Up to MB rows share each weight load and widening. One row alone reads its 64 outputs' k-pair as 8 ymm
// in stream order (8 accumulators); a block of 2-6 rows walks the panel chunk in slices of 8V outputs
// (V ymm, slice_v: R x V accumulators), so one widened weight feeds R FMAs, and x comes in fp32 (FP32_X: a
// broadcast is one load). With one row per block every row re-read each chunk from L2 and widened it
// again (256 bytes and 16 integer ops per 16 FMAs): a 1.5B pass of 4 / 16 rows took 163 / 453 ms, about
// one FMA per cycle (Zen 2, 2 cores; one row: 92 ms); in slices 126 / 340 ms.
// A slice applies a k-pair's even weights to every row, then its odd ones, so only V weights are live and
// a block of 6 rows fits 12 accumulators in the 16 ymm registers: 12 independent FMA chains where 4 rows
// x 2 ymm kept 8, exactly an FMA's latency (4 cycles) x its 2 pipes, so any stall idled a pipe. The
// projections of a 1.5B pass of 5 / 6 / 8 / 12 / 16 rows took 119 / 124 / 155 / 218 / 273 ms with 6-row
// blocks against 141 / 159 / 170 / 244 / 300 with 4-row ones; 1-4 rows unchanged (Zen 3, 2 cores, the
// two libraries interleaved in one process: benchmarks/results/kernels/avx2_six_row_blocks_zen3_2026-12-07).
// The first slice prefetches the whole k-pairs it passes into L1 (the other slices then read them from
// there or L2), and every slice its share of the next chunk into L2 (panel_rows), so DRAM streams
// while the later slices compute; without the latter, 4 rows in slices took longer than one row at a time.
// A lane's FMAs run in k order either way (k, k+1, k+2, ...), so a row's result is bit-identical
// whatever block it rides in.
static const int MB = 6;
static const int PF_MIN_BLOCKS = 1;  // panel_rows: every block prefetches its share of the next chunk
static const bool FP32_X = true;  // gemm hands micro x in fp32 too
static const int PF_PAIRS = 16;  // k-pairs ahead that the first slice prefetches
// The ymm of 8 outputs x a k-pair at p as fp32 weights of k (even) or k + 1 (odd); bf16 widens exactly by
// a shift or a mask, int8 (16 widened to int16 pairs) by sign extension.
static inline __m256 widen_even(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i*)p), 16));
}
static inline __m256 widen_odd(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i*)p), _mm256_set1_epi32((int)0xffff0000u)));
}
static inline __m256 widen_even(const int8_t* p) {
  const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)p));
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(w, 16), 16));
}
static inline __m256 widen_odd(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)p)), 16));
}
// acc[i][8 v0 .. 8 (v0 + V)] += xf[i] . the slice's weights over the chunk, R rows (xf: fp32 from k0, stride K).
// Its own function with its loops unrolled, so its R x V accumulators get registers (6 x 2: one reload
// from the stack per k-pair in the built code; inlined into gemm's OpenMP body it spilled more).
template <int R, int V, typename W>
__attribute__((noinline)) static void slice(const float* xf, int64_t K, const W* panel, int64_t k0, int64_t kc, float* acc, int v0,
                  const char* pf, int64_t pf_lines) {
  __m256 a[R][V];
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 8
    for (int v = 0; v < V; ++v) a[i][v] = _mm256_loadu_ps(acc + i * PANEL + (v0 + v) * 8);
  const W* p = panel + k0 * PANEL + v0 * 16;
  const int lines = v0 == 0 ? (int)(2 * PANEL * sizeof(W) / 64) : 0;  // the first slice streams whole k-pairs
  const int64_t pf_step = (pf_lines + kc / 2 - 1) / (kc / 2);  // lines of the next chunk per k-pair
  for (int64_t k = 0; k < kc; k += 2, p += 2 * PANEL) {
    for (int j = 0; j < lines; ++j) _mm_prefetch((const char*)(p + PF_PAIRS * 2 * PANEL) + 64 * j, _MM_HINT_T0);
    for (int64_t j = k / 2 * pf_step; j < std::min(pf_lines, (k / 2 + 1) * pf_step); ++j) _mm_prefetch(pf + 64 * j, _MM_HINT_T1);
    // k's weights into every row, then k + 1's: a lane still sums k then k + 1, as one row does
    __m256 w[V];
    #pragma GCC unroll 8
    for (int v = 0; v < V; ++v) w[v] = widen_even(p + v * 16);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 x0 = _mm256_broadcast_ss(xf + i * K + k);
      #pragma GCC unroll 8
      for (int v = 0; v < V; ++v) a[i][v] = _mm256_fmadd_ps(x0, w[v], a[i][v]);
    }
    #pragma GCC unroll 8
    for (int v = 0; v < V; ++v) w[v] = widen_odd(p + v * 16);
    #pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 x1 = _mm256_broadcast_ss(xf + i * K + k + 1);
      #pragma GCC unroll 8
      for (int v = 0; v < V; ++v) a[i][v] = _mm256_fmadd_ps(x1, w[v], a[i][v]);
    }
  }
  #pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + i * PANEL + (v0 + v) * 8, a[i][v]);
}
// ymm per slice (a divisor of 8) for a block of R rows: R x V accumulators + V weights + a broadcast
// and the widening mask fit in 16 registers (4 rows x 3 did not: spilled, 1.2x slower)
template <int R> constexpr int slice_v() { return R <= 2 ? 4 : 2; }
template <int R, typename W>
static void micro(const bf16* x, const float* xf, int64_t K, const W* panel, int64_t k0, int64_t kc, float* acc,
                  const char* pf = nullptr, int pf_lines = 0) {  // xf: x in fp32 (a broadcast is then one load)
  if constexpr (R == 1) {  // the whole k-pair in stream order: one row streams from DRAM fastest this way
    __m256 a[8];
    for (int v = 0; v < 8; ++v) a[v] = _mm256_loadu_ps(acc + v * 8);
    const W* p = panel + k0 * PANEL;
    for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
      const __m256 x0 = _mm256_set1_ps(bf2f(x[k])), x1 = _mm256_set1_ps(bf2f(x[k + 1]));
      for (int v = 0; v < 8; ++v)  // the odd widening re-reads the 32 bytes from L1 (a 1-row pass timed the same)
        a[v] = _mm256_fmadd_ps(x1, widen_odd(p + v * 16), _mm256_fmadd_ps(x0, widen_even(p + v * 16), a[v]));
    }
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(acc + v * 8, a[v]);
  } else {
    constexpr int V = slice_v<R>(), slices = 8 / V;
    const int64_t share = (int64_t)pf_lines * (kc / 4) / slices;  // lines of the next chunk per slice
    for (int s = 0; s < slices; ++s) slice<R, V>(xf + k0, K, panel, k0, kc, acc, s * V, pf + s * share * 64, share);
  }
}
#else
#define VARIANT "portable"
static const bool FP32_X = false;
static const int PF_MIN_BLOCKS = 3;
static const int MB = 1;
template <int R>
static void micro(const bf16* x, const float*, int64_t /*K*/, const bf16* panel, int64_t k0, int64_t kc, float* acc,
                  const char* = nullptr, int = 0) {
  const bf16* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    float x0 = bf2f(x[k]), x1 = bf2f(x[k + 1]);
    for (int j = 0; j < PANEL; ++j) acc[j] += x0 * bf2f(p[2 * j]) + x1 * bf2f(p[2 * j + 1]);
  }
}
template <int R>
static void micro(const bf16* x, const float*, int64_t /*K*/, const int8_t* panel, int64_t k0, int64_t kc, float* acc,
                  const char* = nullptr, int = 0) {
  const int8_t* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    float x0 = bf2f(x[k]), x1 = bf2f(x[k + 1]);
    for (int j = 0; j < PANEL; ++j) acc[j] += x0 * (float)p[2 * j] + x1 * (float)p[2 * j + 1];
  }
}
#endif

#ifndef HAVE_MICRO4
static const int64_t GROUP = 64;
template <int R>
static void micro4(const bf16* x, int64_t K, const uint8_t* p, const float* sl, const float* xsum, int64_t groups,
                   int64_t kc, float* acc) {
  for (int64_t g = 0; g < kc / GROUP; ++g) {
    for (int i = 0; i < R; ++i) {
      float a[PANEL] = {0.f};
      const uint8_t* q = p;
      for (int64_t k = g * GROUP; k < (g + 1) * GROUP; k += 2, q += PANEL) {
        const float x0 = bf2f(x[i * K + k]), x1 = bf2f(x[i * K + k + 1]);
        for (int b = 0; b < PANEL; ++b) {  // byte b: element b (low nibble), element 64 + b (high)
          const int e0 = b, e1 = PANEL + b;
          a[e0 / 2] += ((e0 & 1) ? x1 : x0) * (float)(q[b] & 15);
          a[e1 / 2] += ((e1 & 1) ? x1 : x0) * (float)(q[b] >> 4);
        }
      }
      const float* s = sl + g * 2 * PANEL;
      for (int j = 0; j < PANEL; ++j) acc[i * PANEL + j] += a[j] * s[j] + s[PANEL + j] * xsum[i * groups + g];
    }
    p += GROUP / 2 * PANEL;
  }
}
#endif

// All M rows of one panel chunk, MB rows at a time (the remainder as one smaller block).
// With several blocks, the first streams the chunk from DRAM and the rest compute from L2; alone
// that leaves DRAM idle while they compute (a 1.5B pass of 4/8/16 rows cost its 1-row streaming
// time plus all of its compute: 102/130/161 ms against 87 for one row, Zen 4). So every block
// also prefetches its share of the next chunk (the following bytes: the next chunk of this panel,
// or the next panel's first, which this thread takes next under the static schedule; a prefetch
// never faults), and the streaming overlaps the compute. AVX-512: only from 3 blocks (7 rows) on
// (PF_MIN_BLOCKS): with 2 (4-6 rows) the extra prefetches cost more than they hide (4 rows: 1.1-1.2x
// slower, Zen 4); AVX2 from one block (its blocks walk a chunk in slices, see micro).
template <typename W>
static void panel_rows(const bf16* x, const float* xf, int64_t M, int64_t K, const W* panel, int64_t k0, int64_t kc, float* acc) {
  const int64_t blocks = (M + MB - 1) / MB, steps = kc / 4;
  const int64_t lines = kc * PANEL * (int64_t)sizeof(W) / 64;
  const int per = blocks >= PF_MIN_BLOCKS && steps > 0 ? (int)((lines + blocks * steps - 1) / (blocks * steps)) : 0;
  const char* next = reinterpret_cast<const char*>(panel + (k0 + kc) * PANEL);
  int64_t m = 0, block = 0;
  for (; m + MB <= M; m += MB, ++block)
    micro<MB>(x + m * K, xf ? xf + m * K : nullptr, K, panel, k0, kc, acc + m * PANEL, next + block * per * steps * 64, per);
  const bf16* xr = x + m * K;
  const float* xfr = xf ? xf + m * K : nullptr;
  float* ar = acc + m * PANEL;
  const char* pf = next + block * per * steps * 64;
  switch (M - m) {  // the remainder as one block: R rows of micro<R> share each weight load
    case 5: if constexpr (MB > 5) micro<5>(xr, xfr, K, panel, k0, kc, ar, pf, per); break;
    case 4: if constexpr (MB > 4) micro<4>(xr, xfr, K, panel, k0, kc, ar, pf, per); break;
    case 3: if constexpr (MB > 3) micro<3>(xr, xfr, K, panel, k0, kc, ar, pf, per); break;
    case 2: if constexpr (MB > 2) micro<2>(xr, xfr, K, panel, k0, kc, ar, pf, per); break;
    case 1: micro<1>(xr, xfr, K, panel, k0, kc, ar, pf, per); break;
    default: break;
  }
}

// W [N, K] row-major -> out [N/64][K/2][64][2], zero-padded.
template <typename W>
static void pack(const W* w, W* out, int64_t N, int64_t K, int threads) {
  const int64_t Kp = kpad(K), panels = npad(N) / PANEL;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < panels; ++b)
    for (int64_t j = 0; j < PANEL; ++j) {
      const int64_t n = b * PANEL + j;
      W* o = out + b * PANEL * Kp + j * 2;
      for (int64_t k = 0; k < Kp; ++k) o[(k / 2) * 2 * PANEL + (k & 1)] = (n < N && k < K) ? w[n * K + k] : W(0);
    }
}

#ifdef BF16_AMX
// AMX-BF16 path for many rows (a token tree, a prefill): one TDPBF16PS multiplies a 16-row x 32-channel
// activation tile by a 32-channel x 16-output weight tile, 16x the MACs of a VDPBF16PS (Intel SDM vol. 2,
// TDPBF16PS). The panel layout is already AMX's "VNNI" B layout: tile v of outputs 16v..16v+15 is 16
// k-pair rows of 64 bytes at a stride of 256 bytes. fp32 accumulation in the tiles over all of K; the sum
// order differs from the VDPBF16PS path, so the two paths agree to fp32 rounding, not bit for bit.
// Every row of a call of at least amx_rows rows goes to the tiles (K a multiple of 32): a ragged last
// tile costs about as much as sending its rows through VDPBF16PS (17 rows of a 1.5B pass: 119 vs 123 ms).
static int64_t amx_rows_of(int64_t M, int64_t K, int64_t amx_rows) {
  return amx_rows > 0 && M >= amx_rows && K % 32 == 0 ? M : 0;
}

// One 16-row x 32-channel step of tile t's sums: tiles 0-3 += A(rows 16t.., k..k+32) x the panel's 4 blocks.
// xa is blocked (gemm below): row tile t's channels k..k+32 are one contiguous 1 KiB tile.
static inline void amx_step(const bf16* xa, int64_t K, const bf16* p, int64_t t, int64_t k) {
  _tile_loadd(4, xa + (t * (K / 32) + k / 32) * 512, 64);
  _tile_loadd(5, p, 256); _tile_loadd(6, p + 32, 256); _tile_loadd(7, p + 64, 256);
  _tile_dpbf16ps(0, 4, 5); _tile_dpbf16ps(1, 4, 6); _tile_dpbf16ps(2, 4, 7);
  _tile_loadd(5, p + 96, 256); _tile_dpbf16ps(3, 4, 5);
}

// Bytes ahead of its weight tiles that the first row tile prefetches into L2 (64 lines per 32-k step, the
// step's 4 KiB): tile loads read 16 lines 256 bytes apart, which the hardware prefetchers follow poorly.
// Weights streamed from DRAM (643 MB, 2-core Intel Xeon with AMX, 2026-12-06): 2-16 rows 57-63 ms without,
// 41-44 ms with (a 1-row VDPBF16PS pass: 38-42 ms); 8 KiB ahead into L1 gave 42 ms, 16 KiB into L1 43-44.
static const int64_t AMX_PF_BYTES = 16384;
static const int64_t AMX_KB = 256;  // k's per chunk when several row tiles share a panel: 32 KiB of weights,
                                    // kept in L1 while every row tile passes over them

// acc[m][0:64] = rows [0, tiled) of xa (blocked, whole tiles readable) times the panel. One tile runs
// over all of K with its sums in tiles 0-3; several tiles go chunk by chunk of K (sums stored in c between
// chunks), so each weight tile read from DRAM serves every row tile from L1 (a second pass over a panel from
// L2 cost about as much as the first: 32 rows of a 1.5B pass took 125 ms that way, 120 chunked, 93 for 16;
// 128 rows 259 and 234 ms).
static void amx_panel(const bf16* xa, int64_t K, const bf16* panel, int64_t tiled, float* c, float* acc) {
  const int64_t tiles = (tiled + 15) / 16, kb = tiles == 1 ? K : AMX_KB;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t k1 = std::min(K, k0 + kb);
    for (int64_t t = 0; t < tiles; ++t) {
      float* ct = c + t * 1024;
      if (k0 == 0) { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); }
      else { _tile_loadd(0, ct, 64); _tile_loadd(1, ct + 256, 64); _tile_loadd(2, ct + 512, 64); _tile_loadd(3, ct + 768, 64); }
      for (int64_t k = k0; k < k1; k += 32) {
        if (t == 0) {  // past the panel: the next one, which this thread takes next (a prefetch never faults)
          const char* q = reinterpret_cast<const char*>(panel + k * PANEL) + AMX_PF_BYTES;
          for (int j = 0; j < 64; ++j) _mm_prefetch(q + 64 * j, _MM_HINT_T1);
        }
        amx_step(xa, K, panel + k * PANEL, t, k);
      }
      _tile_stored(0, ct, 64); _tile_stored(1, ct + 256, 64); _tile_stored(2, ct + 512, 64); _tile_stored(3, ct + 768, 64);
    }
  }
  for (int64_t m = 0; m < tiled; ++m)  // tile t's block v holds rows 16t.. of outputs 16v..16v+15
    for (int v = 0; v < 4; ++v)
      _mm512_storeu_ps(acc + m * PANEL + v * 16, _mm512_loadu_ps(c + (m / 16) * 1024 + (v * 16 + m % 16) * 16));
}
extern "C" int treespec_bf16_amx() { return amx_permitted() ? 1 : 0; }
#else
static int64_t amx_rows_of(int64_t, int64_t, int64_t) { return 0; }
extern "C" int treespec_bf16_amx() { return 0; }
#endif

// y [M, N] = (x [M, K] @ W^T) * scale + bias; x rows contiguous with an even K (the caller pads
// odd K); scale [N] or null (bf16 weights). With amx_rows > 0 (bf16 weights, AMX-BF16 built and
// granted), calls of at least that many rows run on AMX tiles (a ragged last tile padded with zero rows).
template <typename W>
static void gemm(const bf16* x, const W* packed, const float* scale, const bf16* bias, bf16* y,
                 int64_t M, int64_t N, int64_t K, int threads, int64_t amx_rows = 0) {
  const int64_t panels = npad(N) / PANEL;
  const int64_t tiled = std::is_same_v<W, bf16> ? amx_rows_of(M, K, amx_rows) : 0;
  // x in fp32, once per call, where blocks of 2+ rows broadcast it (AVX2); one row reads x itself
  std::vector<float> xf(FP32_X && tiled == 0 && M > 1 ? M * K : 0);
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = bf2f(x[i]);
  std::vector<bf16> xa;  // x with zero rows up to whole tiles (a tile load reads 16 rows)
  if (tiled > 0) {
    xa.assign((tiled + 15) / 16 * 16 * K, bf16(0));
    // blocked [tile][K/32][16 rows][32 channels]: a tile load reads 16 adjacent lines, not 16 rows K*2
    // bytes apart (a 1.5B pass at 2-13 rows: -2 ms, at 17-32 rows: -5 ms; 2-core Xeon, AMX)
    for (int64_t m = 0; m < tiled; ++m)
      for (int64_t kb = 0; kb < K / 32; ++kb)
        std::memcpy(xa.data() + ((m / 16 * (K / 32) + kb) * 16 + m % 16) * 32, x + m * K + kb * 32, 64);
  }
#pragma omp parallel num_threads(threads)
  {
#ifdef BF16_AMX
    TileScope tiles(tiled > 0);
    std::vector<float> c((tiled + 15) / 16 * 1024);  // per row tile: 4 blocks x 16 rows x 16 outputs of sums
#endif
    std::vector<float> acc(M * PANEL);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < panels; ++b) {
      std::fill(acc.begin(), acc.end(), 0.f);
      const W* panel = packed + b * PANEL * K;
#ifdef BF16_AMX
      if constexpr (std::is_same_v<W, bf16>)
        if (tiled > 0) amx_panel(xa.data(), K, panel, tiled, c.data(), acc.data());
#endif
      for (int64_t k0 = 0; k0 < K && tiled == 0; k0 += KC)  // tiled is 0 or M: no AMX, every row here
        panel_rows(x, xf.empty() ? nullptr : xf.data(), M, K, panel, k0, std::min(KC, K - k0), acc.data());
      const int64_t n0 = b * PANEL, nn = std::min(PANEL, N - n0);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < nn; ++j) {
          const float v = acc[m * PANEL + j] * (scale ? scale[n0 + j] : 1.f);
          y[m * N + n0 + j] = f2bf(v + (bias ? bf2f(bias[n0 + j]) : 0.f));
        }
    }
  }
}

extern "C" const char* treespec_variant() { return VARIANT; }
// Elements (bf16 or int8) of a packed [N, K] weight.
extern "C" int64_t treespec_packed_elems(int64_t N, int64_t K) { return npad(N) * kpad(K); }
extern "C" void treespec_pack(const bf16* w, bf16* out, int64_t N, int64_t K, int threads) {
  pack(w, out, N, K, threads);
}
extern "C" void treespec_pack_int8(const int8_t* w, int8_t* out, int64_t N, int64_t K, int threads) {
  pack(w, out, N, K, threads);
}
extern "C" void treespec_gemm(const bf16* x, const bf16* packed, const bf16* bias, bf16* y,
                              int64_t M, int64_t N, int64_t K, int threads, int64_t amx_rows) {
  gemm(x, packed, nullptr, bias, y, M, N, K, threads, amx_rows);
}
extern "C" void treespec_gemm_int8(const bf16* x, const int8_t* packed, const float* scale, const bf16* bias,
                                   bf16* y, int64_t M, int64_t N, int64_t K, int threads) {
  gemm(x, packed, scale, bias, y, M, N, K, threads);
}

// codes [N, K] (0..15, one per byte), scale/lo [K/64, N] fp32 -> panels [N/64][K/2][64 bytes] and
// per-panel [K/64][2][64] fp32 (scales then lows). K must be a multiple of 64.
extern "C" void treespec_pack_int4(const uint8_t* codes, const float* scale, const float* lo, uint8_t* out,
                                   float* sl, int64_t N, int64_t K, int threads) {
  const int64_t panels = npad(N) / PANEL, groups = K / GROUP;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < panels; ++b) {
    uint8_t* o = out + b * PANEL * K / 2;
    for (int64_t kp = 0; kp < K / 2; ++kp)
      for (int64_t byte = 0; byte < PANEL; ++byte) {
        uint8_t v = 0;
        for (int half = 0; half < 2; ++half) {
          const int64_t e = byte + half * PANEL, n = b * PANEL + e / 2, k = 2 * kp + (e & 1);
          const uint8_t c = n < N ? (uint8_t)(codes[n * K + k] & 15) : 0;
          v |= (uint8_t)(c << (4 * half));
        }
        o[kp * PANEL + byte] = v;
      }
    pack_panel_scales(scale, lo, sl + b * groups * 2 * PANEL, b, N, groups);
  }
}

extern "C" void treespec_gemm_int4(const bf16* x, const uint8_t* packed, const float* sl, const bf16* bias, bf16* y,
                                   int64_t M, int64_t N, int64_t K, int threads) {
  const int64_t panels = npad(N) / PANEL, groups = K / GROUP;
  std::vector<float> xsum(M * groups, 0.f);  // per row and group: sum of x (the lows' weight)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) xsum[m * groups + k / GROUP] += bf2f(x[m * K + k]);
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> acc(M * PANEL);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < panels; ++b) {
      std::fill(acc.begin(), acc.end(), 0.f);
      const uint8_t* panel = packed + b * PANEL * K / 2;
      const float* s = sl + b * groups * 2 * PANEL;
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = std::min(KC, K - k0);
        const uint8_t* p = panel + k0 / 2 * PANEL;
        const float* sg = s + k0 / GROUP * 2 * PANEL;
        int64_t m = 0;
        for (; m + 4 <= M; m += 4)
          micro4<4>(x + m * K + k0, K, p, sg, xsum.data() + m * groups + k0 / GROUP, groups, kc, acc.data() + m * PANEL);
        const bf16* xr = x + m * K + k0;
        const float* xs = xsum.data() + m * groups + k0 / GROUP;
        float* ar = acc.data() + m * PANEL;
        switch (M - m) {  // the remainder as one block: every weight is widened once per block
          case 3: micro4<3>(xr, K, p, sg, xs, groups, kc, ar); break;
          case 2: micro4<2>(xr, K, p, sg, xs, groups, kc, ar); break;
          case 1: micro4<1>(xr, K, p, sg, xs, groups, kc, ar); break;
          default: break;
        }
      }
      const int64_t n0 = b * PANEL, nn = std::min(PANEL, N - n0);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < nn; ++j)
          y[m * N + n0 + j] = f2bf(acc[m * PANEL + j] + (bias ? bf2f(bias[n0 + j]) : 0.f));
    }
  }
}
