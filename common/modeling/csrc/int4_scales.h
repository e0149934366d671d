// Per-panel scale pairs of the int4 layouts: for panel b of 64 output channels, groups x [64 scales,
// then 64 second values], zero past N (packed_gemm.cpp: fp32 scales and lows; w4a8_gemm.cpp: bf16
// scales and zeros).
#pragma once
#include <cstdint>

template <typename T>
static inline void pack_panel_scales(const T* scale, const T* lo, T* s, int64_t b, int64_t N,
                                     int64_t groups) {  // scale, lo: [groups, N]; s: [groups][2][64]
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < 64; ++j) {
      const int64_t n = b * 64 + j;
      s[g * 128 + j] = n < N ? scale[g * N + n] : T(0);
      s[g * 128 + 64 + j] = n < N ? lo[g * N + n] : T(0);
    }
}
