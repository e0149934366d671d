// treespec's W4A8 projection kernel: y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]) with int4 weights
// and activations quantized to int8 inside the call, integer dot products (AVX512-VNNI VPDPBUSD; on
// AVX2-only CPUs VPMADDUBSW + VPMADDWD, the same integers).
// Built with packed_gemm.cpp by common/modeling/native.py. Rounding the activations changes the
// model's numbers, so a main model runs it only as main_quantization = w4a8, for every pass (the
// served model is then this one); a draft's kernel probe may pick it at any row count.
//
// Why: the int4 kernels that widen codes to bf16 (packed_gemm.cpp's micro4, torch's int4 kernel)
// spend about as long on that widening as on streaming the weights, so on 2-core hosts they
// stream 10-11 GB/s where bf16 streams about 20. With int8 activations one VPDPBUSD multiplies
// 64 codes (unsigned bytes, 0..15) by 64 activations (signed bytes) and sums each 4 into 16 int32
// lanes, after only a mask and a shift to split the nibbles (llama.cpp's Q4 x Q8 dot product does
// the same, ggml-cpu quants.c; VNNI: Intel SDM vol. 2, VPDPBUSD).
//
// Scheme, per group of 64 input channels g and output channel n (the int4 codes of quant.py):
//   w[n, k] = q[n, k] * scale[g, n] + lo[g, n]                   q in 0..15, lo = zero - 8 * scale
//   x[m, k] ~= xs[m, g] * p[m, k],  xs = max_k |x[m, k]| / 127,  p = round(x / xs) in -127..127
//   y[m, n] = sum_g xs[m, g] * (scale[g, n] * sum_k q p  +  lo[g, n] * sum_k p)
// The inner sums are exact int32 (at most 64 * 15 * 127); the float epilogue runs per row in the
// same order whatever M is, so a row's result does not depend on the rows beside it.
// Two paths compute those sums: VPDPBUSD (any M) and, where built and granted, AMX-INT8 tiles for
// calls of at least amx_rows rows (trees, prefill; amx.py measures the crossover at start).
// Same integers, same epilogue: the paths agree bit for bit and may be mixed across calls.
//
// Layout: panels of 64 output channels; per group, 8 octets of input channels; per octet 4 blocks
// of 64 bytes (16 outputs each), byte 4j+t of block v holding output 16v+j's code for channel
// 8o+t in its low nibble and 8o+4+t in its high nibble. Per panel and group: 64 scales then 64 zeros
// in bf16, as quant.int4_codes gives them (half the bytes of fp32: they are a fifth of what a 1-row
// pass streams); lo = zero - 8 * scale is formed in fp32 in the epilogue, rounded once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "bf16.h"
#include "int4_scales.h"
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>
#define W4A8_VNNI 1
#endif
#if defined(W4A8_VNNI) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__linux__)
#define W4A8_AMX 1
#endif

static const int64_t W_PANEL = 64;  // output channels per panel
static const int64_t W_GROUP = 64;  // input channels per scale/low and per activation scale
static const int64_t W_KC = 512;    // input channels per chunk (a panel's chunk, 16 KiB, stays in L1/L2)

// Bytes ahead of the codes being read that each octet prefetches (a panel's codes are one sequential
// stream; a prefetch past the panel reads the next one, which this thread takes next under the static
// schedule, and never faults). The hardware prefetcher alone fell behind once a call had several rows
// to compute per byte: a 24-layer Qwen2.5-0.5B pass at 1/2/4/8/16 rows took 8.4/10.0/12.7/15.6/20.4 ms
// without, 8.2/8.8/10.1/13.0/17.4 with 1 KiB (2 KiB: 8.0/8.9/10.1/13.9/18.9; 2-core Xeon host with AMX).
static const int64_t W_PREFETCH = 1024;

static inline int64_t w_panels(int64_t N) { return (N + W_PANEL - 1) / W_PANEL; }

// Per row and group: int8 codes p, scale xs and xs * sum(p) (the lows' weight).
static void quantize_rows(const bf16* x, int64_t M, int64_t K, int8_t* p, float* xs, float* xsum) {
  const int64_t groups = K / W_GROUP;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < groups; ++g) {
      const bf16* xr = x + m * K + g * W_GROUP;
      float amax = 0.f;
      for (int64_t k = 0; k < W_GROUP; ++k) amax = std::max(amax, std::fabs(bf2f(xr[k])));
      const float s = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
      int32_t sum = 0;
      for (int64_t k = 0; k < W_GROUP; ++k) {
        const int32_t q = (int32_t)std::nearbyint(std::min(127.f, std::max(-127.f, bf2f(xr[k]) * inv)));
        p[m * K + g * W_GROUP + k] = (int8_t)q;
        sum += q;
      }
      xs[m * groups + g] = s;
      xsum[m * groups + g] = s * (float)sum;
    }
}

#ifdef W4A8_VNNI
#define W4A8_VARIANT "avx512vnni"
static inline __m512 widen_bf16(const bf16* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}
// Outputs [16v, 16v + 16) of one group (s: its 64 bf16 scales, then 64 zeros): scale and lo = zero - 8 scale.
static inline void group_scales(const bf16* s, int v, __m512& sc, __m512& lo) {
  sc = widen_bf16(s + v * 16);
  lo = _mm512_fmadd_ps(_mm512_set1_ps(-8.f), sc, widen_bf16(s + W_PANEL + v * 16));
}
// o[0:16] += one group's term for one row: xs * (scale * sum q p) + lo * xs * sum p, from the int32 sums a.
// The VNNI micro kernel and the AMX path both call this: their bit-identical results rest on it.
static inline void add_group(float* o, __m512i a, __m512 sc, __m512 lo, __m512 xsi, __m512 xsumi) {
  const __m512 t = _mm512_fmadd_ps(lo, xsumi, _mm512_loadu_ps(o));
  const __m512 d = _mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(sc, xsi));
  _mm512_storeu_ps(o, _mm512_add_ps(t, d));
}
// out[i][0:64] += groups [g0, g0 + gn) of R rows (p rows of length K, chunk-relative pointers)
template <int R>
static void micro(const int8_t* p, int64_t K, const uint8_t* w, const bf16* sl, const float* xs,
                  const float* xsum, int64_t groups, int64_t gn, float* out, const char* pf, int pf_lines) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int64_t g = 0; g < gn; ++g) {
    __m512i a[R][4];
    for (int i = 0; i < R; ++i) for (int v = 0; v < 4; ++v) a[i][v] = _mm512_setzero_si512();
    for (int64_t o = 0; o < W_GROUP / 8; ++o, w += 4 * 64) {
      __m512i lo[4], hi[4];
      for (int v = 0; v < 4; ++v) _mm_prefetch((const char*)(w + W_PREFETCH + v * 64), _MM_HINT_T0);
      for (int j = 0; j < pf_lines; ++j, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);  // the next chunk, into L2
      for (int v = 0; v < 4; ++v) {
        const __m512i b = _mm512_loadu_si512((const void*)(w + v * 64));
        lo[v] = _mm512_and_si512(b, nib);
        hi[v] = _mm512_and_si512(_mm512_srli_epi16(b, 4), nib);
      }
      for (int i = 0; i < R; ++i) {
        const int8_t* pr = p + i * K + g * W_GROUP + 8 * o;
        int32_t q0, q1;
        std::memcpy(&q0, pr, 4);
        std::memcpy(&q1, pr + 4, 4);
        const __m512i x0 = _mm512_set1_epi32(q0), x1 = _mm512_set1_epi32(q1);
        for (int v = 0; v < 4; ++v) a[i][v] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a[i][v], lo[v], x0), hi[v], x1);
      }
    }
    __m512 sc[4], lo[4];
    for (int v = 0; v < 4; ++v) group_scales(sl + g * 2 * W_PANEL, v, sc[v], lo[v]);
    for (int i = 0; i < R; ++i) {
      const __m512 xsi = _mm512_set1_ps(xs[i * groups + g]), xsumi = _mm512_set1_ps(xsum[i * groups + g]);
      for (int v = 0; v < 4; ++v) {
        float* o = out + i * W_PANEL + v * 16;
        add_group(o, a[i][v], sc[v], lo[v], xsi, xsumi);
      }
    }
  }
}
static const int W_MB = 4;  // rows per register block: 16 int32 accumulators + 8 nibble registers
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define W4A8_VARIANT "avx2"
static inline __m256 widen_bf16_8(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
// VPDPBUSD on AVX2: VPMADDUBSW multiplies u8 codes by s8 activations and sums each pair into an int16
// lane (saturating, which never happens here: 2 * 15 * 127 = 3810); VPMADDWD by ones then sums the
// pairs' pairs into int32 lanes: the same exact integers as the VNNI path. Widening every pair sum at
// once made two multiplies per VPDPBUSD; instead the int16 pair sums of W_OCTETS16 octets (lo and hi
// nibbles: 2 * W_OCTETS16 sums of at most 3810) are added in int16, |sum| <= 8 * 3810 = 30480 < 32767,
// and widened once: per row and 4 octets 8 VPMADDUBSW + 1 VPMADDWD where 8 + 8 were. A 1.5B-shaped pass
// at 4 / 8 / 16 rows: 66 / 127 / 252 ms before, 54 / 102 / 194 after (Zen 2, scripts/bench_packed_stream.py).
// The empty asm after each row's update pins the sum's order: GCC reassociates integer adds, and at -O3 it
// turned each row's chain into a tree that kept all 32 products of a 4-row block live at once and spilled
// them to the stack (523 stack accesses in the built kernel, 396 with the pin); a gate_up-shaped call
// (17920 x 1536) at 16 / 32 rows took 3.59 / 7.48 ms before, 3.07 / 6.04 after; the whole 1.5B-shaped pass
// at 4 / 8 / 16 / 32 rows 51 / 94-102 / 181-187 / 357 ms before, 46 / 84-89 / 160-162 / 313-317 after (Zen 2).
static const int64_t W_OCTETS16 = 4;
// As the VNNI micro kernel, per 32-byte half-block u (outputs [8u, 8u + 8) of the panel: byte 4j+t of
// half u holds output 8u+j's codes) with the octets inner, so R rows need only R accumulators; a group's
// 2 KiB of codes stays in L1 across the half-blocks. The same integer sums and epilogue operations
// (fma(lo, xsum, o) + sums * (scale * xs)) as the VNNI variant; the portable build may round the last
// step differently (the compiler may contract it into an fma), so compare variants within bf16 rounding.
template <int R>
static void micro(const int8_t* p, int64_t K, const uint8_t* w, const bf16* sl, const float* xs,
                  const float* xsum, int64_t groups, int64_t gn, float* out, const char* pf, int pf_lines) {
  const __m256i nib = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < gn; ++g, w += (W_GROUP / 8) * 4 * 64) {
    const bf16* s = sl + g * 2 * W_PANEL;
    for (int u = 0; u < 8; ++u) {
      for (int v = 0; v < 4; ++v) _mm_prefetch((const char*)(w + W_PREFETCH + u * 256 + v * 64), _MM_HINT_T0);
      for (int j = 0; j < pf_lines; ++j, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);  // the next chunk, into L2
      __m256i a[R];
      for (int i = 0; i < R; ++i) a[i] = _mm256_setzero_si256();
      for (int64_t h = 0; h < W_GROUP / 8; h += W_OCTETS16) {
        __m256i c[R];  // int16 pair sums of W_OCTETS16 octets (both nibbles): exact, see W_OCTETS16
        for (int i = 0; i < R; ++i) c[i] = _mm256_setzero_si256();
        for (int64_t o = h; o < h + W_OCTETS16; ++o) {
          const __m256i b = _mm256_loadu_si256((const __m256i*)(w + o * 4 * 64 + u * 32));
          const __m256i lo = _mm256_and_si256(b, nib), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
          for (int i = 0; i < R; ++i) {
            const int8_t* pr = p + i * K + g * W_GROUP + 8 * o;
            int32_t q0, q1;
            std::memcpy(&q0, pr, 4);
            std::memcpy(&q1, pr + 4, 4);
            c[i] = _mm256_add_epi16(c[i], _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(q0)),
                                                            _mm256_maddubs_epi16(hi, _mm256_set1_epi32(q1))));
            asm("" : "+x"(c[i]));  // keep the sum in order: see W_OCTETS16
          }
        }
        for (int i = 0; i < R; ++i) a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(c[i], ones));
      }
      const __m256 sc = widen_bf16_8(s + u * 8);
      const __m256 lo = _mm256_fmadd_ps(_mm256_set1_ps(-8.f), sc, widen_bf16_8(s + W_PANEL + u * 8));
      for (int i = 0; i < R; ++i) {
        float* o = out + i * W_PANEL + u * 8;
        const __m256 t = _mm256_fmadd_ps(lo, _mm256_set1_ps(xsum[i * groups + g]), _mm256_loadu_ps(o));
        const __m256 d = _mm256_mul_ps(_mm256_cvtepi32_ps(a[i]), _mm256_mul_ps(sc, _mm256_set1_ps(xs[i * groups + g])));
        _mm256_storeu_ps(o, _mm256_add_ps(t, d));
      }
    }
  }
}
static const int W_MB = 4;  // rows per block: 4 accumulators, the half-block's two nibble registers
#else
#define W4A8_VARIANT "portable"
template <int R>
static void micro(const int8_t* p, int64_t K, const uint8_t* w, const bf16* sl, const float* xs,
                  const float* xsum, int64_t groups, int64_t gn, float* out, const char*, int) {
  for (int64_t g = 0; g < gn; ++g) {
    int32_t a[R][W_PANEL] = {};
    for (int64_t o = 0; o < W_GROUP / 8; ++o, w += 4 * 64)
      for (int i = 0; i < R; ++i) {
        const int8_t* pr = p + i * K + g * W_GROUP + 8 * o;
        for (int v = 0; v < 4; ++v)
          for (int j = 0; j < 16; ++j)
            for (int t = 0; t < 4; ++t) {
              const uint8_t b = w[v * 64 + 4 * j + t];
              a[i][16 * v + j] += (b & 15) * pr[t] + (b >> 4) * pr[4 + t];
            }
      }
    const bf16* s = sl + g * 2 * W_PANEL;
    for (int i = 0; i < R; ++i)
      for (int n = 0; n < W_PANEL; ++n) {
        float* o = out + i * W_PANEL + n;
        const float sc = bf2f(s[n]), lo = std::fma(-8.f, sc, bf2f(s[W_PANEL + n]));  // the VNNI path's operations
        const float t = std::fma(lo, xsum[i * groups + g], *o);
        *o = t + (float)a[i][n] * (sc * xs[i * groups + g]);
      }
  }
}
static const int W_MB = 1;
#endif

extern "C" const char* treespec_w4a8_variant() { return W4A8_VARIANT; }

// Rows [m0, m1) of one panel (codes, scales/lows s) by the micro kernel: out[m][0:64] += their sums.
// With several row blocks, the first streams a chunk and the rest compute from cache; each block
// also prefetches its share of the next chunk's codes into L2, so that DRAM keeps streaming while
// they compute (packed_gemm.cpp's panel_rows does the same for bf16).
static void vnni_rows(const int8_t* p, const float* xs, const float* xsum, const uint8_t* panel, const bf16* s,
                      int64_t K, int64_t m0, int64_t m1, float* out) {
  const int64_t groups = K / W_GROUP, blocks = (m1 - m0 + W_MB - 1) / W_MB;
  for (int64_t k0 = 0; k0 < K; k0 += W_KC) {
    const int64_t g0 = k0 / W_GROUP, gn = std::min(W_KC, K - k0) / W_GROUP, steps = gn * (W_GROUP / 8);
    const uint8_t* w = panel + k0 / 2 * W_PANEL;
    const bf16* sg = s + g0 * 2 * W_PANEL;
    const int per = blocks > 1 ? (int)((gn * W_GROUP / 2 + blocks * steps - 1) / (blocks * steps)) : 0;  // lines
    const char* next = reinterpret_cast<const char*>(w + gn * W_GROUP / 2 * W_PANEL);
    int64_t m = m0, block = 0;
    for (; m + W_MB <= m1; m += W_MB, ++block)
      micro<W_MB>(p + m * K + k0, K, w, sg, xs + m * groups + g0, xsum + m * groups + g0, groups, gn,
                  out + m * W_PANEL, next + block * per * steps * 64, per);
    const int8_t* pr = p + m * K + k0;
    const float *xr = xs + m * groups + g0, *sr = xsum + m * groups + g0;
    float* orow = out + m * W_PANEL;
    const char* pf = next + block * per * steps * 64;
    switch (m1 - m) {  // the remainder as one block: every code is split once per block
      case 3: micro<3>(pr, K, w, sg, xr, sr, groups, gn, orow, pf, per); break;
      case 2: micro<2>(pr, K, w, sg, xr, sr, groups, gn, orow, pf, per); break;
      case 1: micro<1>(pr, K, w, sg, xr, sr, groups, gn, orow, pf, per); break;
      default: break;
    }
  }
}

// The panels' bf16 output: y[m, n0 + j] = out[m][j] (+ bias), j < 64 and n0 + j < N.
static void write_panel(const float* out, const bf16* bias, bf16* y, int64_t M, int64_t N, int64_t b) {
  const int64_t n0 = b * W_PANEL, nn = std::min(W_PANEL, N - n0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < nn; ++j) y[m * N + n0 + j] = f2bf(out[m * W_PANEL + j] + (bias ? bf2f(bias[n0 + j]) : 0.f));
}

#ifdef W4A8_AMX
#include "w4a8_amx.h"
#else
extern "C" int treespec_w4a8_amx() { return 0; }
static int64_t amx_tiled_rows(int64_t, int64_t) { return 0; }
#endif

// codes [N, K] (0..15, one per byte), scale/zero [K/64, N] bf16 -> panels (header) and per-panel
// [K/64][2][64] bf16 (scales then zeros, zero past N).
extern "C" void treespec_pack_w4a8(const uint8_t* codes, const bf16* scale, const bf16* zero, uint8_t* out,
                                   bf16* sl, int64_t N, int64_t K, int threads) {
  const int64_t panels = w_panels(N), groups = K / W_GROUP;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t b = 0; b < panels; ++b) {
    uint8_t* o = out + b * W_PANEL * K / 2;
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t oc = 0; oc < W_GROUP / 8; ++oc)
        for (int64_t v = 0; v < 4; ++v)
          for (int64_t j = 0; j < 16; ++j)
            for (int64_t t = 0; t < 4; ++t) {
              const int64_t n = b * W_PANEL + 16 * v + j, k = g * W_GROUP + 8 * oc + t;
              const uint8_t c0 = n < N ? (uint8_t)(codes[n * K + k] & 15) : 0;
              const uint8_t c1 = n < N ? (uint8_t)(codes[n * K + k + 4] & 15) : 0;
              *o++ = (uint8_t)(c0 | (c1 << 4));
            }
    pack_panel_scales(scale, zero, sl + b * groups * 2 * W_PANEL, b, N, groups);
  }
}

// y [M, N] bf16 = x [M, K] bf16 times the packed weight (+ bias [N] bf16 or null); K % 64 == 0.
extern "C" void treespec_gemm_w4a8(const bf16* x, const uint8_t* packed, const bf16* sl, const bf16* bias, bf16* y,
                                   int64_t M, int64_t N, int64_t K, int threads, int64_t amx_rows) {
  const int64_t panels = w_panels(N), groups = K / W_GROUP;
  const int64_t tiled = amx_tiled_rows(M, amx_rows);  // rows [0, tiled) by AMX tiles, the rest by VNNI
  const int64_t Mp = tiled > 0 ? (M + 15) / 16 * 16 : M;  // tiles read whole 16-row blocks: zero rows past M
  std::vector<int8_t> p(Mp * K);
  std::vector<float> xs(Mp * groups), xsum(Mp * groups);
  quantize_rows(x, M, K, p.data(), xs.data(), xsum.data());
#pragma omp parallel num_threads(threads)
  {
#ifdef W4A8_AMX
    AmxPanel amx(tiled > 0);
#endif
    std::vector<float> out(M * W_PANEL);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < panels; ++b) {
      std::fill(out.begin(), out.end(), 0.f);
      const uint8_t* panel = packed + b * W_PANEL * K / 2;
      const bf16* s = sl + b * groups * 2 * W_PANEL;
#ifdef W4A8_AMX
      amx.run(p.data(), xs.data(), xsum.data(), panel, s, M, K, tiled, out.data());
#endif
      vnni_rows(p.data(), xs.data(), xsum.data(), panel, s, K, tiled, M, out.data());
      write_panel(out.data(), bias, y, M, N, b);
    }
  }
}
