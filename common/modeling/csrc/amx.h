// What every AMX path of treespec's kernels shares: the Linux permission request and the tile
// configuration (Intel SDM vol. 2, LDTILECFG; Intel Optimization Reference Manual, "Intel AMX").
// Included where __AMX_TILE__ and __linux__ are defined.
#pragma once
#include <cstdint>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

// Linux gates AMX state per process: ask once (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA); true if granted.
static inline bool amx_permitted() {
  const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows x 64 bytes; loaded per thread (tile state is a thread's register state),
// released at scope end.
struct TileScope {
  bool on;
  explicit TileScope(bool use) : on(use) {
    if (!on) return;
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
  }
  ~TileScope() { if (on) _tile_release(); }
};
