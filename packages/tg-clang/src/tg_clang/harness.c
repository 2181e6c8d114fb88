/* tg-clang's aarch64 harness: runs CLANG kernels built for aarch64 on a host of another architecture, under
   qemu-user. One process serves a device for its whole life (tg_clang/harness.py is its other half), so qemu starts
   once, not per kernel call.

   argv: the fds of the shared memory (a memfd the buffers are copied into), of the requests and of the replies.
   A request is a header {op, a, b, c, d}, then its payload:
     LOAD  a = path length, payload the path of a kernel's shared object: dlopen it, reply with its number
     FREE  a = a kernel's number: dlclose it (no reply)
     RUN   a = a kernel's number, b = buffers, c = ints, d = the shared memory's size; payload: b uint64 offsets of the
           buffers in the shared memory, c int32 values; call the kernel's tg_entry(bufs, vals), reply 0
   A reply is {int32 status, uint32 length} and that many bytes of message (status -1: the message says why).
   End of the requests (tg closed its end or died): exit. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

enum { OP_LOAD = 1, OP_FREE = 2, OP_RUN = 3 };
#define HELLO 0x54474133 /* "TGA3": the first reply, once the harness runs */

typedef void (*entry_fn)(void **bufs, const int *vals);
struct header { uint32_t op, a, b, c; uint64_t d; };

static int req_fd, resp_fd, shm_fd;
static unsigned char *shm;
static uint64_t shm_size;
static void **libs;
static entry_fn *entries;
static uint32_t n_kernels, cap;

static void read_all(void *p, size_t n) {
  unsigned char *c = p;
  while (n) {
    ssize_t r = read(req_fd, c, n);
    if (r <= 0) _exit(0); /* tg is gone */
    c += r, n -= (size_t)r;
  }
}

static void write_all(const void *p, size_t n) {
  const unsigned char *c = p;
  while (n) {
    ssize_t w = write(resp_fd, c, n);
    if (w <= 0) _exit(1);
    c += w, n -= (size_t)w;
  }
}

static void reply(int32_t status, const char *msg) {
  uint32_t len = msg ? (uint32_t)strlen(msg) : 0;
  write_all(&status, 4);
  write_all(&len, 4);
  if (len) write_all(msg, len);
}

static void *alloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) _exit(3);
  return p;
}

static void load(uint32_t len) {
  char *path = alloc(len + 1);
  read_all(path, len);
  path[len] = 0;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  free(path);
  if (!lib) return reply(-1, dlerror());
  entry_fn entry = (entry_fn)dlsym(lib, "tg_entry");
  if (!entry) {
    dlclose(lib);
    return reply(-1, "the kernel exports no tg_entry (was it rendered for CPU_TARGET=aarch64?)");
  }
  if (n_kernels == cap) {
    cap = cap ? 2 * cap : 64;
    libs = realloc(libs, cap * sizeof *libs);
    entries = realloc(entries, cap * sizeof *entries);
    if (!libs || !entries) _exit(3);
  }
  libs[n_kernels] = lib, entries[n_kernels] = entry;
  reply((int32_t)n_kernels++, 0);
}

static void run(const struct header *h) {
  uint64_t *offsets = alloc(h->b * sizeof *offsets);
  int *vals = alloc(h->c * sizeof *vals);
  void **bufs = alloc(h->b * sizeof *bufs);
  read_all(offsets, h->b * sizeof *offsets);
  read_all(vals, h->c * sizeof *vals);
  const char *error = 0;
  if (h->d != shm_size) { /* tg grew the shared memory: map it anew */
    if (shm) munmap(shm, shm_size);
    shm = mmap(0, h->d, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
    shm_size = shm == MAP_FAILED ? 0 : h->d;
    if (shm == MAP_FAILED) shm = 0, error = "mmap of the shared buffers failed";
  }
  if (!error && (h->a >= n_kernels || !entries[h->a])) error = "no such kernel";
  for (uint32_t i = 0; !error && i < h->b; i++) {
    if (offsets[i] > shm_size) error = "a buffer lies outside the shared memory";
    bufs[i] = shm + offsets[i];
  }
  if (!error) entries[h->a](bufs, vals);
  free(offsets), free(vals), free(bufs);
  reply(error ? -1 : 0, error);
}

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  shm_fd = atoi(argv[1]), req_fd = atoi(argv[2]), resp_fd = atoi(argv[3]);
  struct rlimit no_core = {0, 0}; /* a kernel that crashes is reported by tg: no qemu core file in the user's directory */
  setrlimit(RLIMIT_CORE, &no_core);
  reply(HELLO, "aarch64");
  for (;;) {
    struct header h;
    read_all(&h, sizeof h);
    if (h.op == OP_LOAD) {
      load(h.a);
    } else if (h.op == OP_FREE) {
      if (h.a < n_kernels && libs[h.a]) dlclose(libs[h.a]), libs[h.a] = 0, entries[h.a] = 0;
    } else if (h.op == OP_RUN) {
      run(&h);
    } else {
      return 4; /* out of step with tg: better dead (tg then says so) than guessing */
    }
  }
}
