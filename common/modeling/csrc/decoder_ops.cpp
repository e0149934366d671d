// treespec's fused bf16 decoder-block element-wise ops (RMSNorm with the residual add, rotary
// embedding in place, SiLU-gated product), built into the same library as packed_gemm.cpp.
//
// Why: a draft step runs a few rows through 24 layers; in torch each of these ops is 4-12 small
// kernels (upcast, square, mean, rsqrt, scale, downcast, ...), about 5 us of dispatch each, which
// summed to a third of a 0.5B draft level on a 2-core host. Here each op is one call that reads
// its input once, computes in fp32 and rounds once to bf16.
//
// Every row is computed on its own and in the same order whatever the number of rows, so a row's
// result does not depend on the rows beside it (speculation and plain decoding agree).
// Math: RMSNorm (Zhang & Sennrich 2019, eq. 4): y = w * x / sqrt(mean(x^2) + eps), with x rounded
// to bf16 before the weight multiplies it (as transformers' Qwen2RMSNorm does). Rotary embedding,
// rotate-half form (RoFormer, Su et al. 2021, section 3.4): for i < D/2,
//   y[i] = x[i] cos[i] - x[i + D/2] sin[i],  y[i + D/2] = x[i + D/2] cos[i + D/2] + x[i] sin[i + D/2].
// SwiGLU (Shazeer 2020, eq. 6): y = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#include "bf16.h"

// e^x to about 2e-7 relative error, branch-free so that loops over it vectorize (std::exp does
// not without -ffast-math; the build's -fno-trapping-math lets the clamp vectorize):
// e^x = 2^t = 2^n * 2^f with t = x log2(e), n = round(t), |f| <= 1/2, and 2^f by its Taylor series
// to degree 6; x is clamped to [-87, 88], where e^x is a normal float.
static inline float exp_fast(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);  // not fmin/fmax: those do not vectorize
  const float t = x * 1.44269504f;
  const int32_t n = (int32_t)(t + (t < 0.f ? -0.5f : 0.5f));  // round half away from zero
  const float f = t - (float)n;
  const float p = 1.f + f * (0.693147181f + f * (0.240226507f + f * (0.0555041087f + f * (0.00961812911f +
                  f * (0.00133335581f + f * 0.000154035304f)))));
  return p * __builtin_bit_cast(float, (n + 127) << 23);
}

// x[rows, H] (+)= res[rows, H] when res is given (x then holds the new residual stream, rounded to
// bf16), then out[rows, H] = rmsnorm(x) * w[H].
extern "C" void treespec_rms_norm(bf16* x, const bf16* res, const bf16* w, bf16* out, int64_t rows, int64_t H,
                                  float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (rows > 16)
  for (int64_t r = 0; r < rows; ++r) {
    bf16* xr = x + r * H;
    std::vector<float> xf(H);
    if (res)
      for (int64_t i = 0; i < H; ++i) xr[i] = f2bf(bf2f(xr[i]) + bf2f(res[r * H + i]));
    for (int64_t i = 0; i < H; ++i) xf[i] = bf2f(xr[i]);
    float part[16] = {0.f};  // 16 partial sums: the reduction vectorizes, in a fixed order
    int64_t i = 0;
    for (; i + 16 <= H; i += 16)
      for (int j = 0; j < 16; ++j) part[j] += xf[i + j] * xf[i + j];
    float ss = 0.f;
    for (; i < H; ++i) ss += xf[i] * xf[i];
    for (int j = 0; j < 16; ++j) ss += part[j];
    const float inv = 1.f / std::sqrt(ss / (float)H + eps);
    for (int64_t i = 0; i < H; ++i) out[r * H + i] = f2bf(bf2f(w[i]) * bf2f(f2bf(xf[i] * inv)));
  }
}

// In place on the first `heads` heads (of D values) of each row of qkv[rows, stride]; cos/sin[rows, D].
extern "C" void treespec_rope(bf16* qkv, const bf16* cos, const bf16* sin, int64_t rows, int64_t stride,
                              int64_t heads, int64_t D, int threads) {
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static) num_threads(threads) if (rows > 16)
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* c = cos + r * D;
    const bf16* s = sin + r * D;
    for (int64_t h = 0; h < heads; ++h) {
      bf16* x = qkv + r * stride + h * D;
      for (int64_t i = 0; i < half; ++i) {
        const float a = bf2f(x[i]), b = bf2f(x[i + half]);
        x[i] = f2bf(a * bf2f(c[i]) - b * bf2f(s[i]));
        x[i + half] = f2bf(b * bf2f(c[i + half]) + a * bf2f(s[i + half]));
      }
    }
  }
}

// out[rows, I] = silu(gu[:, :I]) * gu[:, I:] for gu[rows, 2I]; split into chunks of CHUNK values so
// that one row's work (I = 4864..8960) is shared by the threads too.
extern "C" void treespec_silu_mul(const bf16* gu, bf16* out, int64_t rows, int64_t I, int threads) {
  const int64_t CHUNK = 1024, per_row = (I + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) num_threads(threads) if (rows * I > 4 * CHUNK)
  for (int64_t c = 0; c < rows * per_row; ++c) {
    const int64_t r = c / per_row, i0 = c % per_row * CHUNK, n = std::min(CHUNK, I - i0);
    const bf16* __restrict g = gu + r * 2 * I + i0;
    const bf16* __restrict u = g + I;
    bf16* __restrict o = out + r * I + i0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = bf2f(g[i]);
      o[i] = f2bf(a / (1.f + exp_fast(-a)) * bf2f(u[i]));
    }
  }
}

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

// In place: each head's scores s[h * cnt .. + cnt) -> exp(s - max); linv[h] = 1 / their sum.
static void softmax_rows(float* s, int64_t cnt, int64_t g, float* linv) {
  for (int64_t h = 0; h < g; ++h) {
    float* sh = s + h * cnt;
    float m = -INFINITY, l = 0.f;
    for (int64_t j = 0; j < cnt; ++j) m = sh[j] > m ? sh[j] : m;
    for (int64_t j = 0; j < cnt; ++j) sh[j] = exp_fast(sh[j] - m);
    for (int64_t j = 0; j < cnt; ++j) l += sh[j];
    linv[h] = l > 0.f ? 1.f / l : 0.f;
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
#pragma omp for schedule(static)
    for (int64_t task = 0; task < N * KVH; ++task) {  // one (row, KV head): its g query heads share each K/V load
      const int64_t n = task / KVH, kh = task % KVH, c0 = offsets[n], cnt = offsets[n + 1] - c0;
      const int64_t base = row_slot[n] * L * step + kh * D;
      for (int64_t i = 0; i < g * D; ++i) qf[i] = ld(q, (n * H + kh * g) * D + i);
      s.assign(g * cnt, 0.f);
      scores(qf.data(), k + base, cols + c0, cnt, step, g, D, scale, s.data());
      softmax_rows(s.data(), cnt, g, linv.data());
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j < cnt; ++j) {  // ascending columns: the same order in every pass
        const T* vr = v + base + (int64_t)cols[c0 + j] * step;
        for (int64_t h = 0; h < g; ++h) {
          const float p = s[h * cnt + j];
          float* a = acc.data() + h * D;
          for (int64_t d = 0; d < D; ++d) a[d] += p * ld(vr, d);
        }
      }
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
