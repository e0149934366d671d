// Per-panel scales and lows of the int4 layouts (packed_gemm.cpp's int4 panels, w4a8_gemm.cpp's):
// for panel b of 64 output channels, groups x [64 scales, then 64 lows], zero past N.
#pragma once
#include <cstdint>

static inline void pack_panel_scales(const float* scale, const float* lo, float* s, int64_t b, int64_t N,
                                     int64_t groups) {  // scale, lo: [groups, N]; s: [groups][2][64]
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < 64; ++j) {
      const int64_t n = b * 64 + j;
      s[g * 128 + j] = n < N ? scale[g * N + n] : 0.f;
      s[g * 128 + 64 + j] = n < N ? lo[g * N + n] : 0.f;
    }
}
