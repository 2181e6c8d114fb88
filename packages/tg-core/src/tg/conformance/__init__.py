"""tg's device conformance kit: the device-level tests a device package must pass, shipped in tg-core's wheel.

Run it on any installed device (pytest comes with `pip install tg-core[conformance]`):

    pytest -p tg.testing --pyargs tg.conformance --tg-device NAME

It checks, against numpy, what a device does (memory, every dtype it holds, ALU semantics, casts, reductions,
movement ops feeding kernels, matmul and convolution, symbolic sizes, TinyJit and graphs, seeded random numbers,
two instances of the device, errors as Python exceptions) and nothing of tg's device-independent machinery. Tests
are marked by the capability they need (`@pytest.mark.dtype(...)`, `@pytest.mark.needs(...)`, see conftest.py)
and skip, naming it, what the device declares it lacks. docs/conformance.md is the guide.
"""
