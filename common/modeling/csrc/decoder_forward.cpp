// treespec's native decoder pass: every layer of a Qwen2/Llama decoder over N packed rows in one call,
// built into the same library as the kernels it calls (packed_gemm.cpp, w4a8_gemm.cpp, decoder_ops.cpp,
// exact_attention.cpp).
//
// Why: a 0.5B draft level is about 100 native calls (4 projections, 2 norms, RoPE, the KV write,
// attention and SiLU per layer, 24 layers), and through Python each costs 5-15 us of argument
// checks, tensor allocation and ctypes dispatch: about 2 ms of a 10 ms level on a 2-core host. Here
// the layer loop runs in C++ and each step calls the same kernel with the same arguments as
// model.py's Python loop (DecoderModel._block), in the same order, so the result is bit for bit the
// same; common/modeling/native_forward.py decides when a pass may take this path.
//
// Per layer i, on the residual stream x [N, H] (bf16, updated in place) and the previous MLP output:
//   h = rmsnorm(x += delta);  qkv = h Wqkv^T + b;  RoPE on the q and k heads;  K/V rows -> cache;
//   a = attention(q over the cache, per-row CSR columns);  h = rmsnorm(x += a Wo^T);
//   delta = (silu(h Wg^T) * (h Wu^T)) Wd^T
// and finally out = rmsnorm(x += delta) with the final norm weight.
#include <cstdint>
#include <cstring>
#include <vector>
#include "bf16.h"

extern "C" {
void treespec_rms_norm(bf16* x, const bf16* res, const bf16* w, bf16* out, int64_t rows, int64_t H, float eps,
                       int threads);
void treespec_rope(bf16* qkv, const bf16* cos, const bf16* sin, int64_t rows, int64_t stride, int64_t heads,
                   int64_t D, int threads);
void treespec_silu_mul(const bf16* gu, bf16* out, int64_t rows, int64_t I, int threads);
void treespec_exact_attention_bf16(const bf16* q, const bf16* k, const bf16* v, bf16* out, const int64_t* row_slot,
                                   const int64_t* offsets, const int32_t* cols, int64_t N, int64_t H, int64_t KVH,
                                   int64_t D, int64_t L, float scale, int threads);
void treespec_gemm(const bf16* x, const bf16* packed, const bf16* bias, bf16* y, int64_t M, int64_t N, int64_t K,
                   int threads, int64_t amx_rows);
void treespec_gemm_int8(const bf16* x, const int8_t* packed, const float* scale, const bf16* bias, bf16* y,
                        int64_t M, int64_t N, int64_t K, int threads);
void treespec_gemm_int4(const bf16* x, const uint8_t* packed, const float* sl, const bf16* bias, bf16* y, int64_t M,
                        int64_t N, int64_t K, int threads);
void treespec_gemm_w4a8(const bf16* x, const uint8_t* packed, const bf16* sl, const bf16* bias, bf16* y, int64_t M,
                        int64_t N, int64_t K, int threads, int64_t amx_rows);
}

// One projection as native_forward.py describes it: 7 int64 (kind, data, scales, bias, n, k, amx_rows);
// kind 0 bf16, 1 int8, 2 int4, 3 w4a8 (native.PackedWeight.kind); pointers as integers, 0 = none.
struct Proj {
  int64_t kind, data, scales, bias, n, k, amx_rows;
};
enum { QKV = 0, O = 1, GATE_UP = 2, DOWN = 3 };

static void project(const Proj& p, const bf16* x, bf16* y, int64_t M, int threads) {
  const bf16* bias = (const bf16*)p.bias;
  switch (p.kind) {
    case 0: treespec_gemm(x, (const bf16*)p.data, bias, y, M, p.n, p.k, threads, p.amx_rows); break;
    case 1: treespec_gemm_int8(x, (const int8_t*)p.data, (const float*)p.scales, bias, y, M, p.n, p.k, threads); break;
    case 2: treespec_gemm_int4(x, (const uint8_t*)p.data, (const float*)p.scales, bias, y, M, p.n, p.k, threads); break;
    default:
      treespec_gemm_w4a8(x, (const uint8_t*)p.data, (const bf16*)p.scales, bias, y, M, p.n, p.k, threads, p.amx_rows);
  }
}

// x [N, H]: the rows' embeddings in, the residual stream after the last layer out; out [N, H]: the final
// hidden states. projs [layers][4] (QKV, O, GATE_UP, DOWN); norms [layers][2] (input, post-attention)
// + the final norm, bf16 [H] each. cos/sin [N, D]. kc/vc: the cache's K/V [layers][slots][L][KVH][D]; row n
// is written at (row_slot[n], row_pos[n]) (rows at L or beyond are dropped, as KVCache.write does) and
// attends to columns cols[offsets[n]:offsets[n+1]] of its slot.
extern "C" void treespec_decoder_forward(bf16* x, bf16* out, const int64_t* projs, const int64_t* norms,
                                         const bf16* cos, const bf16* sin, bf16* kc, bf16* vc, int64_t slots,
                                         int64_t L, const int64_t* row_slot, const int64_t* row_pos,
                                         const int64_t* offsets, const int32_t* cols, int64_t N, int64_t layers,
                                         int64_t H, int64_t heads, int64_t KVH, int64_t D, int64_t I, float eps,
                                         float scale, int threads) {
  const int64_t qd = heads * D, kvd = KVH * D, stride = qd + 2 * kvd, layer_elems = slots * L * kvd;
  std::vector<bf16> h(N * H), qkv(N * stride), q(N * qd), attn(N * qd), o(N * H), gu(N * 2 * I), act(N * I),
      delta(N * H);
  const Proj* p = (const Proj*)projs;
  for (int64_t i = 0; i < layers; ++i, p += 4) {
    const bf16* in_norm = (const bf16*)norms[2 * i];
    const bf16* post_norm = (const bf16*)norms[2 * i + 1];
    treespec_rms_norm(x, i ? delta.data() : nullptr, in_norm, h.data(), N, H, eps, threads);
    project(p[QKV], h.data(), qkv.data(), N, threads);
    treespec_rope(qkv.data(), cos, sin, N, stride, heads + KVH, D, threads);
    bf16* kl = kc + i * layer_elems;
    bf16* vl = vc + i * layer_elems;
    for (int64_t n = 0; n < N; ++n) {
      const bf16* row = qkv.data() + n * stride;
      std::memcpy(q.data() + n * qd, row, qd * sizeof(bf16));
      if (row_pos[n] >= L) continue;
      const int64_t at = (row_slot[n] * L + row_pos[n]) * kvd;
      std::memcpy(kl + at, row + qd, kvd * sizeof(bf16));
      std::memcpy(vl + at, row + qd + kvd, kvd * sizeof(bf16));
    }
    treespec_exact_attention_bf16(q.data(), kl, vl, attn.data(), row_slot, offsets, cols, N, heads, KVH, D, L, scale,
                                  threads);
    project(p[O], attn.data(), o.data(), N, threads);
    treespec_rms_norm(x, o.data(), post_norm, h.data(), N, H, eps, threads);
    project(p[GATE_UP], h.data(), gu.data(), N, threads);
    treespec_silu_mul(gu.data(), act.data(), N, I, threads);
    project(p[DOWN], act.data(), delta.data(), N, threads);
  }
  treespec_rms_norm(x, layers ? delta.data() : nullptr, (const bf16*)norms[2 * layers], out, N, H, eps, threads);
}
