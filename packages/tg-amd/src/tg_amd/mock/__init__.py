"""AMD_MOCK=1: AMD kernels built for and run on the CPU (tg_amd_mock.h, build.py, driver.py)."""
