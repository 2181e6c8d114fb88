"""METAL_MOCK=1: Metal without a Mac. Every kernel's MSL is checked by clang++ (check.py) and built for the CPU (build.py),
and MockDriver (driver.py) runs it there."""
