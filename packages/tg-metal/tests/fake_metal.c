// fake_metal.c: a stand-in for libobjc + Metal.framework + libdispatch, so tg_metal.runtime's Objective-C calls can be
// exercised on Linux (tests/test_metal_objc.py). Not Metal: kernels don't run. It checks what a Mac would care about:
// each message arrives with the arguments of its declared C signature (MTLSize structs by value included), errors come
// back through NSError out-parameters, retain/release balance, and it logs every encoder command for the test to read.
//
// objc_msgSend is, as in the real runtime, a trampoline: it jumps to the method's implementation with the caller's
// registers and stack untouched, so a caller that casts it to the wrong signature gets wrong values here too. A
// selector is a pointer to its implementation (sel_registerName knows only the methods below; others give NULL).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
__asm__(".text\n.globl objc_msgSend\n.type objc_msgSend,@function\nobjc_msgSend:\n  jmp *(%rsi)\n");
#elif defined(__aarch64__)
__asm__(".text\n.globl objc_msgSend\n.type objc_msgSend,@function\nobjc_msgSend:\n  ldr x16, [x1]\n  br x16\n");
#else
#error "fake_metal.c: no objc_msgSend trampoline for this architecture"
#endif

typedef struct { unsigned long width, height, depth; } MTLSize;
enum { K_CLASS = 1, K_STRING, K_ERROR, K_DEVICE, K_QUEUE, K_BUFFER, K_OPTIONS, K_LIBRARY, K_FUNCTION, K_PIPELINE, K_CMDBUF, K_ENCODER, K_DATA };
typedef struct Obj { int kind, refs; char* text; void* mem; unsigned long len, status; int fast_math, encoding; } Obj;

static char log_buf[1 << 16];
static unsigned long log_len;
static int live[16];  // live objects per kind

static void logf_(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_len += (unsigned long)vsnprintf(log_buf + log_len, sizeof(log_buf) - log_len, fmt, ap);
  va_end(ap);
}
const char* fake_log(void) { return log_buf; }
int fake_live(int kind) { return live[kind]; }

static Obj* make(int kind) {
  Obj* o = (Obj*)calloc(1, sizeof(Obj));
  o->kind = kind, o->refs = 1;
  live[kind]++;
  return o;
}
static Obj* str(const char* s) { Obj* o = make(K_STRING); o->text = strdup(s); return o; }

static Obj cls_nsstring = {K_CLASS, 1, "NSString"}, cls_options = {K_CLASS, 1, "MTLCompileOptions"};
void* objc_getClass(const char* name) {
  if (!strcmp(name, "NSString")) return &cls_nsstring;
  if (!strcmp(name, "MTLCompileOptions")) return &cls_options;
  return NULL;
}
// autoreleased objects (what a method not named alloc/new/copy returns) are released when their pool pops; one made
// while no pool is pushed would leak on a Mac (a command-line process has no run loop draining one): logged
static Obj* pool[4096];
static long pool_n, pool_depth;
static void m_release(Obj* self, void* cmd);
static Obj* autoreleased(Obj* o) {
  if (!pool_depth) logf_("AUTORELEASE WITHOUT POOL kind %d\n", o->kind);
  else pool[pool_n++] = o;
  return o;
}
void* objc_autoreleasePoolPush(void) { pool_depth++; return (void*)(pool_n + 1); }
void objc_autoreleasePoolPop(void* mark) {
  while (pool_n > (long)mark - 1) m_release(pool[--pool_n], NULL);
  pool_depth--;
}

// ---- methods: (self, _cmd, args...) ----
static void* m_alloc(Obj* self, void* cmd) { return make(self == &cls_nsstring ? K_STRING : K_OPTIONS); }
static void* m_init(Obj* self, void* cmd) { self->fast_math = 1; return self; }
static void* m_retain(Obj* self, void* cmd) { self->refs++; return self; }
static void m_release(Obj* self, void* cmd) {
  if (self->refs <= 0) { logf_("OVER-RELEASE kind %d\n", self->kind); return; }
  if (--self->refs == 0) live[self->kind]--;
}
static void* m_initWithUTF8String(Obj* self, void* cmd, const char* s) { self->text = strdup(s); return self; }
static const char* m_UTF8String(Obj* self, void* cmd) { return self->text; }
static void* m_localizedDescription(Obj* self, void* cmd) { return autoreleased(str(self->text)); }
static void* m_name(Obj* self, void* cmd) { return autoreleased(str("Fake Apple M1")); }
static void* m_newCommandQueue(Obj* self, void* cmd) { return make(K_QUEUE); }
static void* m_newBuffer(Obj* self, void* cmd, unsigned long len, unsigned long options) {
  Obj* b = make(K_BUFFER);
  b->mem = calloc(1, len), b->len = len;
  logf_("newBuffer %lu options %lu\n", len, options);
  return b;
}
static void* m_contents(Obj* self, void* cmd) { return self->mem; }
static unsigned long m_length(Obj* self, void* cmd) { return self->len; }
static void m_setFastMathEnabled(Obj* self, void* cmd, _Bool on) { self->fast_math = on; }
static void* m_newLibraryWithSource(Obj* self, void* cmd, Obj* src, Obj* options, Obj** error) {
  logf_("compile fast_math=%d\n", options->fast_math);
  if (!strstr(src->text, "kernel void")) {
    Obj* e = make(K_ERROR);
    e->text = strdup("program_source:1:1: error: no kernel");
    *error = autoreleased(e);
    return NULL;
  }
  Obj* lib = make(K_LIBRARY);
  lib->text = strdup(src->text);
  return lib;
}
static void* m_newLibraryWithData(Obj* self, void* cmd, Obj* data, Obj** error) {
  Obj* lib = make(K_LIBRARY);
  lib->text = strdup((const char*)data->mem);
  logf_("metallib %lu bytes\n", data->len);
  return lib;
}
static void* m_newFunctionWithName(Obj* self, void* cmd, Obj* name) {
  char pat[256];
  snprintf(pat, sizeof(pat), "kernel void %s(", name->text);
  if (!strstr(self->text, pat)) return NULL;
  Obj* f = make(K_FUNCTION);
  f->text = strdup(name->text);
  return f;
}
static void* m_newPipeline(Obj* self, void* cmd, Obj* fn, Obj** error) {
  Obj* p = make(K_PIPELINE);
  p->text = strdup(fn->text);
  return p;
}
static unsigned long m_maxTotalThreads(Obj* self, void* cmd) { return 1024; }
static unsigned long m_maxThreadgroupMemoryLength(Obj* self, void* cmd) { return 32768; }
static _Bool m_supportsFamily(Obj* self, void* cmd, long family) { return family <= 1008; }
static void* m_commandBuffer(Obj* self, void* cmd) { logf_("commandBuffer\n"); return autoreleased(make(K_CMDBUF)); }
static void* m_computeCommandEncoder(Obj* self, void* cmd) { Obj* e = make(K_ENCODER); e->encoding = 1; return autoreleased(e); }
static void m_setPipeline(Obj* self, void* cmd, Obj* p) { logf_("set pipeline %s\n", p->text); }
static void m_setBuffer(Obj* self, void* cmd, Obj* b, unsigned long offset, unsigned long index) {
  logf_("set buffer %lu: %lu bytes + %lu\n", index, b->len, offset);
}
static void m_setBytes(Obj* self, void* cmd, const void* bytes, unsigned long len, unsigned long index) {
  int v;
  memcpy(&v, bytes, sizeof(v));
  logf_("set bytes %lu: %lu bytes = %d\n", index, len, v);
}
static void m_dispatch(Obj* self, void* cmd, MTLSize grid, MTLSize tg) {
  logf_("dispatch (%lu, %lu, %lu) x (%lu, %lu, %lu)\n", grid.width, grid.height, grid.depth, tg.width, tg.height, tg.depth);
}
static void m_endEncoding(Obj* self, void* cmd) { self->encoding = 0; logf_("endEncoding\n"); }
static void m_commit(Obj* self, void* cmd) { self->status = 2; logf_("commit\n"); }
static void m_waitUntilCompleted(Obj* self, void* cmd) { if (self->status == 2) self->status = 4; logf_("wait\n"); }
static unsigned long m_status(Obj* self, void* cmd) { return self->status; }
static void* m_error(Obj* self, void* cmd) { return NULL; }
static double m_GPUStartTime(Obj* self, void* cmd) { return 10.0; }
static double m_GPUEndTime(Obj* self, void* cmd) { return 10.25; }

typedef struct { void* imp; const char* name; } Sel;
#define M(name, fn) {(void*)fn, name}
static Sel sels[] = {
  M("alloc", m_alloc), M("init", m_init), M("retain", m_retain), M("release", m_release),
  M("initWithUTF8String:", m_initWithUTF8String), M("UTF8String", m_UTF8String), M("localizedDescription", m_localizedDescription),
  M("name", m_name), M("newCommandQueue", m_newCommandQueue), M("newBufferWithLength:options:", m_newBuffer),
  M("contents", m_contents), M("length", m_length), M("setFastMathEnabled:", m_setFastMathEnabled),
  M("newLibraryWithSource:options:error:", m_newLibraryWithSource), M("newLibraryWithData:error:", m_newLibraryWithData),
  M("newFunctionWithName:", m_newFunctionWithName), M("newComputePipelineStateWithFunction:error:", m_newPipeline),
  M("maxTotalThreadsPerThreadgroup", m_maxTotalThreads), M("maxThreadgroupMemoryLength", m_maxThreadgroupMemoryLength),
  M("supportsFamily:", m_supportsFamily), M("commandBuffer", m_commandBuffer), M("computeCommandEncoder", m_computeCommandEncoder),
  M("setComputePipelineState:", m_setPipeline), M("setBuffer:offset:atIndex:", m_setBuffer), M("setBytes:length:atIndex:", m_setBytes),
  M("dispatchThreadgroups:threadsPerThreadgroup:", m_dispatch), M("endEncoding", m_endEncoding), M("commit", m_commit),
  M("waitUntilCompleted", m_waitUntilCompleted), M("status", m_status), M("error", m_error),
  M("GPUStartTime", m_GPUStartTime), M("GPUEndTime", m_GPUEndTime),
};
void* sel_registerName(const char* name) {
  for (unsigned long i = 0; i < sizeof(sels) / sizeof(sels[0]); i++)
    if (!strcmp(sels[i].name, name)) return &sels[i];
  return NULL;
}

void* MTLCreateSystemDefaultDevice(void) { return make(K_DEVICE); }

// dispatch_data_create with the default destructor copies the bytes; released with -release as an object
void* dispatch_data_create(const void* buffer, unsigned long size, void* queue, void* destructor) {
  Obj* d = make(K_DATA);
  d->mem = calloc(1, size + 1), d->len = size;
  memcpy(d->mem, buffer, size);
  return d;
}
