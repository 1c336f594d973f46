"""The process's CPU settings: numerics pinned to one code path on any x86-64 CPU, and OpenMP's wait.

torch, MKL and numpy pick their kernels per CPU when they load, so the same params could train different
weights on two machines (the same bytes on one machine, other bytes on the next). pgnn pins each library's
choice with the library's own documented switch, set in this process's environment by :func:`pin` when
``pgnn`` is imported (``pgnn/__init__.py``), before torch or numpy load: every driver (``dvc repro``'s stage
scripts, the Prefect flows and their worker processes, the ``pgnn`` commands, the tests) imports pgnn first,
and the processes it starts inherit the environment.

Each source, what differs between CPUs, and its pin (:data:`PINNED`):

- MKL, torch's BLAS: sgemm's kernels and blocking; MKL dispatches by vendor and ISA (an Intel AVX-512 machine
  and an AMD one ran other kernels for the same matmul). Pin: ``MKL_CBWR=COMPATIBLE``, MKL's conditional
  numerical reproducibility mode, and MKL on one thread per call (:func:`set_mkl_threads`): MKL's own split
  of a product over its threads depends on the CPU even in COMPATIBLE mode (2 threads trained other weights
  on an Intel Xeon and an AMD EPYC, 1 thread the same; benchmarks/README.md, "Threads that do not change a
  byte"), so :mod:`pgnn.nn.gemm` spreads the products over threads itself, in row blocks of one
  single-threaded call each.
- ATen's vector kernels: torch compiles its elementwise, reduction and scatter kernels three times (default,
  avx2, avx512) and picks one by the CPU; ``default`` rounds transcendental functions differently. Pin:
  ``ATEN_CPU_CAPABILITY=avx2``, one build of them on every CPU with AVX2 (``default`` is also much slower:
  benchmarks/README.md, "Pinned numerics").
- numpy's SIMD dispatch: numpy's float loops have x86-64-v3/v4 and AVX-512 variants (other rounding for some
  transcendental functions). Pin: ``NPY_DISABLE_CPU_FEATURES`` turns those groups off, so numpy runs its
  x86-64-v2 baseline loops on every CPU.
- Threads: a reduction split over N threads sums in another order. torch's own kernels in the training step
  gave the same bytes on 1, 2 and 3 threads; the products are split by :mod:`pgnn.nn.gemm` at row offsets
  that do not change a byte. So ``train.threads`` changes the time, not the weights.

Emulated other CPUs that change nothing under the pin (``tests/core/test_cpu.py``): MKL restricted to AVX2 or
SSE4.2 (``MKL_ENABLE_INSTRUCTIONS``), ATen asked for avx512 or default, numpy with only the x86-64-v2
baseline, glibc's libm without its FMA/AVX2 variants (``GLIBC_TUNABLES``), oneDNN held to SSE4.1
(``ONEDNN_MAX_CPU_ISA``; torch's fp32 training calls no oneDNN kernel), numba compiling for a generic CPU
(``NUMBA_CPU_NAME``). A CPU without AVX2 (or not x86-64) cannot run the pinned kernels: there :func:`pin`
leaves ATen's choice alone and :func:`pinned_state` says the results may differ from other machines'.

OpenMP: torch's libgomp spins ``GOMP_SPINCOUNT`` times before it sleeps; a shorter spin than libgomp's default
keeps 2 threads fast on an idle machine without spinning long on a loaded one (benchmarks/README.md,
"Intra-op threads"). It changes no number, so a value already set is kept.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

PINNED = {
    "MKL_CBWR": "COMPATIBLE",
    "ATEN_CPU_CAPABILITY": "avx2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
}
"""Set (replacing any value) before torch and numpy load: they change numbers."""

OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "100000"}
"""Set unless already set: they change only the time."""

MKL_CBWR_BRANCH = 1
MKL_CBWR_COMPATIBLE = 3
"""mkl_service.h: ``mkl_cbwr_get(MKL_CBWR_BRANCH)`` answers the code branch, 3 in the COMPATIBLE mode."""


def has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU runs ATen's avx2 kernels (AVX2 and FMA, as torch's own check asks)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return {"avx2", "fma"} <= flags
    return False


def pin(environ: MutableMapping[str, str] = os.environ, cpuinfo: Path = Path("/proc/cpuinfo")) -> None:
    """Pin the numerics (``PINNED``) and default OpenMP's wait (``OPENMP_DEFAULTS``) in ``environ``.

    Only where the pinned kernels run (x86-64 with AVX2): elsewhere the libraries keep their own choice.
    """
    for key, value in OPENMP_DEFAULTS.items():
        environ.setdefault(key, value)
    if has_avx2(cpuinfo):
        environ.update(PINNED)


def pinned_state() -> list[str]:
    """What in this process is not on the pinned path (empty: all is): one phrase per library.

    A library loaded before ``pgnn`` was imported read its environment before :func:`pin` set it.
    """
    if not has_avx2():
        return ["this CPU has no AVX2, so torch's kernels differ from the pinned ones"]
    problems = []
    torch = sys.modules.get("torch")  # only what has loaded is asked: this module imports neither library
    if torch is not None:
        capability = torch.backends.cpu.get_cpu_capability()
        if capability != "AVX2":
            problems.append(f"torch runs its {capability} kernels, not AVX2")
        branch = _mkl_branch(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")
        if branch not in (None, MKL_CBWR_COMPATIBLE):
            problems.append(f"MKL runs code branch {branch}, not COMPATIBLE ({MKL_CBWR_COMPATIBLE})")
    umath = sys.modules.get("numpy._core._multiarray_umath")
    if umath is not None:
        on = [name for name in PINNED["NPY_DISABLE_CPU_FEATURES"].split() if umath.__cpu_features__.get(name)]
        if on:
            problems.append(f"numpy dispatches {' '.join(on)}")
    return problems


def set_mkl_threads(threads: int) -> bool:
    """MKL's threads for products called from this thread (``mkl_set_num_threads_local``); False without MKL.

    torch's ``set_num_threads`` sets the same value for the calling thread, so call this after it.
    """
    library = _torch_mkl()
    if library is None:
        return False
    library.mkl_serv_set_num_threads_local(threads)
    return True


def _torch_mkl() -> ctypes.CDLL | None:
    """torch's library with MKL's service functions, None when torch has not loaded or exports no MKL."""
    torch = sys.modules.get("torch")
    return None if torch is None else _mkl_library(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")


@functools.cache
def _mkl_library(library: Path) -> ctypes.CDLL | None:
    try:
        handle = ctypes.CDLL(str(library))
        handle.mkl_serv_set_num_threads_local.argtypes = [ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return handle


def _mkl_branch(library: Path) -> int | None:
    """MKL's code branch (``mkl_cbwr_get``) in torch's library, None when it exports no MKL."""
    try:
        get = ctypes.CDLL(str(library)).mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype = ctypes.c_int
    get.argtypes = [ctypes.c_int]
    return int(get(MKL_CBWR_BRANCH))
