#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cstdint>
#include <cstring>
typedef uint16_t bf16t;
extern "C" {
void treespec_pack_w4a8(const uint8_t* codes, const bf16t* scale, const bf16t* zero, uint8_t* out, bf16t* sl, int64_t N, int64_t K, int threads);
void treespec_gemm_w4a8(const bf16t* x, const uint8_t* packed, const bf16t* sl, const bf16t* bias, bf16t* y, int64_t M, int64_t N, int64_t K, int threads, int64_t amx_rows);
}
static bf16t f2b(float f){uint32_t u;memcpy(&u,&f,4);return u>>16;}
static float b2f(bf16t b){uint32_t u=(uint32_t)b<<16;float f;memcpy(&f,&u,4);return f;}
int main(int argc, char** argv) {
  int threads = atoi(argv[1]); int copies = atoi(argv[2]); int check = argc > 3;
  const int64_t shapes[2][2] = {{17920, 1536}, {1536, 8960}};
  for (auto& sh : shapes) {
    int64_t N = sh[0], K = sh[1];
    std::vector<std::vector<uint8_t>> P(copies); std::vector<std::vector<bf16t>> S(copies);
    std::vector<uint8_t> codes(N * K); std::vector<bf16t> sc(K / 64 * N), ze(K / 64 * N);
    srand(1);
    for (auto& c : codes) c = rand() & 15;
    for (auto& s : sc) s = f2b(0.001f * (1 + rand() % 7));
    for (auto& z : ze) z = f2b(0.0005f * (rand() % 11 - 5));
    int64_t panels = (N + 63) / 64;
    for (int c = 0; c < copies; ++c) { P[c].resize(N * K / 2 + 64 * K); S[c].resize(panels * (K / 64) * 128); treespec_pack_w4a8(codes.data(), sc.data(), ze.data(), P[c].data(), S[c].data(), N, K, threads); }
    std::vector<bf16t> x(16 * K); for (auto& v : x) v = f2b((rand() % 2001 - 1000) / 500.f);
    if (check) {  // row independence + checksum
      std::vector<bf16t> y1(N), y16(16 * N);
      treespec_gemm_w4a8(x.data() + 5 * K, P[0].data(), S[0].data(), nullptr, y1.data(), 1, N, K, threads, 0);
      treespec_gemm_w4a8(x.data(), P[0].data(), S[0].data(), nullptr, y16.data(), 16, N, K, threads, 0);
      int bad = memcmp(y1.data(), y16.data() + 5 * N, N * 2) != 0;
      double sum = 0; for (auto v : y16) sum += b2f(v);
      printf("N=%ld K=%ld rowdep_mismatch=%d checksum=%.6f\n", N, K, bad, sum);
    }
    for (int M : {1, 2, 4, 8, 16, 32}) {
      std::vector<bf16t> xx(M * K); for (int64_t i = 0; i < M * K; ++i) xx[i] = x[i % (16 * K)];
      std::vector<bf16t> y(M * N);
      double best = 1e9;
      for (int r = 0; r < 5; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < copies; ++c) treespec_gemm_w4a8(xx.data(), P[c].data(), S[c].data(), nullptr, y.data(), M, N, K, threads, 0);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      printf("%ld %ld %d %.3f %.1f\n", N, K, M, best * 1e3 / copies, 1.0 * M * N * K * copies / best / 1e9);
    }
  }
}
