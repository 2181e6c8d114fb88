/* Threads in C that run the slices of a split kernel (see pool.py). A worker that finished a slice spins for
   SPIN_NS watching for the next job, then sleeps on a condition variable: kernels launched one after another (an
   eager training step) find it awake and cost ~1 us each, where waking a sleeping thread costs tens of us. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define MAX_THREADS 256
#define SPIN_NS 200000LL

typedef void (*tg_slice_fn)(void**, const int*, int, int);

static struct { tg_slice_fn fn; void** bufs; const int* vals; int outer, n; } job;
static atomic_uint generation;  /* bumped once per job: a worker runs a job when it sees a new generation */
static atomic_int pending;      /* workers that haven't finished with the current job yet */
static int started;             /* workers running: ids 1..started (the caller is slice 0) */
static unsigned first_generation[MAX_THREADS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int at_fork_set;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  unsigned seen = first_generation[id];
  for (;;) {
    unsigned g = atomic_load_explicit(&generation, memory_order_acquire);
    if (g == seen) {
      long long until = now_ns() + SPIN_NS;
      for (int i = 1; (g = atomic_load_explicit(&generation, memory_order_acquire)) == seen; i++) {
        relax();
        if ((i & 255) == 0 && now_ns() > until) break;
      }
      if (g == seen) {
        pthread_mutex_lock(&mu);
        while ((g = atomic_load_explicit(&generation, memory_order_acquire)) == seen) pthread_cond_wait(&wake, &mu);
        pthread_mutex_unlock(&mu);
      }
    }
    seen = g;
    if (id < job.n) {
      int start = (int)((long long)job.outer * id / job.n), end = (int)((long long)job.outer * (id + 1) / job.n);
      job.fn(job.bufs, job.vals, start, end);
    }
    /* every worker answers every job, with a slice or without: none can lag behind and read the next job's fields */
    atomic_fetch_sub_explicit(&pending, 1, memory_order_release);
  }
  return 0;
}

/* a forked child has none of the parent's threads (and maybe a lock the parent held): start afresh */
static void after_fork_in_child(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  mu = m;
  wake = c;
  started = 0;
}

/* Run fn over [0, outer) in n slices, slice 0 on the calling thread; returns the number of slices used (fewer than n
   when the system refuses more threads). One job at a time: the caller serializes (pool.py holds a lock). */
int tg_pool_run(tg_slice_fn fn, void** bufs, const int* vals, int outer, int n) {
  if (!at_fork_set) {
    pthread_atfork(0, 0, after_fork_in_child);
    at_fork_set = 1;
  }
  if (n > MAX_THREADS) n = MAX_THREADS;
  while (started < n - 1) {
    pthread_t t;
    pthread_attr_t attr;
    first_generation[started + 1] = atomic_load(&generation);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int failed = pthread_create(&t, &attr, worker, (void*)(intptr_t)(started + 1));
    pthread_attr_destroy(&attr);
    if (failed) break;
    started++;
  }
  if (n > started + 1) n = started + 1;
  if (n > 1) {
    job.fn = fn; job.bufs = bufs; job.vals = vals; job.outer = outer; job.n = n;
    atomic_store_explicit(&pending, started, memory_order_relaxed);
    pthread_mutex_lock(&mu);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
  }
  fn(bufs, vals, 0, (int)((long long)outer / n));
  while (n > 1 && atomic_load_explicit(&pending, memory_order_acquire) > 0) relax();
  return n;
}
