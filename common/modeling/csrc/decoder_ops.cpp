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
#include "exp_fast.h"

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
