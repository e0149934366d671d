#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
// maddubs throughput ceilings: (a) maddubs + add16 chains, (b) + broadcast loads from memory
int main() {
  alignas(64) int8_t act[4096]; for (int i = 0; i < 4096; ++i) act[i] = i * 7;
  const long iters = 200000000L / 8;
  __m256i w0 = _mm256_set1_epi8(3), w1 = _mm256_set1_epi8(5);
  {
    __m256i c[8]; for (int i = 0; i < 8; ++i) c[i] = _mm256_set1_epi16(i);
    __m256i x = _mm256_set1_epi8(1);
    auto t0 = std::chrono::steady_clock::now();
    for (long it = 0; it < iters; ++it) {
      for (int i = 0; i < 8; ++i) { c[i] = _mm256_add_epi16(c[i], _mm256_maddubs_epi16(i & 1 ? w1 : w0, x)); asm("" : "+x"(c[i])); }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int sum = 0; for (int i = 0; i < 8; ++i) sum += _mm256_extract_epi16(c[i], 0);
    printf("maddubs+add: %.2f G maddubs/s (%d)\n", iters * 8 / s / 1e9, sum);
  }
  {
    __m256i c[8]; for (int i = 0; i < 8; ++i) c[i] = _mm256_set1_epi16(i);
    auto t0 = std::chrono::steady_clock::now();
    for (long it = 0; it < iters; ++it) {
      const int8_t* p = act + (it & 63) * 32;
      for (int i = 0; i < 8; ++i) { int32_t q; __builtin_memcpy(&q, p + 4 * i, 4); c[i] = _mm256_add_epi16(c[i], _mm256_maddubs_epi16(i & 1 ? w1 : w0, _mm256_set1_epi32(q))); asm("" : "+x"(c[i])); }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int sum = 0; for (int i = 0; i < 8; ++i) sum += _mm256_extract_epi16(c[i], 0);
    printf("bcast+maddubs+add: %.2f G maddubs/s (%d)\n", iters * 8 / s / 1e9, sum);
  }
}
