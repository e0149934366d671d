// treespec's vectorizable exp (decoder_ops.cpp's SiLU, exact_attention.cpp's softmax).
#pragma once
#include <cstdint>

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
