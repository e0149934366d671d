// treespec's exact tree attention (loaded with packed_gemm.cpp by common/modeling/native.py; used by
// attention.ExactAttention for a w4a8 main model).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#include "bf16.h"
#include "exp_fast.h"
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

// Exact tree attention: softmax(q . k / sqrt(D)) v over each query row's visible cache columns, with
// one fixed order of operations per row whatever else is in the pass. A query row sees a list of
// columns (its committed prefix, the pending tokens, its tree ancestors: ascending positions); the
// same token verified in a tree or decoded alone sees the same keys in the same order, so its
// result is bit-identical (SDPA's blocked kernels sum in an order that depends on the pass's shape).
// With projections that are row-independent too (the W4A8 kernel), speculation then reproduces
// plain decoding bit for bit. Scores and sums in fp32; the softmax subtracts the row maximum.
template <typename T> static inline float ld(const T* p, int64_t i) { return (float)p[i]; }
template <> inline float ld<bf16>(const bf16* p, int64_t i) { return bf2f(p[i]); }
static inline void st(float* p, int64_t i, float v) { p[i] = v; }
static inline void st(bf16* p, int64_t i, float v) { p[i] = f2bf(v); }

// s[h * cnt + j] = q_h . k_{cols[j]} * scale for the g query heads qf[g * D] of one KV head; K/V rows
// are `step` elements apart, from `kb` (this slot and KV head).
template <typename T>
static void scores(const float* qf, const T* kb, const int32_t* cols, int64_t cnt, int64_t step, int64_t g,
                   int64_t D, float scale, float* s) {
  const int64_t D16 = D / 16 * 16;
  for (int64_t j = 0; j < cnt; ++j) {
    const T* kr = kb + (int64_t)cols[j] * step;
    for (int64_t h = 0; h < g; ++h) {
      const float* qh = qf + h * D;
      float part[16] = {0.f};  // 16 partial sums: vectorizes, in a fixed order
      for (int64_t d = 0; d < D16; d += 16)
        for (int i = 0; i < 16; ++i) part[i] += qh[d + i] * ld(kr, d + i);
      float t = 0.f;
      for (int64_t d = D16; d < D; ++d) t += qh[d] * ld(kr, d);
      for (int i = 0; i < 16; ++i) t += part[i];
      s[h * cnt + j] = t * scale;
    }
  }
}

// In place: one head's scores sh[0 .. cnt) -> exp(sh - their maximum) (every softmax below starts so).
static inline void exp_minus_max(float* sh, int64_t cnt) {
  float m = -INFINITY;
  for (int64_t j = 0; j < cnt; ++j) m = sh[j] > m ? sh[j] : m;
  for (int64_t j = 0; j < cnt; ++j) sh[j] = exp_fast(sh[j] - m);
}

// In place: each head's scores s[h * cnt .. + cnt) -> exp(s - max); linv[h] = 1 / their sum.
static void softmax_rows(float* s, int64_t cnt, int64_t g, float* linv) {
  for (int64_t h = 0; h < g; ++h) {
    float* sh = s + h * cnt;
    float l = 0.f;
    exp_minus_max(sh, cnt);
    for (int64_t j = 0; j < cnt; ++j) l += sh[j];
    linv[h] = l > 0.f ? 1.f / l : 0.f;
  }
}

#if defined(__AVX512F__)
// Vectorized for head dims that are a multiple of 16 (the portable loops below otherwise): each dot
// product is 16 lanes of fused multiply-adds over d, then the lanes' fixed-order tree sum
// (_mm512_reduce_add_ps); the value row accumulation keeps ascending columns. Still one order of
// operations per query row whatever else is in the pass.
static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
static inline __m512 load16(const bf16* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

// D / 16 <= 8 vectors (head dims up to 128) of one bf16 or fp32 row, widened to fp32 once.
template <typename T> static inline void load_row(const T* r, int nv, __m512* out) {
  for (int i = 0; i < nv; ++i) out[i] = load16(r + 16 * i);
}

template <typename T>
static void scores16(const float* qf, const T* kb, const int32_t* cols, int64_t cnt, int64_t step, int64_t g,
                     int64_t D, float scale, float* s) {
  const int nv = (int)(D / 16);
  __m512 kr[8];
  for (int64_t j = 0; j < cnt; ++j) {
    load_row(kb + (int64_t)cols[j] * step, nv, kr);  // the key row once for the g query heads
    for (int64_t h = 0; h < g; ++h) {
      __m512 acc = _mm512_setzero_ps();
      for (int i = 0; i < nv; ++i) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qf + h * D + 16 * i), kr[i], acc);
      s[h * cnt + j] = _mm512_reduce_add_ps(acc) * scale;
    }
  }
}

// acc[h * D + d] = sum over columns j (ascending) of p[h * cnt + j] * v_{cols[j]}[d]: two query heads'
// accumulators (2 x 8 vectors) stay in registers while each value row is widened once per head pair.
template <typename T>
static void weighted_values16(const float* p, const T* vb, const int32_t* cols, int64_t cnt, int64_t step,
                              int64_t g, int64_t D, float* acc) {
  const int nv = (int)(D / 16);
  for (int64_t h = 0; h < g; h += 2) {
    const bool two = h + 1 < g;
    __m512 a0[8], a1[8], vr[8];
    for (int i = 0; i < nv; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t j = 0; j < cnt; ++j) {
      load_row(vb + (int64_t)cols[j] * step, nv, vr);
      const __m512 p0 = _mm512_set1_ps(p[h * cnt + j]), p1 = _mm512_set1_ps(two ? p[(h + 1) * cnt + j] : 0.f);
      for (int i = 0; i < nv; ++i) a0[i] = _mm512_fmadd_ps(p0, vr[i], a0[i]);
      if (two)
        for (int i = 0; i < nv; ++i) a1[i] = _mm512_fmadd_ps(p1, vr[i], a1[i]);
    }
    for (int i = 0; i < nv; ++i) _mm512_storeu_ps(acc + h * D + 16 * i, a0[i]);
    if (two)
      for (int i = 0; i < nv; ++i) _mm512_storeu_ps(acc + (h + 1) * D + 16 * i, a1[i]);
  }
}

// In place: s[h * cnt ..) -> exp(s - max); linv[h] = 1 / sum (16 lanes of partial sums, then a tree sum).
static void softmax16(float* s, int64_t cnt, int64_t g, float* linv) {
  for (int64_t h = 0; h < g; ++h) {
    float* sh = s + h * cnt;
    exp_minus_max(sh, cnt);
    __m512 l = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= cnt; j += 16) l = _mm512_add_ps(l, _mm512_loadu_ps(sh + j));
    l = _mm512_add_ps(l, _mm512_maskz_loadu_ps((__mmask16)((1u << (cnt - j)) - 1), sh + j));
    const float sum = _mm512_reduce_add_ps(l);
    linv[h] = sum > 0.f ? 1.f / sum : 0.f;
  }
}
#endif

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
// AVX2 + FMA (no AVX-512: AMD Zen 2 / Zen 3 hosts), for head dims that are a multiple of 64 (Qwen2.5:
// 64, 128). The portable loops ran at scalar speed there (about 1.5 multiply-adds a cycle): a 1-row
// pass of the 1.5B main after 4,096 cached tokens cost 35 ms more than after 512 (28 layers x 2 KV
// heads x 6 query heads), ten times what reading those keys and values takes. Keys and values are
// widened to fp32 once per block of ACOLS columns into an L1 buffer shared by the KV head's query heads;
// a score is 8 lanes of fused multiply-adds over d (ascending) and one fixed-order sum of the lanes
// (``hsum8``), a value row accumulates ascending columns per lane. Every dot product and every
// weighted sum runs the same operations in the same order whatever block it falls in, so a query row's
// result does not depend on the pass around it (as on the AVX-512 path).
#define EXACT_AVX2 1
static const int64_t ACOLS = 32;  // columns per block: 32 x 128 fp32 = 16 KiB of keys or values in L1

static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 load8(const bf16* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}

static inline float hsum8(__m256 v) {  // (l0 + l4 + (l2 + l6)) + (l1 + l5 + (l3 + l7)), always so
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

// buf[c * D + d] = row cols[c] (c < n) of kb / vb widened to fp32; the rows of the next block (``ahead``
// more columns listed after these) are prefetched meanwhile: one KV head's rows are every KVH-th run of D
// values, a stride the hardware prefetcher followed too slowly (a 4,096-column 1-row pass streamed 7 GB/s).
template <typename T>
static inline void widen_block(const T* base, const int32_t* cols, int64_t n, int64_t ahead, int64_t step, int64_t D,
                               float* buf) {
  for (int64_t c = 0; c < n; ++c) {
    if (c < ahead) {
      const char* nr = (const char*)(base + (int64_t)cols[n + c] * step);
      for (int64_t b = 0; b < D * (int64_t)sizeof(T); b += 64) _mm_prefetch(nr + b, _MM_HINT_T0);
    }
    const T* r = base + (int64_t)cols[c] * step;
    for (int64_t d = 0; d < D; d += 8) _mm256_storeu_ps(buf + c * D + d, load8(r + d));
  }
}

// Scores of C columns (buf rows c0..) for one query head qh: C independent FMA chains over d.
template <int C>
static inline void dots(const float* qh, const float* buf, int64_t D, float scale, float* out) {
  __m256 a[C];
  for (int c = 0; c < C; ++c) a[c] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(qh + d);
    for (int c = 0; c < C; ++c) a[c] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(buf + c * D + d), a[c]);
  }
  for (int c = 0; c < C; ++c) out[c] = hsum8(a[c]) * scale;
}

template <typename T>
static void scores8(const float* qf, const T* kb, const int32_t* cols, int64_t cnt, int64_t step, int64_t g,
                    int64_t D, float scale, float* s, float* buf) {
  for (int64_t j0 = 0; j0 < cnt; j0 += ACOLS) {
    const int64_t n = std::min(ACOLS, cnt - j0);
    widen_block(kb, cols + j0, n, std::min(ACOLS, cnt - j0 - n), step, D, buf);
    for (int64_t h = 0; h < g; ++h) {
      int64_t c = 0;
      for (; c + 8 <= n; c += 8) dots<8>(qf + h * D, buf + c * D, D, scale, s + h * cnt + j0 + c);
      for (; c < n; ++c) dots<1>(qf + h * D, buf + c * D, D, scale, s + h * cnt + j0 + c);
    }
  }
}

// acc[h * D + d] += sum over columns j (ascending) of p[h * cnt + j] * v_{cols[j]}[d], 64 dims (8
// accumulators) of one query head at a time over each widened block.
template <typename T>
static void weighted_values8(const float* p, const T* vb, const int32_t* cols, int64_t cnt, int64_t step,
                             int64_t g, int64_t D, float* acc, float* buf) {
  std::fill(acc, acc + g * D, 0.f);
  for (int64_t j0 = 0; j0 < cnt; j0 += ACOLS) {
    const int64_t n = std::min(ACOLS, cnt - j0);
    widen_block(vb, cols + j0, n, std::min(ACOLS, cnt - j0 - n), step, D, buf);
    for (int64_t h = 0; h < g; ++h)
      for (int64_t d0 = 0; d0 < D; d0 += 64) {
        float* ah = acc + h * D + d0;
        __m256 a[8];
        for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(ah + 8 * i);
        for (int64_t c = 0; c < n; ++c) {
          const __m256 pc = _mm256_set1_ps(p[h * cnt + j0 + c]);
          for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(pc, _mm256_loadu_ps(buf + c * D + d0 + 8 * i), a[i]);
        }
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(ah + 8 * i, a[i]);
      }
  }
}

// In place: s[h * cnt ..) -> exp(s - max); linv[h] = 1 / sum (8 lanes of partial sums, then hsum8).
static void softmax8(float* s, int64_t cnt, int64_t g, float* linv) {
  for (int64_t h = 0; h < g; ++h) {
    float* sh = s + h * cnt;
    exp_minus_max(sh, cnt);
    __m256 l = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= cnt; j += 8) l = _mm256_add_ps(l, _mm256_loadu_ps(sh + j));
    alignas(32) float tail[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t t = 0; j + t < cnt; ++t) tail[t] = sh[j + t];
    const float sum = hsum8(_mm256_add_ps(l, _mm256_load_ps(tail)));
    linv[h] = sum > 0.f ? 1.f / sum : 0.f;
  }
}
#endif

// One (row, KV head) without AVX-512: scores, softmax, then the value rows in ascending columns.
template <typename T>
static void portable_row(const float* qf, const T* kb, const T* vb, const int32_t* cols, int64_t cnt, int64_t step,
                         int64_t g, int64_t D, float scale, float* s, float* linv, float* acc) {
  scores(qf, kb, cols, cnt, step, g, D, scale, s);
  softmax_rows(s, cnt, g, linv);
  std::fill(acc, acc + g * D, 0.f);
  for (int64_t j = 0; j < cnt; ++j) {  // ascending columns: the same order in every pass
    const T* vr = vb + (int64_t)cols[j] * step;
    for (int64_t h = 0; h < g; ++h) {
      const float p = s[h * cnt + j];
      float* a = acc + h * D;
      for (int64_t d = 0; d < D; ++d) a[d] += p * ld(vr, d);
    }
  }
}

// q, out [N, H, D]; k, v: one layer's cache [slots, L, KVH, D]; row n reads slot row_slot[n] at the
// columns cols[offsets[n] .. offsets[n + 1]). Grouped-query attention: H / KVH query heads per KV head.
template <typename T>
static void exact_attention(const T* q, const T* k, const T* v, T* out, const int64_t* row_slot,
                            const int64_t* offsets, const int32_t* cols, int64_t N, int64_t H, int64_t KVH,
                            int64_t D, int64_t L, float scale, int threads) {
  const int64_t g = H / KVH, step = KVH * D;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> qf(g * D), acc(g * D), s, linv(g);
#if defined(EXACT_AVX2)
    std::vector<float> buf(ACOLS * D);  // one block of widened keys or values
#endif
#pragma omp for schedule(static, 1)  // interleaved: a causal prefill's later rows cost more
    for (int64_t task = 0; task < N * KVH; ++task) {  // one (row, KV head): its g query heads share each K/V load
      const int64_t n = task / KVH, kh = task % KVH, c0 = offsets[n], cnt = offsets[n + 1] - c0;
      const int64_t base = row_slot[n] * L * step + kh * D;
      for (int64_t i = 0; i < g * D; ++i) qf[i] = ld(q, (n * H + kh * g) * D + i);
      s.assign(g * cnt, 0.f);
#if defined(__AVX512F__)
      if (D % 16 == 0 && D <= 128) {
        scores16(qf.data(), k + base, cols + c0, cnt, step, g, D, scale, s.data());
        softmax16(s.data(), cnt, g, linv.data());
        weighted_values16(s.data(), v + base, cols + c0, cnt, step, g, D, acc.data());
      } else
#elif defined(EXACT_AVX2)
      if (D % 64 == 0 && D <= 128) {
        scores8(qf.data(), k + base, cols + c0, cnt, step, g, D, scale, s.data(), buf.data());
        softmax8(s.data(), cnt, g, linv.data());
        weighted_values8(s.data(), v + base, cols + c0, cnt, step, g, D, acc.data(), buf.data());
      } else
#endif
        portable_row(qf.data(), k + base, v + base, cols + c0, cnt, step, g, D, scale, s.data(), linv.data(),
                     acc.data());
      for (int64_t h = 0; h < g; ++h)
        for (int64_t d = 0; d < D; ++d) st(out, (n * H + kh * g + h) * D + d, acc[h * D + d] * linv[h]);
    }
  }
}

extern "C" void treespec_exact_attention_bf16(const bf16* q, const bf16* k, const bf16* v, bf16* out,
                                              const int64_t* row_slot, const int64_t* offsets, const int32_t* cols,
                                              int64_t N, int64_t H, int64_t KVH, int64_t D, int64_t L, float scale,
                                              int threads) {
  exact_attention(q, k, v, out, row_slot, offsets, cols, N, H, KVH, D, L, scale, threads);
}
extern "C" void treespec_exact_attention_f32(const float* q, const float* k, const float* v, float* out,
                                             const int64_t* row_slot, const int64_t* offsets, const int32_t* cols,
                                             int64_t N, int64_t H, int64_t KVH, int64_t D, int64_t L, float scale,
                                             int threads) {
  exact_attention(q, k, v, out, row_slot, offsets, cols, N, H, KVH, D, L, scale, threads);
}
