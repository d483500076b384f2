"""The llama.cpp builds set-up tries, in order, and the flags that make each.

Standard library only: ``installers/setup.py`` loads this file by path before
any dependency is installed, and ``app.backends.build_check`` quotes it in the
rebuild command it gives a user whose build dies.

Why more than one: a native build (``-march=native``) can compile and still die.
On Xeons with AMX, llama.cpp's AMX matrix kernels run a tile instruction before a
tile configuration is loaded, and the first quantised matrix product is a SIGILL
(upstream llama.cpp PR #26954). Native without AMX keeps every other feature of
the CPU (AVX-512, VNNI, BF16); the portable build needs only AVX2, FMA and F16C,
which is what a bundle that cannot know its user's CPU must assume.
"""

from __future__ import annotations

import platform
import shlex
from dataclasses import dataclass

# GCC and Clang let an explicit -mno-X win over -march=native whatever the order.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
PORTABLE_AVX2 = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                 "-DGGML_F16C=ON", "-DGGML_BMI2=ON")
GPU_FLAGS = {"cuda": ("-DGGML_CUDA=on",), "metal": ("-DGGML_METAL=on",), "cpu": ()}
# Every build carries llama.cpp's RPC backend (libggml-rpc): ``tandem worker`` serves this
# machine's device from it, and ``--rpc`` spreads a target's layers over other machines'.
RPC = "-DGGML_RPC=ON"


@dataclass(frozen=True)
class Variant:
    name: str             # "native", "native-no-amx", "portable", "baseline", "custom"
    cmake_args: tuple[str, ...]
    description: str

    @property
    def cmake_args_env(self) -> str:
        """The value of CMAKE_ARGS (scikit-build-core splits it with shlex)."""
        return shlex.join(self.cmake_args)


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def variants(backend: str = "cpu") -> list[Variant]:
    """What set-up tries, best first; each later one is safer on more CPUs."""
    gpu = (*GPU_FLAGS[backend], RPC)
    out = [Variant("native", (*gpu, "-DGGML_NATIVE=ON"), "native (every feature of this CPU)")]
    if is_x86():
        out += [
            Variant("native-no-amx", (*gpu, "-DGGML_NATIVE=ON", f"-DCMAKE_C_FLAGS={NO_AMX}",
                                      f"-DCMAKE_CXX_FLAGS={NO_AMX}"),
                    "native without AMX (AVX-512 and the rest kept)"),
            portable(backend),
        ]
    out.append(Variant("baseline", (*gpu, "-DGGML_NATIVE=OFF"), "baseline (no vector extensions assumed)"))
    return out


def portable(backend: str = "cpu") -> Variant:
    """Runs on any x86-64 CPU with AVX2: what a bundle carries."""
    return Variant("portable", (*GPU_FLAGS[backend], RPC, *PORTABLE_AVX2), "portable (AVX2, FMA, F16C)")


def custom(cmake_args: str) -> Variant:
    """The user's CMAKE_ARGS, with RPC added unless they say GGML_RPC themselves."""
    args = tuple(shlex.split(cmake_args))
    if not any(a.startswith("-DGGML_RPC") for a in args):
        args += (RPC,)
    return Variant("custom", args, "your CMAKE_ARGS")


def pip_rebuild_command(variant: Variant, requirement: str = "llama-cpp-python") -> str:
    """The one command that rebuilds llama-cpp-python as ``variant``, past pip's wheel cache."""
    return (f"CMAKE_ARGS={shlex.quote(variant.cmake_args_env)} python -m pip install "
            f"--force-reinstall --no-cache-dir --no-deps {shlex.quote(requirement)}")
