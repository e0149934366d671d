// treespec's exact tree attention, AVX2 + FMA loops (hosts without AVX-512: AMD Zen 2 / Zen 3), for head
// dims that are a multiple of 64 (Qwen2.5: 64, 128). Included by exact_attention.cpp only, after its
// exp_minus_max. The portable loops ran at scalar speed there (about 1.5 multiply-adds a cycle): a 1-row
// pass of the 1.5B main after 4,096 cached tokens cost 35 ms more than after 512 (28 layers x 2 KV
// heads x 6 query heads), ten times what reading those keys and values takes. Keys and values are
// widened to fp32 once per block of ACOLS columns into an L1 buffer; a score is 8 lanes of fused
// multiply-adds over d (ascending) and one fixed-order sum of the lanes (``hsum8``), a value row
// accumulates ascending columns per lane. Every dot product and every weighted sum runs the same
// operations in the same order whatever block it falls in, so a query row's result does not depend
// on the pass around it (as on the AVX-512 path).
//
// Rows of one slot are attended as a group (``RowGroup``): a tree's rows, or a prefill chunk's, list
// the same committed columns first, and a block of those is widened once for every query head of
// every row in the group, so its keys and values leave memory once instead of once per row (8 rows
// of a 2,048-column pass cost 7.5x one row when each row read them alone).
#pragma once
#include <algorithm>
#include <cstdint>
#include <immintrin.h>
#include "bf16.h"

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

// s[h * cnt + c] = qf[h * D ..] . buf[c * D ..] * scale for one row's g query heads over a widened block of
// n columns (s points at the block's first column in the row's list of cnt).
static inline void block_scores(const float* qf, const float* buf, int64_t n, int64_t cnt, int64_t g, int64_t D,
                                float scale, float* s) {
  for (int64_t h = 0; h < g; ++h) {
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) dots<8>(qf + h * D, buf + c * D, D, scale, s + h * cnt + c);
    for (; c < n; ++c) dots<1>(qf + h * D, buf + c * D, D, scale, s + h * cnt + c);
  }
}

// acc[h * D + d] += p[h * cnt + c] * buf[c * D + d] over a widened block's n columns (ascending), for one
// row's g query heads, 64 dims (8 accumulators) at a time; p points at the block's first column.
static inline void block_values(const float* p, const float* buf, int64_t n, int64_t cnt, int64_t g, int64_t D,
                                float* acc) {
  for (int64_t h = 0; h < g; ++h)
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
      float* ah = acc + h * D + d0;
      __m256 a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(ah + 8 * i);
      for (int64_t c = 0; c < n; ++c) {
        const __m256 pc = _mm256_set1_ps(p[h * cnt + c]);
        for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(pc, _mm256_loadu_ps(buf + c * D + d0 + 8 * i), a[i]);
      }
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(ah + 8 * i, a[i]);
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

// m rows of one slot: row r reads the cnt[r] columns cols[r][..]; the first ``shared`` are the same in every
// row's list (the committed prefix a tree's or a prefill chunk's rows all see).
struct RowGroup {
  int64_t m, shared;
  const int32_t* const* cols;
  const int64_t* cnt;
};

// fn(r, j0, n) for every block of ACOLS columns (the last one shorter) of every row, ascending per row,
// with buf holding that block of ``base``'s rows widened: a block inside the shared columns is widened once
// for all rows, one past them once per row that reaches it.
template <typename T, typename F>
static void for_blocks(const T* base, const RowGroup& grp, int64_t step, int64_t D, float* buf, F fn) {
  const int64_t most = *std::max_element(grp.cnt, grp.cnt + grp.m);
  for (int64_t j0 = 0; j0 < most; j0 += ACOLS) {
    if (j0 + ACOLS <= grp.shared) {
      widen_block(base, grp.cols[0] + j0, ACOLS, std::min(ACOLS, grp.cnt[0] - j0 - ACOLS), step, D, buf);
      for (int64_t r = 0; r < grp.m; ++r) fn(r, j0, ACOLS);
      continue;
    }
    for (int64_t r = 0; r < grp.m; ++r) {
      const int64_t n = std::min(ACOLS, grp.cnt[r] - j0);
      if (n <= 0) continue;
      widen_block(base, grp.cols[r] + j0, n, std::min(ACOLS, grp.cnt[r] - j0 - n), step, D, buf);
      fn(r, j0, n);
    }
  }
}

// One row group over one KV head (kb, vb: this slot's and head's rows, ``step`` elements apart): the g query
// heads of row r are qf[(r * g + h) * D ..]; their scores go to s[soff[r] + h * cnt[r] ..], 1 / softmax sums
// to linv[r * g + h], unnormalized outputs to acc[(r * g + h) * D ..]. buf: ACOLS * D floats.
template <typename T>
static void group_rows8(const float* qf, const T* kb, const T* vb, const RowGroup& grp, int64_t step, int64_t g,
                        int64_t D, float scale, float* s, const int64_t* soff, float* linv, float* acc, float* buf) {
  for_blocks(kb, grp, step, D, buf, [&](int64_t r, int64_t j0, int64_t n) {
    block_scores(qf + r * g * D, buf, n, grp.cnt[r], g, D, scale, s + soff[r] + j0);
  });
  for (int64_t r = 0; r < grp.m; ++r) softmax8(s + soff[r], grp.cnt[r], g, linv + r * g);
  std::fill(acc, acc + grp.m * g * D, 0.f);
  for_blocks(vb, grp, step, D, buf, [&](int64_t r, int64_t j0, int64_t n) {
    block_values(s + soff[r] + j0, buf, n, grp.cnt[r], g, D, acc + r * g * D);
  });
}
