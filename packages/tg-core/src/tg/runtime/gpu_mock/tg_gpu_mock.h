// tg_gpu_mock.h: running one GPU kernel's threads on the CPU, for the mock modes of GPU devices (CUDA_MOCK=1,
// AMD_MOCK=1, METAL_MOCK=1). A device's own mock header includes this one, maps its language's names (threadIdx,
// __syncthreads, threadgroup_barrier, ...) onto what is here, and ends the kernel's source with
//   TG_MOCK_EXPORT_LAUNCHER(kernel, max_threads, limits, caller)
// which exports the two functions tg.runtime.gpu_mock.MockKernel calls:
//   int tg_mock_launch(void** params, const unsigned int dims[6], char* err, unsigned long errlen)
//   int tg_mock_param_sizes(unsigned int* out, int n)
// `params` holds one pointer to each argument's value (cuLaunchKernel's kernelParams layout), `dims` the grid and
// workgroup sizes (x, y, z). `caller(kernel, params)` runs one thread: tg_mock::call passes params[i] as argument i
// (CUDA, HIP); tg_mock::call_indexed passes the kernel's last two parameters from tg_mock::block_idx and thread_idx
// instead (Metal, whose indices are kernel parameters). tg_mock_param_sizes counts every parameter. tg_mock_launch returns 0, TG_MOCK_INVALID_VALUE or TG_MOCK_OUT_OF_RESOURCES with
// the reason in `err`, and checks the dims against `limits` (the hardware's) as the real launch would.
//
// Workgroups run one after another. Within one, a kernel without barriers runs its threads one after another too;
// with TG_MOCK_BARRIERS defined, every thread is a fiber (own stack) that runs until its next tg_mock::barrier(),
// and no fiber passes a barrier before all live threads of the workgroup have reached it. Workgroup ("shared",
// "threadgroup") variables are function statics: one copy, seen by every thread of the workgroup being run.
// No system header is included unless barriers are used: these builds run once per kernel and must be quick.
#pragma once

namespace tg_mock {
struct idx3 { unsigned int x, y, z; };
static idx3 thread_idx, block_idx, block_dim, grid_dim;  // of the thread running now (one translation unit per kernel)
struct Limits { unsigned int grid[3], block[3], block_threads; };
typedef void (*thread_fn)(void** params);
enum { SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_RESOURCES = 2 };
// every thread of the workgroup waits here for the others. Defined only with TG_MOCK_BARRIERS: a build without it
// that reaches a barrier fails to load (undefined symbol), never runs wrongly
void barrier();

// calling f(A...) with params[i] pointing at argument i, as a GPU driver does
template <unsigned... I> struct seq {};
template <unsigned N, unsigned... I> struct make_seq : make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct make_seq<0, I...> { typedef seq<I...> type; };
template <typename... A, unsigned... I> inline void call_with(void (*f)(A...), void** p, seq<I...>) { f(*static_cast<A*>(p[I])...); }
template <typename... A> inline void call(void (*f)(A...), void** p) { call_with(f, p, typename make_seq<sizeof...(A)>::type()); }
// calling a kernel whose last two parameters are its workgroup's and its thread's index (Metal's
// [[threadgroup_position_in_grid]] and [[thread_position_in_threadgroup]]), of a type made from {x, y, z}: params
// holds the others (a reference parameter, Metal's `constant int& n`, binds to the value params points at)
template <typename T> struct no_ref { typedef T type; };
template <typename T> struct no_ref<T&> { typedef T type; };
template <unsigned I, unsigned N, typename T> inline T arg_or_index(void** p) {
  if constexpr (I + 2 == N) return T{block_idx.x, block_idx.y, block_idx.z};
  else if constexpr (I + 1 == N) return T{thread_idx.x, thread_idx.y, thread_idx.z};
  else return *static_cast<typename no_ref<T>::type*>(p[I]);
}
template <typename... A, unsigned... I> inline void call_indexed_with(void (*f)(A...), void** p, seq<I...>) {
  f(arg_or_index<I, sizeof...(A), A>(p)...);
}
template <typename... A> inline void call_indexed(void (*f)(A...), void** p) {
  call_indexed_with(f, p, typename make_seq<sizeof...(A)>::type());
}
// the byte size of each parameter: what a driver reads from the binary, for copying the values into a graph node
template <typename... A> inline int param_sizes(void (*)(A...), unsigned int* out, int n) {
  const unsigned int sizes[] = {(unsigned int)sizeof(A)..., 0u};
  for (int i = 0; i < (int)sizeof...(A) && i < n; i++) out[i] = sizes[i];
  return (int)sizeof...(A);
}

extern "C" int snprintf(char* s, unsigned long n, const char* format, ...);  // libc's, without its header
static int fail(int code, char* err, unsigned long n, const char* msg) {
  unsigned long i = 0;
  for (; n && i < n - 1 && msg[i]; i++) err[i] = msg[i];
  if (n) err[i] = 0;
  return code;
}
}  // namespace tg_mock

#ifdef TG_MOCK_BARRIERS
#include <setjmp.h>
#include <stdlib.h>
#include <ucontext.h>
namespace tg_mock {
// Fibers start on their own stack through makecontext/swapcontext, and from then on switch with _setjmp/_longjmp,
// which, unlike swapcontext, don't save and restore the signal mask: no system call per switch (~20x faster).
// (Jumping between stacks this way is the classic user-level threads trick; it would need rethinking only in a
// process with x86 CET shadow stacks enabled, which glibc leaves off by default.)
static const unsigned long STACK_BYTES = 128 * 1024;
struct Fiber { ucontext_t start; jmp_buf at; idx3 idx; bool started, done; };
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
void barrier() { yield_to_scheduler(); }

// a fiber runs its thread of one workgroup, then parks until the scheduler resumes it for the next workgroup:
// fibers are made once per launch, not per workgroup
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
      thread_idx = fibers[i].idx;
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
#endif

namespace tg_mock {
static int lock;  // launches from several host threads take turns: the index variables above are shared

static int launch(thread_fn run, void** params, const unsigned int* d, unsigned int max_threads, const Limits& lim, char* err,
                  unsigned long errlen) {
  const unsigned int gx = d[0], gy = d[1], gz = d[2], bx = d[3], by = d[4], bz = d[5];
  if (!gx || !gy || !gz || !bx || !by || !bz) return fail(INVALID_VALUE, err, errlen, "a grid or block dim is 0");
  if (gx > lim.grid[0] || gy > lim.grid[1] || gz > lim.grid[2]) {
    snprintf(err, errlen, "grid (%u, %u, %u) is more than the device's (%u, %u, %u)", gx, gy, gz, lim.grid[0], lim.grid[1], lim.grid[2]);
    return INVALID_VALUE;
  }
  if (bx > lim.block[0] || by > lim.block[1] || bz > lim.block[2]) {
    snprintf(err, errlen, "block (%u, %u, %u) is more than the device's (%u, %u, %u)", bx, by, bz, lim.block[0], lim.block[1], lim.block[2]);
    return INVALID_VALUE;
  }
  const unsigned long threads = (unsigned long)bx * by * bz;
  if (threads > lim.block_threads) {
    snprintf(err, errlen, "block has %lu threads, more than the device's %u", threads, lim.block_threads);
    return INVALID_VALUE;
  }
  if (threads > max_threads) {
    snprintf(err, errlen, "block has %lu threads, more than the %u the kernel was compiled for (its launch bounds)", threads, max_threads);
    return OUT_OF_RESOURCES;
  }
  while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE)) {}
  grid_dim = {gx, gy, gz};
  block_dim = {bx, by, bz};
  int status = SUCCESS;
#ifdef TG_MOCK_BARRIERS
  const bool use_fibers = threads > 1;
  if (use_fibers && !make_fibers(run, params, bx, by, (unsigned int)threads))
    status = fail(OUT_OF_RESOURCES, err, errlen, "no memory for the block's fiber stacks");
#endif
  for (unsigned int z = 0; z < gz && status == SUCCESS; z++)
    for (unsigned int y = 0; y < gy && status == SUCCESS; y++)
      for (unsigned int x = 0; x < gx && status == SUCCESS; x++) {
        block_idx = {x, y, z};
#ifdef TG_MOCK_BARRIERS
        if (use_fibers) {
          run_block_fibers((unsigned int)threads);
          continue;
        }
#endif
        for (unsigned int tz = 0; tz < bz; tz++)
          for (unsigned int ty = 0; ty < by; ty++)
            for (unsigned int tx = 0; tx < bx; tx++) {
              thread_idx = {tx, ty, tz};
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
#define TG_MOCK_EXPORT_LAUNCHER(kernel, max_threads, limits, caller)                                                      \
  static void tg_mock_thread(void** params) { caller(kernel, params); }                                                 \
  extern "C" TG_MOCK_EXPORT int tg_mock_launch(void** params, const unsigned int* dims, char* err, unsigned long errlen) { \
    return tg_mock::launch(tg_mock_thread, params, dims, max_threads, limits, err, errlen);                               \
  }                                                                                                                       \
  extern "C" TG_MOCK_EXPORT int tg_mock_param_sizes(unsigned int* out, int n) { return tg_mock::param_sizes(kernel, out, n); }
