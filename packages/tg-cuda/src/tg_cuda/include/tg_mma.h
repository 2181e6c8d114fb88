// tg_mma.h: the tensor-core instruction tg's WMMA uops render to, and the fragment types it takes.
//
// __tg_mma_m16n8k16_f16_f32(a, b, c): one warp computes D = A @ B + C for A 16x16 and B 16x8 in half, C and D
// 16x8 in float; each thread passes its fragments (8 elements of A, 4 of B, 4 of C) and gets its 4 of D. Which
// elements a thread holds is the layout of PTX's "Matrix Fragments for mma.m16n8k16 with floating point type",
// the same tg.codegen.tensor_core describes for the lowerer and the PYTHON device's emulation.
//
// On the GPU it is PTX mma.sync (sm_80+). Compiled for the CPU (CUDA_MOCK=1) the block is the warp: every thread
// writes its fragments into tiles the block shares, waits at __syncthreads, computes its fragment of D from the
// whole tiles and waits again before the tiles can be reused.
#pragma once
#include "tg_fp16.h"

struct half4 { half v[4]; };
struct half8 { half v[8]; };
__device__ __forceinline__ half4 make_half4(half a, half b, half c, half d) {
  half4 r; r.v[0] = a; r.v[1] = b; r.v[2] = c; r.v[3] = d; return r;
}
__device__ __forceinline__ half8 make_half8(half a, half b, half c, half d, half e, half f, half g, half h) {
  half8 r; r.v[0] = a; r.v[1] = b; r.v[2] = c; r.v[3] = d; r.v[4] = e; r.v[5] = f; r.v[6] = g; r.v[7] = h; return r;
}

#ifdef __CUDA_ARCH__
__device__ __forceinline__ unsigned tg_pack_half2(half lo, half hi) { return (unsigned)lo.x | ((unsigned)hi.x << 16); }

__device__ __forceinline__ float4 __tg_mma_m16n8k16_f16_f32(half8 a, half4 b, float4 c) {
  float4 d;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
               : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w)
               : "r"(tg_pack_half2(a.v[0], a.v[1])), "r"(tg_pack_half2(a.v[2], a.v[3])), "r"(tg_pack_half2(a.v[4], a.v[5])),
                 "r"(tg_pack_half2(a.v[6], a.v[7])), "r"(tg_pack_half2(b.v[0], b.v[1])), "r"(tg_pack_half2(b.v[2], b.v[3])),
                 "f"(c.x), "f"(c.y), "f"(c.z), "f"(c.w));
  return d;
}
#else
static inline float4 __tg_mma_m16n8k16_f16_f32(half8 a, half4 b, float4 c) {
  static float A[16][16], B[16][8], C[16][8];  // shared by the block's threads, like __shared__
  const unsigned lane = threadIdx.x % 32, group = lane / 4, tid = lane % 4;
  for (unsigned i = 0; i < 8; i++) A[group + 8 * ((i / 2) % 2)][tid * 2 + i % 2 + 8 * (i / 4)] = (float)a.v[i];
  for (unsigned i = 0; i < 4; i++) B[tid * 2 + i % 2 + 8 * (i / 2)][group] = (float)b.v[i];
  const float cs[4] = {c.x, c.y, c.z, c.w};
  for (unsigned i = 0; i < 4; i++) C[group + 8 * (i / 2)][tid * 2 + i % 2] = cs[i];
  __syncthreads();
  float d[4];
  for (unsigned i = 0; i < 4; i++) {
    const unsigned row = group + 8 * (i / 2), col = tid * 2 + i % 2;
    float acc = 0.0f;
    for (unsigned j = 0; j < 16; j++) acc += A[row][j] * B[j][col];
    d[i] = acc + C[row][col];
  }
  __syncthreads();
  return make_float4(d[0], d[1], d[2], d[3]);
}
#endif
