// bf16 <-> fp32 conversions shared by treespec's C++ kernels (packed_gemm.cpp, decoder_ops.cpp).
#pragma once
#include <cstdint>
#include <cstring>

typedef uint16_t bf16;

static inline float bf2f(bf16 v) { uint32_t u = (uint32_t)v << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline bf16 f2bf(float f) {  // round to nearest even, NaN kept quiet
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16)(u >> 16);
}
