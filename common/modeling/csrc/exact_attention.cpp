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
#include "exact_attention_avx2.h"  // EXACT_AVX2: row groups
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

#if defined(EXACT_AVX2)
static const int64_t GROUP_ROWS = 16;  // rows of one slot attended together at most (their scores: 16 x g x cnt floats)
#endif

// Row groups: starts = the first row of each, then N; shared[i] = how many columns every row of group i lists
// first alike. Consecutive rows of one slot share a group (at most ``cap`` rows) while a row's column list
// begins with at least half of the group's first row's list (a tree's or a prefill chunk's rows after the
// committed columns; a padding row, which sees column 0 only, starts its own).
struct RowGroups {
  std::vector<int64_t> starts, shared;
};
static RowGroups row_groups(const int64_t* row_slot, const int64_t* offsets, const int32_t* cols, int64_t N,
                            int64_t cap) {
  RowGroups out;
  for (int64_t n = 0; n < N; ++n) {
    if (!out.starts.empty() && n - out.starts.back() < cap && row_slot[n] == row_slot[out.starts.back()]) {
      const int64_t f = out.starts.back(), len = std::min(offsets[f + 1] - offsets[f], offsets[n + 1] - offsets[n]);
      const int32_t* a = cols + offsets[f];
      const int64_t common = std::mismatch(a, a + len, cols + offsets[n]).first - a;
      if (common >= std::max<int64_t>(1, (offsets[f + 1] - offsets[f]) / 2)) {
        out.shared.back() = std::min(out.shared.back(), common);
        continue;
      }
    }
    out.starts.push_back(n);
    out.shared.push_back(offsets[n + 1] - offsets[n]);
  }
  out.starts.push_back(N);
  return out;
}

// One row's attention over one KV head by the AVX-512 or the portable loops (outputs unnormalized in acc).
template <typename T>
static void one_row(const float* qf, const T* kb, const T* vb, const int32_t* cols, int64_t cnt, int64_t step,
                    int64_t g, int64_t D, float scale, float* s, float* linv, float* acc) {
#if defined(__AVX512F__)
  if (D % 16 == 0 && D <= 128) {
    scores16(qf, kb, cols, cnt, step, g, D, scale, s);
    softmax16(s, cnt, g, linv);
    weighted_values16(s, vb, cols, cnt, step, g, D, acc);
    return;
  }
#endif
  portable_row(qf, kb, vb, cols, cnt, step, g, D, scale, s, linv, acc);
}

// One task: rows [n0, n0 + m) of one slot (a row group whose lists begin with ``shared`` columns alike) over
// KV head kh; out rows written normalized.
template <typename T>
static void attend_group(const T* q, const T* k, const T* v, T* out, const int64_t* row_slot, const int64_t* offsets,
                         const int32_t* cols, int64_t n0, int64_t m, int64_t shared, int64_t kh, int64_t H,
                         int64_t KVH, int64_t D, int64_t L, float scale, std::vector<float>* work) {
  const int64_t g = H / KVH, step = KVH * D, base = row_slot[n0] * L * step + kh * D;
  std::vector<const int32_t*> rc(m);
  std::vector<int64_t> cnt(m), soff(m + 1, 0);
  for (int64_t r = 0; r < m; ++r) {
    rc[r] = cols + offsets[n0 + r], cnt[r] = offsets[n0 + r + 1] - offsets[n0 + r];
    soff[r + 1] = soff[r] + g * cnt[r];
  }
  std::vector<float>&qf = work[0], &acc = work[1], &s = work[2], &linv = work[3], &buf = work[4];
  qf.resize(m * g * D), acc.resize(m * g * D), s.assign(soff[m], 0.f), linv.resize(m * g);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < g * D; ++i) qf[r * g * D + i] = ld(q, ((n0 + r) * H + kh * g) * D + i);
#if defined(EXACT_AVX2)
  if (D % 64 == 0 && D <= 128) {
    buf.resize(ACOLS * D);
    group_rows8(qf.data(), k + base, v + base, RowGroup{m, shared, rc.data(), cnt.data()}, step, g, D, scale, s.data(),
                soff.data(), linv.data(), acc.data(), buf.data());
  } else
#endif
    for (int64_t r = 0; r < m; ++r)
      one_row(qf.data() + r * g * D, k + base, v + base, rc[r], cnt[r], step, g, D, scale, s.data() + soff[r],
              linv.data() + r * g, acc.data() + r * g * D);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t h = 0; h < g; ++h)
      for (int64_t d = 0; d < D; ++d)
        st(out, ((n0 + r) * H + kh * g + h) * D + d, acc[(r * g + h) * D + d] * linv[r * g + h]);
}

// q, out [N, H, D]; k, v: one layer's cache [slots, L, KVH, D]; row n reads slot row_slot[n] at the
// columns cols[offsets[n] .. offsets[n + 1]). Grouped-query attention: H / KVH query heads per KV head.
// Tasks are (row group, KV head), interleaved across threads (a causal prefill's later rows cost more);
// groups of several rows only where the AVX2 loops run and there are tasks enough for every thread.
template <typename T>
static void exact_attention(const T* q, const T* k, const T* v, T* out, const int64_t* row_slot,
                            const int64_t* offsets, const int32_t* cols, int64_t N, int64_t H, int64_t KVH,
                            int64_t D, int64_t L, float scale, int threads) {
  int64_t cap = 1;
#if defined(EXACT_AVX2)
  if (D % 64 == 0 && D <= 128) cap = std::max<int64_t>(1, std::min(GROUP_ROWS, N * KVH / std::max(threads, 1)));
#endif
  const RowGroups grp = row_groups(row_slot, offsets, cols, N, cap);
  const int64_t groups = (int64_t)grp.shared.size();
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> work[5];  // this thread's query, output, score, 1 / sum and block buffers
#pragma omp for schedule(static, 1)
    for (int64_t task = 0; task < groups * KVH; ++task) {
      const int64_t gi = task / KVH;
      attend_group(q, k, v, out, row_slot, offsets, cols, grp.starts[gi], grp.starts[gi + 1] - grp.starts[gi],
                   grp.shared[gi], task % KVH, H, KVH, D, L, scale, work);
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
