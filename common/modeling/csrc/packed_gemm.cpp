// treespec's bf16 projection kernel: y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]), bf16 in and out,
// fp32 accumulation. Built at worker start by common/modeling/native.py (g++ -O3 -march=native).
//
// Why: a decode step streams every weight once for 1..64 rows (a token or a token tree), so it is
// memory-bandwidth bound. W is repacked once into panels of 64 output channels, each a contiguous
// run of k-pairs ([N/64][K/2][64][2], zero-padded): one sequential stream per thread (what hardware
// prefetchers follow best), and with AVX512-BF16 one VDPBF16PS multiplies a broadcast pair of
// activations by a pair of weights for 16 outputs, so no horizontal sums are needed (the
// register-blocked GEMM micro-kernel of Goto & van de Geijn 2008, section 5, with the "VNNI"
// pair layout oneDNN uses for bf16). Up to MB rows share each weight load (rows 8..16 cost
// little more than 1). Every row is accumulated in the same order whatever M is, so a row's
// result does not depend on how many rows ride with it (speculation and plain decoding agree).
//
// Variants by compiler target: AVX512-BF16, AVX2+FMA, portable C++ (same layout, same results up
// to fp32 summation order within a row).
//
// int8 weights (symmetric, one scale per output channel: W ~= q * scale[n]) use the same panel
// layout with 1 byte per weight: half the bytes streamed per step. The kernel widens q to bf16 in
// registers (exact: |q| <= 127 fits bf16's 8-bit significand), accumulates x . q in fp32 like the
// bf16 kernel, and scales each output once at the end.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef uint16_t bf16;
static const int64_t PANEL = 64;  // output channels per panel
static const int64_t KC = 1024;   // k's per chunk: a panel's chunk (128 KiB) stays in L2 across row blocks

static inline float bf2f(bf16 v) { uint32_t u = (uint32_t)v << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline bf16 f2bf(float f) {  // round to nearest even, NaN kept quiet
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16)(u >> 16);
}
static inline int64_t kpad(int64_t K) { return (K + 1) & ~int64_t(1); }
static inline int64_t npad(int64_t N) { return (N + PANEL - 1) / PANEL * PANEL; }

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define VARIANT "avx512bf16"
static const int MB = 6;  // rows per register block: 6 x 4 accumulators + 4 weight registers
// acc[i][0:64] += x[i, k0:k0+kc] . panel[k0:k0+kc] for R rows (x rows have even length K)
template <int R>
static void micro(const bf16* x, int64_t K, const bf16* panel, int64_t k0, int64_t kc, float* acc) {
  __m512 a[R][4];
  for (int i = 0; i < R; ++i) for (int v = 0; v < 4; ++v) a[i][v] = _mm512_loadu_ps(acc + i * PANEL + v * 16);
  const bf16* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    __m512bh w0 = (__m512bh)_mm512_loadu_si512(p), w1 = (__m512bh)_mm512_loadu_si512(p + 32);
    __m512bh w2 = (__m512bh)_mm512_loadu_si512(p + 64), w3 = (__m512bh)_mm512_loadu_si512(p + 96);
    for (int i = 0; i < R; ++i) {
      int32_t pair; std::memcpy(&pair, x + i * K + k, 4);
      __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
      a[i][0] = _mm512_dpbf16_ps(a[i][0], xb, w0); a[i][1] = _mm512_dpbf16_ps(a[i][1], xb, w1);
      a[i][2] = _mm512_dpbf16_ps(a[i][2], xb, w2); a[i][3] = _mm512_dpbf16_ps(a[i][3], xb, w3);
    }
  }
  for (int i = 0; i < R; ++i) for (int v = 0; v < 4; ++v) _mm512_storeu_ps(acc + i * PANEL + v * 16, a[i][v]);
}

// int8 panel: the same [K/2][64][2] order, one byte each; widened to bf16 in registers.
static inline __m512bh widen32(const int8_t* p) {  // 32 int8 -> 32 bf16 (exact)
  __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
  __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(p + 16))));
  return _mm512_cvtne2ps_pbh(hi, lo);  // lanes 0..15 from lo, 16..31 from hi
}
template <int R>
static void micro(const bf16* x, int64_t K, const int8_t* panel, int64_t k0, int64_t kc, float* acc) {
  __m512 a[R][4];
  for (int i = 0; i < R; ++i) for (int v = 0; v < 4; ++v) a[i][v] = _mm512_loadu_ps(acc + i * PANEL + v * 16);
  const int8_t* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    __m512bh w0 = widen32(p), w1 = widen32(p + 32), w2 = widen32(p + 64), w3 = widen32(p + 96);
    for (int i = 0; i < R; ++i) {
      int32_t pair; std::memcpy(&pair, x + i * K + k, 4);
      __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
      a[i][0] = _mm512_dpbf16_ps(a[i][0], xb, w0); a[i][1] = _mm512_dpbf16_ps(a[i][1], xb, w1);
      a[i][2] = _mm512_dpbf16_ps(a[i][2], xb, w2); a[i][3] = _mm512_dpbf16_ps(a[i][3], xb, w3);
    }
  }
  for (int i = 0; i < R; ++i) for (int v = 0; v < 4; ++v) _mm512_storeu_ps(acc + i * PANEL + v * 16, a[i][v]);
}
#elif defined(__AVX2__) && defined(__FMA__)
#define VARIANT "avx2"
static const int MB = 1;  // 8 accumulators of 8 outputs fill the 16 ymm registers with temporaries
template <int R>
static void micro(const bf16* x, int64_t /*K*/, const bf16* panel, int64_t k0, int64_t kc, float* acc) {
  __m256 a[8];
  for (int v = 0; v < 8; ++v) a[v] = _mm256_loadu_ps(acc + v * 8);
  const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
  const bf16* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    __m256 x0 = _mm256_set1_ps(bf2f(x[k])), x1 = _mm256_set1_ps(bf2f(x[k + 1]));
    for (int v = 0; v < 8; ++v) {  // 8 outputs x (k, k+1), interleaved
      __m256i w = _mm256_loadu_si256((const __m256i*)(p + v * 16));
      a[v] = _mm256_fmadd_ps(x0, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), a[v]);
      a[v] = _mm256_fmadd_ps(x1, _mm256_castsi256_ps(_mm256_and_si256(w, hi)), a[v]);
    }
  }
  for (int v = 0; v < 8; ++v) _mm256_storeu_ps(acc + v * 8, a[v]);
}
template <int R>
static void micro(const bf16* x, int64_t /*K*/, const int8_t* panel, int64_t k0, int64_t kc, float* acc) {
  __m256 a[8];
  for (int v = 0; v < 8; ++v) a[v] = _mm256_loadu_ps(acc + v * 8);
  const int8_t* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    __m256 x0 = _mm256_set1_ps(bf2f(x[k])), x1 = _mm256_set1_ps(bf2f(x[k + 1]));
    for (int v = 0; v < 8; ++v) {  // 8 outputs x (k, k+1): 16 int8 widened to int16 pairs
      __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p + v * 16)));
      __m256 even = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(w, 16), 16));
      a[v] = _mm256_fmadd_ps(x0, even, a[v]);
      a[v] = _mm256_fmadd_ps(x1, _mm256_cvtepi32_ps(_mm256_srai_epi32(w, 16)), a[v]);
    }
  }
  for (int v = 0; v < 8; ++v) _mm256_storeu_ps(acc + v * 8, a[v]);
}
#else
#define VARIANT "portable"
static const int MB = 1;
template <int R>
static void micro(const bf16* x, int64_t /*K*/, const bf16* panel, int64_t k0, int64_t kc, float* acc) {
  const bf16* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    float x0 = bf2f(x[k]), x1 = bf2f(x[k + 1]);
    for (int j = 0; j < PANEL; ++j) acc[j] += x0 * bf2f(p[2 * j]) + x1 * bf2f(p[2 * j + 1]);
  }
}
template <int R>
static void micro(const bf16* x, int64_t /*K*/, const int8_t* panel, int64_t k0, int64_t kc, float* acc) {
  const int8_t* p = panel + k0 * PANEL;
  for (int64_t k = k0; k < k0 + kc; k += 2, p += 2 * PANEL) {
    float x0 = bf2f(x[k]), x1 = bf2f(x[k + 1]);
    for (int j = 0; j < PANEL; ++j) acc[j] += x0 * (float)p[2 * j] + x1 * (float)p[2 * j + 1];
  }
}
#endif

// All M rows of one panel chunk, MB rows at a time (the remainder as one smaller block).
template <typename W>
static void panel_rows(const bf16* x, int64_t M, int64_t K, const W* panel, int64_t k0, int64_t kc, float* acc) {
  int64_t m = 0;
  for (; m + MB <= M; m += MB) micro<MB>(x + m * K, K, panel, k0, kc, acc + m * PANEL);
  const bf16* xr = x + m * K;
  float* ar = acc + m * PANEL;
  switch (M - m) {  // only reached with MB > 1: R rows of micro<R> then share each weight load
    case 5: micro<5>(xr, K, panel, k0, kc, ar); break;
    case 4: micro<4>(xr, K, panel, k0, kc, ar); break;
    case 3: micro<3>(xr, K, panel, k0, kc, ar); break;
    case 2: micro<2>(xr, K, panel, k0, kc, ar); break;
    case 1: micro<1>(xr, K, panel, k0, kc, ar); break;
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

// y [M, N] = (x [M, K] @ W^T) * scale + bias; x rows contiguous with an even K (the caller pads
// odd K); scale [N] or null (bf16 weights).
template <typename W>
static void gemm(const bf16* x, const W* packed, const float* scale, const bf16* bias, bf16* y,
                 int64_t M, int64_t N, int64_t K, int threads) {
  const int64_t panels = npad(N) / PANEL;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> acc(M * PANEL);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < panels; ++b) {
      std::fill(acc.begin(), acc.end(), 0.f);
      const W* panel = packed + b * PANEL * K;
      for (int64_t k0 = 0; k0 < K; k0 += KC) panel_rows(x, M, K, panel, k0, std::min(KC, K - k0), acc.data());
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
                              int64_t M, int64_t N, int64_t K, int threads) {
  gemm(x, packed, nullptr, bias, y, M, N, K, threads);
}
extern "C" void treespec_gemm_int8(const bf16* x, const int8_t* packed, const float* scale, const bf16* bias,
                                   bf16* y, int64_t M, int64_t N, int64_t K, int threads) {
  gemm(x, packed, scale, bias, y, M, N, K, threads);
}
