// tg_cuda_mock.h: enough of CUDA's device side to build a tg kernel's CUDA C++ for the CPU (CUDA_MOCK=1).
//
// Force-included (g++ -include) before the kernel's source, unchanged; mock/build.py appends
// TG_MOCK_KERNEL(name, max_threads), which exports the launcher the mock driver calls:
//   int tg_mock_launch(void** params, const unsigned int dims[6], char* err, unsigned long errlen)
// with params laid out as cuLaunchKernel's kernelParams (one pointer to each argument's value) and dims the grid
// and block sizes (x, y, z). It returns a CUresult (0, or the error the driver would give) like cuLaunchKernel.
//
// Blocks run one after another. Within a block, a kernel without __syncthreads runs its threads one after
// another too; with __syncthreads (TG_MOCK_BARRIERS), every thread is a fiber (own stack) that runs until its
// next barrier, and no fiber passes a barrier before all live threads of the block have reached it. __shared__
// variables are function statics: one copy, seen by every thread of the block being run.
// No system header is included unless barriers are used: these builds run once per kernel and must be quick.
#pragma once

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
static uint3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

// CUDA's built-in vector types tg's kernels load and store, with CUDA's alignment: a misaligned access faults here
// too (the compiler may use aligned moves), as it would on a GPU
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// the intrinsics tg's kernels and headers use
static inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
static inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
static inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
static inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
static inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
static inline long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
extern "C" {
float exp2f(float); float log2f(float); float sinf(float); float sqrtf(float); float fmaf(float, float, float);
double exp2(double); double log2(double); double sin(double); double sqrt(double); double fma(double, double, double);
}
void __syncthreads();

namespace tg_mock {
typedef void (*thread_fn)(void** params);
enum { SUCCESS = 0, ERROR_INVALID_VALUE = 1, ERROR_LAUNCH_OUT_OF_RESOURCES = 701 };

// calling f(A...) with params[i] pointing at argument i, as the driver does
template <unsigned... I> struct seq {};
template <unsigned N, unsigned... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct make_seq<0, I...> { typedef seq<I...> type; };
template <typename... A, unsigned... I> inline void call_with(void (*f)(A...), void** p, seq<I...>) { f(*static_cast<A*>(p[I])...); }
template <typename... A> inline void call(void (*f)(A...), void** p) { call_with(f, p, typename make_seq<sizeof...(A)>::type()); }
// the byte size of each parameter: what the driver reads from a cubin, for copying the values into a graph node
template <typename... A> inline int param_sizes(void (*)(A...), unsigned int* out, int n) {
  const unsigned int sizes[] = {(unsigned int)sizeof(A)..., 0u};
  for (int i = 0; i < (int)sizeof...(A) && i < n; i++) out[i] = sizes[i];
  return (int)sizeof...(A);
}

static int fail(int code, char* err, unsigned long n, const char* msg) {
  unsigned long i = 0;
  for (; n && i < n - 1 && msg[i]; i++) err[i] = msg[i];
  if (n) err[i] = 0;
  return code;
}

#ifdef TG_MOCK_BARRIERS
}  // namespace tg_mock
#include <setjmp.h>
#include <stdlib.h>
#include <ucontext.h>
namespace tg_mock {
// Fibers start on their own stack through makecontext/swapcontext, and from then on switch with _setjmp/_longjmp,
// which, unlike swapcontext, don't save and restore the signal mask: no system call per switch (~20x faster).
// (Jumping between stacks this way is the classic user-level threads trick; it would need rethinking only in a
// process with x86 CET shadow stacks enabled, which glibc leaves off by default.)
static const unsigned long STACK_BYTES = 128 * 1024;
struct Fiber { ucontext_t start; jmp_buf at; uint3 idx; bool started, done; };
static ucontext_t scheduler_start;
static jmp_buf scheduler;
static Fiber* fibers;
static char* stacks;
static unsigned int capacity;
static Fiber* current;
static thread_fn fiber_run;
static void** fiber_params;

static void yield_to_scheduler() {
  if (!_setjmp(current->at)) _longjmp(scheduler, 1);
}

// a fiber runs its thread of one block, then parks until the scheduler resumes it for the next block: fibers
// are made once per launch, not per block
static void fiber_main() {
  for (;;) {
    fiber_run(fiber_params);
    current->done = true;
    yield_to_scheduler();
  }
}

static bool make_fibers(thread_fn run, void** params, unsigned int bx, unsigned int by, unsigned int n) {
  if (n > capacity) {
    free(fibers); free(stacks);
    fibers = (Fiber*)malloc(n * sizeof(Fiber));
    stacks = (char*)malloc(n * STACK_BYTES);  // untouched stack pages are never committed
    capacity = (fibers && stacks) ? n : 0;
    if (!capacity) return false;
  }
  fiber_run = run, fiber_params = params;
  for (unsigned int i = 0; i < n; i++) {
    Fiber& f = fibers[i];
    f.idx = {i % bx, (i / bx) % by, i / (bx * by)};
    f.started = false;
    getcontext(&f.start);
    f.start.uc_stack.ss_sp = stacks + (unsigned long)i * STACK_BYTES;
    f.start.uc_stack.ss_size = STACK_BYTES;
    f.start.uc_link = &scheduler_start;  // never used: fiber_main doesn't return
    makecontext(&f.start, fiber_main, 0);
  }
  return true;
}

static void run_block_fibers(unsigned int n) {
  for (unsigned int i = 0; i < n; i++) fibers[i].done = false;
  // one round = every live thread runs up to its next barrier (or its end)
  for (bool live = true; live;) {
    live = false;
    for (unsigned int i = 0; i < n; i++) {
      if (fibers[i].done) continue;
      live = true;
      current = &fibers[i];
      threadIdx = fibers[i].idx;
      if (_setjmp(scheduler)) continue;  // the fiber yielded back
      if (!fibers[i].started) {
        fibers[i].started = true;
        swapcontext(&scheduler_start, &fibers[i].start);
      } else {
        _longjmp(fibers[i].at, 1);
      }
    }
  }
}
}  // namespace tg_mock
void __syncthreads() { tg_mock::yield_to_scheduler(); }
namespace tg_mock {
#endif

static int lock;  // launches from several host threads take turns: the index variables above are shared

static int launch(thread_fn run, void** params, const unsigned int* d, unsigned int max_threads, char* err, unsigned long errlen) {
  const unsigned int gx = d[0], gy = d[1], gz = d[2], bx = d[3], by = d[4], bz = d[5];
  if (!gx || !gy || !gz || !bx || !by || !bz) return fail(ERROR_INVALID_VALUE, err, errlen, "a grid or block dim is 0");
  if (gx > 2147483647u || gy > 65535u || gz > 65535u) return fail(ERROR_INVALID_VALUE, err, errlen, "grid is more than (2**31-1, 65535, 65535)");
  if (bx > 1024u || by > 1024u || bz > 64u) return fail(ERROR_INVALID_VALUE, err, errlen, "block is more than (1024, 1024, 64)");
  const unsigned long threads = (unsigned long)bx * by * bz;
  if (threads > 1024u) return fail(ERROR_INVALID_VALUE, err, errlen, "block has more than 1024 threads");
  if (threads > max_threads) return fail(ERROR_LAUNCH_OUT_OF_RESOURCES, err, errlen, "block has more threads than the kernel's __launch_bounds__");
  while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE)) {}
  gridDim = {gx, gy, gz};
  blockDim = {bx, by, bz};
  int status = SUCCESS;
#ifdef TG_MOCK_BARRIERS
  const bool use_fibers = threads > 1;
  if (use_fibers && !make_fibers(run, params, bx, by, (unsigned int)threads))
    status = fail(ERROR_LAUNCH_OUT_OF_RESOURCES, err, errlen, "no memory for the block's fiber stacks");
#endif
  for (unsigned int z = 0; z < gz && status == SUCCESS; z++)
    for (unsigned int y = 0; y < gy && status == SUCCESS; y++)
      for (unsigned int x = 0; x < gx && status == SUCCESS; x++) {
        blockIdx = {x, y, z};
#ifdef TG_MOCK_BARRIERS
        if (use_fibers) {
          run_block_fibers((unsigned int)threads);
          continue;
        }
#endif
        for (unsigned int tz = 0; tz < bz; tz++)
          for (unsigned int ty = 0; ty < by; ty++)
            for (unsigned int tx = 0; tx < bx; tx++) {
              threadIdx = {tx, ty, tz};
              run(params);
            }
      }
  __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
  return status;
}
}  // namespace tg_mock

// built with -fvisibility=hidden: only these two are exported, so equally named kernels of two loaded builds can't
// bind to each other
#define TG_MOCK_EXPORT __attribute__((visibility("default")))
#define TG_MOCK_KERNEL(name, max_threads)                                                                    \
  static void tg_mock_thread(void** params) { tg_mock::call(name, params); }                                \
  extern "C" TG_MOCK_EXPORT int tg_mock_launch(void** params, const unsigned int* dims, char* err, unsigned long errlen) {  \
    return tg_mock::launch(tg_mock_thread, params, dims, max_threads, err, errlen);                          \
  }                                                                                                          \
  extern "C" TG_MOCK_EXPORT int tg_mock_param_sizes(unsigned int* out, int n) { return tg_mock::param_sizes(name, out, n); }
