"""CUDA_MOCK=1: CUDA kernels built for and run on the CPU (tg_cuda_mock.h, build.py, driver.py)."""
