"""tg-amd: the AMD device for tg (HIP C++ compiled by LLVM's clang and lld for a gfx target, run through the HIP
runtime; AMD_MOCK=1 runs it on the CPU)."""
__version__ = "0.1.0"
