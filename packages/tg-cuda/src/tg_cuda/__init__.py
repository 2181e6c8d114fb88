"""tg-cuda: the CUDA device for tg (CUDA C compiled by NVRTC, run through the CUDA driver API; CUDA_MOCK=1 runs it on the CPU)."""
__version__ = "0.1.0"
