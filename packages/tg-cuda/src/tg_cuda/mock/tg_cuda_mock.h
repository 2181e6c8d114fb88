// tg_cuda_mock.h: enough of CUDA's device side to build a tg kernel's CUDA C++ for the CPU (CUDA_MOCK=1).
//
// Force-included (g++ -include) before the kernel's source, unchanged; mock/build.py appends
// TG_MOCK_KERNEL(name, max_threads), which exports the launcher the mock driver calls (tg_gpu_mock.h, from tg-core's
// tg.runtime.gpu_mock, runs the threads: blocks one after another, fibers for the threads of a kernel with
// __syncthreads; __shared__ variables are function statics, one copy seen by every thread of the block being run).
// The launch checks the grid and block against CUDA's limits and __launch_bounds__, as cuLaunchKernel does.
#pragma once
#include "tg_gpu_mock.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static

typedef tg_mock::idx3 uint3;
typedef tg_mock::idx3 dim3;
#define threadIdx tg_mock::thread_idx
#define blockIdx tg_mock::block_idx
#define blockDim tg_mock::block_dim
#define gridDim tg_mock::grid_dim
static inline void __syncthreads() { tg_mock::barrier(); }

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

// CUDA's launch limits (compute capability 3.0+): grid (2**31-1, 65535, 65535), block (1024, 1024, 64), 1024 threads
static const tg_mock::Limits tg_cuda_limits = {{2147483647u, 65535u, 65535u}, {1024u, 1024u, 64u}, 1024u};
#define TG_MOCK_KERNEL(name, max_threads) TG_MOCK_EXPORT_LAUNCHER(name, max_threads, tg_cuda_limits, tg_mock::call)
