// The W4A8 kernel's AMX-INT8 path (included by w4a8_gemm.cpp where W4A8_AMX is defined: its
// constants, group_scales and vnni_rows come from there).
#pragma once
#include "amx.h"

// AMX-INT8 path for many rows (a token tree, a prefill). One TDPBSUD multiplies a 16-row x 64-channel
// int8 activation tile by a 64-channel x 16-output tile of codes (Intel SDM vol. 2, TDPBSUD; Intel
// Optimization Reference Manual, "Intel AMX"), 16x the MACs of a VPDPBUSD. Each group's int32 sums are
// the same exact integers as the VNNI path's, and the float epilogue below is that path's, operation for
// operation, so both paths give bit-identical results and may be mixed across row counts.
// The codes tile (B, "VNNI layout": row r = channels 4r..4r+3 of 16 outputs) of output block v is the
// low nibbles (row 2o) and high nibbles (row 2o+1) of the packed octet o's block v.
extern "C" int treespec_w4a8_amx() { return amx_permitted() ? 1 : 0; }

static void unpack_codes(const uint8_t* w, uint8_t* bt) {  // w: one group of a panel; bt: [4][16][64]
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int o = 0; o < 8; ++o)
    for (int v = 0; v < 4; ++v) {
      _mm_prefetch((const char*)(w + W_PREFETCH + (4 * o + v) * 64), _MM_HINT_T0);
      const __m512i b = _mm512_loadu_si512((const void*)(w + (4 * o + v) * 64));
      _mm512_store_si512((void*)(bt + (v * 16 + 2 * o) * 64), _mm512_and_si512(b, nib));
      _mm512_store_si512((void*)(bt + (v * 16 + 2 * o + 1) * 64), _mm512_and_si512(_mm512_srli_epi16(b, 4), nib));
    }
}

// out[i][0:64] += group g of rows [m0, m0 + rows) from the tile sums c [4][16][16] (add_group, as VNNI).
static void epilogue(const int32_t* c, const bf16* s, const float* xs, const float* xsum, int64_t groups,
                     int64_t g, int64_t m0, int64_t rows, float* out) {
  __m512 sc[4], lo[4];
  for (int v = 0; v < 4; ++v) group_scales(s, v, sc[v], lo[v]);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = m0 + i;
    const __m512 xsi = _mm512_set1_ps(xs[m * groups + g]), xsumi = _mm512_set1_ps(xsum[m * groups + g]);
    float* o = out + m * W_PANEL;
    for (int v = 0; v < 4; ++v) {
      add_group(o + v * 16, _mm512_loadu_si512((const void*)(c + (v * 16 + i) * 16)), sc[v], lo[v], xsi, xsumi);
    }
  }
}

// One group's int32 sums for 16 rows: c [4][16 rows][16 outputs] = a [16 rows][64] (int8, row stride K)
// times the group's four codes tiles bt [4][16][64] (tmm0: activations, tmm1-3: codes, tmm4-7: sums).
static void tile_sums(const int8_t* a, int64_t K, const uint8_t* bt, int32_t* c) {
  _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
  _tile_loadd(0, a, K);
  _tile_loadd(1, bt, 64); _tile_loadd(2, bt + 1024, 64); _tile_loadd(3, bt + 2048, 64);
  _tile_dpbsud(4, 0, 1); _tile_dpbsud(5, 0, 2); _tile_dpbsud(6, 0, 3);
  _tile_loadd(1, bt + 3072, 64); _tile_dpbsud(7, 0, 1);
  _tile_stored(4, c, 64); _tile_stored(5, c + 256, 64);
  _tile_stored(6, c + 512, 64); _tile_stored(7, c + 768, 64);
}

// Rows past the last whole tile, up to this many, run the VNNI micro kernel instead of a mostly empty
// 16-row tile: 17 rows (a 16-node tree) measured 61 ms that way vs 67 ms with two tiles per 1.5B pass,
// 16 rows 52 ms (2-core Intel Xeon host with AMX); at 3 tail rows the two ways cost the same.
static const int64_t W_AMX_TAIL = 2;

// Rows [0, tiled) of one panel by tiles, into out (the VNNI micro kernel takes the rows after them).
struct AmxPanel {
  alignas(64) uint8_t bt[4 * 16 * 64];
  alignas(64) int32_t c[4 * 16 * 16];
  TileScope tiles;
  explicit AmxPanel(bool use) : tiles(use) {}
  void run(const int8_t* p, const float* xs, const float* xsum, const uint8_t* panel, const bf16* s, int64_t M,
           int64_t K, int64_t tiled, float* out) {
    const int64_t groups = K / W_GROUP;
    for (int64_t g = 0; g < groups && tiled > 0; ++g) {
      unpack_codes(panel + g * W_GROUP / 2 * W_PANEL, bt);
      for (int64_t m0 = 0; m0 < tiled; m0 += 16) {
        tile_sums(p + m0 * K + g * W_GROUP, K, bt, c);
        epilogue(c, s + g * 2 * W_PANEL, xs, xsum, groups, g, m0, std::min<int64_t>(16, M - m0), out);
      }
    }
  }
};

// Rows the AMX path takes in a call of M rows from amx_rows (0: none): whole tiles, and a short tail
// as well once it is more than W_AMX_TAIL rows.
static int64_t amx_tiled_rows(int64_t M, int64_t amx_rows) {
  if (amx_rows <= 0 || M < amx_rows) return 0;
  const int64_t tail = M % 16;
  return tail <= W_AMX_TAIL ? M - tail : M;
}
