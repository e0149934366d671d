"""treespec's own CPU kernels (``csrc/packed_gemm.cpp``, ``csrc/w4a8_gemm.cpp``,
``csrc/decoder_ops.cpp``, ``csrc/exact_attention.cpp``): built for this host at first use, loaded with ctypes; the projection
kernels run on weights repacked once into 64-channel panels.

Weights: bf16, int8 with one scale per output channel (half the bytes per step), or int4
with a scale and low per group of 64 input channels (a quarter; the draft's default and
``main_quantization = int4``). int4 weights also run in the W4A8 kernel, which rounds the
activations to int8 and uses integer dot products (AVX512-VNNI, and AMX-INT8 tiles for passes of
many rows where the CPU has them; ``pack_w4a8``, ``amx.py``).

Why a kernel of our own: a decode step streams every weight once for 1 row (a plain step)
or 8-64 rows (a token tree), so it is memory-bandwidth bound; torch's bf16 kernels on CPUs
without AMX reach about half of the bandwidth at 1 row and cost 2x more at 16 rows.
The panel layout keeps one sequential stream per thread and, with AVX512-BF16, lets up to
3 rows share every weight load; where the CPU has AMX-BF16, calls of many rows (from the count
``amx.py`` measured) multiply 16-row tiles instead (see the C++ file for the algorithm).

Build: ``g++ -O3 -march=native -fopenmp -shared`` into ``<model cache>/native/`` (a temp
directory if that is not writable), keyed by the source, the compiler and the CPU flags,
written atomically (temp file + rename). The library's OpenMP symbols bind to the libgomp
torch has already loaded (same soname), so one thread pool serves both. No compiler, or a
failed build: :func:`library` returns None and the kernel is simply not a candidate
(``kernels.candidates``); the worker runs torch's kernels as before.

Panels are allocated in 2 MiB transparent huge pages where the kernel allows it
(``madvise``): streaming 3 GB of weights per step through 4 KiB pages costs TLB misses that
measured 25-45% of a 1-row step on this project's 2-core hosts.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import mmap
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog
import torch
import torch.nn.functional as F

CSRC = Path(__file__).with_name("csrc")
SOURCES = tuple(CSRC / f for f in ("packed_gemm.cpp", "w4a8_gemm.cpp", "decoder_ops.cpp", "exact_attention.cpp",
                                   "decoder_forward.cpp"))  # one library
HEADERS = tuple(CSRC / f for f in ("bf16.h", "int4_scales.h", "exp_fast.h", "amx.h", "w4a8_amx.h",
                                   "exact_attention_avx2.h"))
HUGE_PAGE = 2 << 20  # bytes
INT4_GROUP = 64  # input channels per int4 scale/low (quant.GROUP)
BUILD_TIMEOUT_S = 120
COMPILER = os.environ.get("CXX", "g++")


def _cpu_flags() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    return ""


def cpu_has(flag: str) -> bool:
    """Whether this host's CPU lists ``flag`` (e.g. ``avx512_vnni``) in /proc/cpuinfo."""
    return flag in _cpu_flags().split()


def _compiler_version() -> str | None:
    try:
        out = subprocess.run([COMPILER, "--version"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines()[0] if out.stdout else ""


def _writable_dir(preferred: Path | None) -> Path:
    for d in ([preferred] if preferred else []) + [Path(tempfile.gettempdir()) / f"treespec-native-{os.getuid()}"]:
        with contextlib.suppress(OSError):
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
    raise OSError("no writable directory for the native kernel")


def build(out_dir: Path | None, march: str = "native") -> Path | None:
    """Compile ``SOURCES`` (packed_gemm, w4a8_gemm, decoder_ops, exact_attention, decoder_forward) for ``-march=march`` into
    ``out_dir`` (kept across starts: the file name hashes sources, compiler, flags and CPU) and
    return the ``.so`` path; None when no compiler is found or the build fails (logged, never raised)."""
    log = structlog.get_logger("kernels")
    version = _compiler_version()
    if version is None:
        log.warning("native kernel unavailable", reason=f"no C++ compiler ({COMPILER})")
        return None
    # no -ffast-math: results must not depend on the compiler's reassociation; these two flags only
    # drop errno and FP-exception semantics, so that decoder_ops' exp and clamps vectorize
    flags = ["-O3", f"-march={march}", "-fno-trapping-math", "-fno-math-errno", "-fopenmp", "-shared", "-fPIC",
             "-std=c++17"]
    text = [p.read_text() for p in SOURCES + HEADERS]
    key = hashlib.sha256("\n".join([*text, version, " ".join(flags), _cpu_flags()]).encode())
    try:
        directory = _writable_dir(out_dir)
    except OSError as exc:
        log.warning("native kernel unavailable", reason=str(exc))
        return None
    path = directory / f"packed_gemm-{march}-{key.hexdigest()[:16]}.so"
    if path.is_file():
        return path
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        subprocess.run([COMPILER, *flags, *map(str, SOURCES), "-o", str(tmp)], capture_output=True, text=True,
                       timeout=BUILD_TIMEOUT_S, check=True)
        os.replace(tmp, path)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        log.warning("native kernel build failed", compiler=COMPILER, error=detail[-2000:])
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return None
    return path


class PackedGemmLibrary:
    """The loaded kernel library: ``variant`` (``avx512bf16`` | ``avx2`` | ``portable``)
    and typed ctypes entry points. Load with :func:`library` (or :func:`load` a path)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lib = ctypes.CDLL(str(path))
        self._lib.treespec_variant.restype = ctypes.c_char_p
        self._lib.treespec_packed_elems.restype = ctypes.c_int64
        self._lib.treespec_packed_elems.argtypes = [ctypes.c_int64] * 2
        self._lib.treespec_pack.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_int]
        self._lib.treespec_gemm.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 3 + [ctypes.c_int, ctypes.c_int64]
        self._lib.treespec_pack_int8.argtypes = self._lib.treespec_pack.argtypes
        self._lib.treespec_gemm_int8.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int]
        self._lib.treespec_pack_int4.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 2 + [ctypes.c_int]
        self._lib.treespec_gemm_int4.argtypes = self._lib.treespec_gemm_int8.argtypes
        self._lib.treespec_w4a8_variant.restype = ctypes.c_char_p
        self._lib.treespec_pack_w4a8.argtypes = self._lib.treespec_pack_int4.argtypes
        self._lib.treespec_gemm_w4a8.argtypes = self._lib.treespec_gemm_int8.argtypes + [ctypes.c_int64]
        self._lib.treespec_rms_norm.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 2 + [ctypes.c_float,
                                                                                             ctypes.c_int]
        self._lib.treespec_rope.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 4 + [ctypes.c_int]
        self._lib.treespec_silu_mul.argtypes = [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 + [ctypes.c_int]
        attn = [ctypes.c_void_p] * 7 + [ctypes.c_int64] * 5 + [ctypes.c_float, ctypes.c_int]
        self._lib.treespec_exact_attention_bf16.argtypes = attn
        self._lib.treespec_exact_attention_f32.argtypes = attn
        self.exact_attention_bf16 = self._lib.treespec_exact_attention_bf16  # attention.ExactAttention
        self.exact_attention_f32 = self._lib.treespec_exact_attention_f32
        self.rms_norm = self._lib.treespec_rms_norm  # decoder_ops.cpp; called by fused_ops.NativeOps
        self.rope = self._lib.treespec_rope
        self.silu_mul = self._lib.treespec_silu_mul
        self.variant = self._lib.treespec_variant().decode()
        self.w4a8_variant = self._lib.treespec_w4a8_variant().decode()  # avx512vnni | avx2 | portable
        self.w4a8_vnni = self.w4a8_variant == "avx512vnni"  # the variant the AMX-INT8 path extends
        self.w4a8_fast = self.w4a8_variant != "portable"  # a W4A8 kernel to serve (portable: a reference)
        self.w4a8_amx = bool(self._lib.treespec_w4a8_amx())  # AMX-INT8 built and granted by the OS
        self.w4a8_amx_rows = 0  # W4A8 calls with at least this many rows take the AMX path (0: never)
        self.bf16_amx = bool(self._lib.treespec_bf16_amx())  # AMX-BF16 built and granted by the OS
        self.bf16_amx_rows = 0  # bf16 calls with at least this many rows take the AMX path (0: never)
        self._gemm = {"bf16": self._lib.treespec_gemm, "int8": self._lib.treespec_gemm_int8,
                      "int4": self._lib.treespec_gemm_int4, "w4a8": self._lib.treespec_gemm_w4a8}

    def pack(self, weight: torch.Tensor) -> PackedWeight:
        """Repack a dense ``[N, K]`` bf16 CPU weight into panels (a new tensor in huge pages;
        ``weight`` is not kept). Raises ValueError for another dtype, device or rank."""
        _check(weight, torch.bfloat16)
        n, k = weight.shape
        data = huge_empty(self._lib.treespec_packed_elems(n, k), torch.bfloat16)
        self._lib.treespec_pack(weight.contiguous().data_ptr(), data.data_ptr(), n, k, torch.get_num_threads())
        return PackedWeight(self, data, None, n, k, "bf16")

    def pack_int8(self, q: torch.Tensor, scales: torch.Tensor) -> PackedWeight:
        """Repack an int8 ``[N, K]`` matrix ``q`` with per-row ``scales`` ``[N]`` (the weight is
        ``q * scales[:, None]``, :class:`~common.modeling.quant.Int8Weight`'s scheme).
        Raises ValueError for another dtype, device or shape."""
        _check(q, torch.int8)
        n, k = q.shape
        if scales.shape != (n,):
            raise ValueError(f"int8 weight needs {n} scales, got shape {tuple(scales.shape)}")
        data = huge_empty(self._lib.treespec_packed_elems(n, k), torch.int8)
        self._lib.treespec_pack_int8(q.contiguous().data_ptr(), data.data_ptr(), n, k, torch.get_num_threads())
        return PackedWeight(self, data, scales.float().contiguous(), n, k, "int8")

    def pack_int4(self, codes: torch.Tensor, scales_zeros: torch.Tensor) -> PackedWeight:
        """Repack int4 ``codes`` ``[N, K]`` (uint8, 0..15) with ``scales_zeros`` ``[K/64, N, 2]``
        (:func:`~common.modeling.quant.int4_codes`: ``w = (q - 8) * scale + zero`` per group of
        64 input channels). Raises ValueError for other dtypes/shapes or K not a multiple of 64."""
        return self._pack_int4_codes(codes, scales_zeros, "int4")

    def pack_w4a8(self, codes: torch.Tensor, scales_zeros: torch.Tensor) -> PackedWeight:
        """The same int4 weights as :meth:`pack_int4`, for the W4A8 kernel (``csrc/w4a8_gemm.cpp``):
        each call rounds its activations to int8 per row and group of 64 channels (integer dot
        products), so its results differ from the bf16-activation kernels by that rounding. A draft
        model's candidate kernel; a main model's only as ``main_quantization = w4a8``, which runs it
        for every pass. Raises ValueError like :meth:`pack_int4`."""
        return self._pack_int4_codes(codes, scales_zeros, "w4a8")

    def _pack_int4_codes(self, codes: torch.Tensor, scales_zeros: torch.Tensor, kind: str) -> PackedWeight:
        """Both int4 layouts: ``ceil(N/64)*64 * K/2`` code bytes and per panel ``[K/64][2][64]`` scale
        pairs (int4: fp32 scales and lows; w4a8: bf16 scales and zeros, rounded to bf16 if given wider)."""
        _check(codes, torch.uint8)
        n, k = codes.shape
        if k % INT4_GROUP or scales_zeros.shape != (k // INT4_GROUP, n, 2):
            raise ValueError(f"int4 weight [{n}, {k}] needs K % {INT4_GROUP} == 0 and scales_zeros "
                             f"[{k // INT4_GROUP}, {n}, 2], got {tuple(scales_zeros.shape)}")
        data = huge_empty(self._lib.treespec_packed_elems(n, k) // 2, torch.uint8)
        count = self._lib.treespec_packed_elems(n, k) // k * (k // INT4_GROUP) * 2
        if kind == "int4":  # fp32 scales and lows, w = q * scale + lo
            first = scales_zeros[..., 0].float().contiguous()  # [K/64, N]
            second = (scales_zeros[..., 1].float() - 8 * first).contiguous()
            sl, pack = torch.empty(count, dtype=torch.float32), self._lib.treespec_pack_int4
        else:  # W4A8: bf16 scales and zeros (the kernel forms lo = zero - 8 * scale in fp32)
            first = scales_zeros[..., 0].to(torch.bfloat16).contiguous()
            second = scales_zeros[..., 1].to(torch.bfloat16).contiguous()
            sl, pack = torch.empty(count, dtype=torch.bfloat16), self._lib.treespec_pack_w4a8
        pack(codes.contiguous().data_ptr(), first.data_ptr(), second.data_ptr(), data.data_ptr(), sl.data_ptr(), n, k,
             torch.get_num_threads())
        return PackedWeight(self, data, sl, n, k, kind)

    def gemm(self, x: torch.Tensor, packed: PackedWeight, bias: torch.Tensor | None, out: torch.Tensor) -> None:
        """``out[M, N] = (x[M, Kp] @ W.T) * scales + bias``; all contiguous CPU tensors, x,
        bias and out bf16 (unchecked: :meth:`PackedWeight.linear` prepares them)."""
        common = (0 if bias is None else bias.data_ptr(), out.data_ptr(), x.shape[0], packed.n, x.shape[1],
                  torch.get_num_threads())
        scales = () if packed.scales is None else (packed.scales.data_ptr(),)
        amx_rows = {"w4a8": self.w4a8_amx_rows if self.w4a8_amx else 0, "bf16": self.bf16_amx_rows if self.bf16_amx else 0}
        amx = (amx_rows[packed.kind],) if packed.kind in amx_rows else ()  # the kernels with an AMX path
        self._gemm[packed.kind](x.data_ptr(), packed.data.data_ptr(), *scales, *common, *amx)


def _check(weight: torch.Tensor, dtype: torch.dtype) -> None:
    if weight.dtype != dtype or weight.device.type != "cpu" or weight.dim() != 2:
        raise ValueError(f"packed kernel needs a 2-D {dtype} CPU weight, got {weight.dtype} "
                         f"{tuple(weight.shape)} on {weight.device}")


@dataclass(frozen=True)
class PackedWeight:
    """A ``[N, K]`` weight in the kernel's panel layout, by ``kind``: ``bf16`` (``data`` flat
    bf16, ``ceil(N/64)*64 * K_even`` elements), ``int8`` (int8 ``data``, ``scales`` fp32
    ``[N]``), ``int4`` or ``w4a8`` (``data`` two codes per byte in that kernel's layout,
    ``scales`` the per-panel group scales and lows, fp32, or for w4a8 scales and zeros, bf16)."""

    lib: PackedGemmLibrary
    data: torch.Tensor
    scales: torch.Tensor | None
    n: int
    k: int
    kind: str

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.k

    def to(self, device) -> "PackedWeight":
        """This weight (CPU only: the kernel runs on the CPU); ValueError for another device."""
        if torch.device(device).type != "cpu":
            raise ValueError(f"a packed {self.kind} weight runs on the CPU only, not {device}")
        return self

    @property
    def nbytes(self) -> int:
        """Bytes held (panels plus scales)."""
        return self.data.nbytes + (0 if self.scales is None else self.scales.nbytes)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + bias``: ``x`` ``[..., K]`` (any float dtype; computed in bf16 with fp32
        accumulation) -> ``[..., N]`` in x's dtype. Raises ValueError if x's last dim is not K."""
        if x.shape[-1] != self.k:
            raise ValueError(f"input has {x.shape[-1]} features, weight expects {self.k}")
        rows = x.reshape(-1, self.k).to(torch.bfloat16)
        if self.k % 2:
            rows = F.pad(rows, (0, 1))  # the kernel reads k-pairs; the panel's pad column is zero
        rows = rows.contiguous()
        out = torch.empty(rows.shape[0], self.n, dtype=torch.bfloat16)
        if rows.shape[0]:
            b = None if bias is None else bias.to(torch.bfloat16).contiguous()
            self.lib.gemm(rows, self, b, out)
        return out.reshape(*x.shape[:-1], self.n).to(x.dtype)


def huge_empty(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised 1-D CPU tensor whose memory is advised into transparent huge pages
    (2 MiB aligned, private anonymous mmap; freed with the tensor). Falls back to
    ``torch.empty`` where ``madvise(MADV_HUGEPAGE)`` does not exist, for tensors under 2 MiB,
    and with ``TREESPEC_HUGE_PAGES=0``."""
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    off = os.environ.get("TREESPEC_HUGE_PAGES", "1") == "0"  # A/B switch for measurements
    if off or not hasattr(mmap, "MADV_HUGEPAGE") or nbytes < HUGE_PAGE:
        return torch.empty(numel, dtype=dtype)
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # shared: no THP
    with contextlib.suppress(OSError):
        region.madvise(mmap.MADV_HUGEPAGE)
    raw = torch.frombuffer(region, dtype=torch.uint8)  # holds a reference to the mapping
    start = (-raw.data_ptr()) % HUGE_PAGE
    return raw[start:start + nbytes].view(dtype)


def load(path: Path) -> PackedGemmLibrary | None:
    """Load a built library; None (logged) if the loader refuses it."""
    try:
        return PackedGemmLibrary(path)
    except (OSError, AttributeError) as exc:
        structlog.get_logger("kernels").warning("native kernel not loadable", path=str(path), error=str(exc))
        return None


@functools.cache
def library(out_dir: Path | None = None) -> PackedGemmLibrary | None:
    """This process's kernel library for the host CPU (built once per host and source, then
    read from ``out_dir``; default ``<model cache>/native``), or None when it cannot be
    built (no compiler) or ``TREESPEC_NATIVE_KERNEL=0``. Memoised per process."""
    if os.environ.get("TREESPEC_NATIVE_KERNEL", "1") == "0":
        return None
    from common.models import cache_dir  # torch-free module; imported here to keep import order simple

    path = build(out_dir or cache_dir() / "native")
    lib = None if path is None else load(path)
    if lib is not None and (lib.w4a8_amx or lib.bf16_amx):
        from common.modeling.amx import KINDS, choose_amx_rows, probe_amx_times
        for kind in KINDS:
            times = probe_amx_times(lib, kind)  # rows -> (AVX-512 ms, AMX ms)
            setattr(lib, f"{kind}_amx_rows", choose_amx_rows(times))
            structlog.get_logger("kernels").info(f"{kind} AMX path", from_rows=getattr(lib, f"{kind}_amx_rows") or None,
                                                 timings_ms={r: [round(t, 2) for t in ts] for r, ts in times.items()})
    return lib
