"""tg-llvm: the LLVM device for tg (LLVM IR compiled in-process by llvmlite, run from memory through cffi)."""
__version__ = "0.1.0"
