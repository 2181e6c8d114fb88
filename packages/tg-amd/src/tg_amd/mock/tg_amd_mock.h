// tg_amd_mock.h: the AMDGPU builtins tg's AMD kernels use, for building a kernel's HIP source for the CPU (AMD_MOCK=1).
//
// Force-included (g++ -include) before the kernel's source, unchanged; mock/build.py appends the launcher
// (TG_MOCK_EXPORT_LAUNCHER of tg-core's tg_gpu_mock.h, which runs the threads, workgroups and barriers). g++ ignores
// the AMDGPU attributes (global, amdgpu_flat_work_group_size, shared: `static` makes a workgroup array one copy per
// workgroup run); the builtins are defined here on tg_gpu_mock.h's indices.
#pragma once
#include "tg_gpu_mock.h"
#include "tg_amd.h"

namespace tg_amd_mock {
// HIP's launch limits, checked as hipModuleLaunchKernel checks them
static const tg_mock::Limits LIMITS = {{2147483647u, 65535u, 65535u}, {1024u, 1024u, 1024u}, 1024u};
static inline unsigned int linear_thread() {
  return tg_mock::thread_idx.x + tg_mock::block_dim.x * (tg_mock::thread_idx.y + tg_mock::block_dim.y * tg_mock::thread_idx.z);
}
}  // namespace tg_amd_mock

static inline unsigned int __builtin_amdgcn_workgroup_id_x() { return tg_mock::block_idx.x; }
static inline unsigned int __builtin_amdgcn_workgroup_id_y() { return tg_mock::block_idx.y; }
static inline unsigned int __builtin_amdgcn_workgroup_id_z() { return tg_mock::block_idx.z; }
static inline unsigned int __builtin_amdgcn_workitem_id_x() { return tg_mock::thread_idx.x; }
static inline unsigned int __builtin_amdgcn_workitem_id_y() { return tg_mock::thread_idx.y; }
static inline unsigned int __builtin_amdgcn_workitem_id_z() { return tg_mock::thread_idx.z; }
static inline void __builtin_amdgcn_s_barrier() { tg_mock::barrier(); }
// the fences order memory around s_barrier on the GPU; the mock's threads share one core's memory
#define __builtin_amdgcn_fence(order, scope) ((void)0)

// v_wmma_f32_16x16x16_f16 (wave32): D = A @ B + C for 16x16 tiles, A and B half, C and D float. Each work-item passes
// its fragments (16 of A, 16 of B, 8 of C, by the layout of tg.codegen.tensor_core: lane l holds row l%16 of A,
// column l%16 of B, and column l%16, rows 2*i + l/16 of C) into tiles its wave shares, waits at a barrier, computes
// its 8 elements of D from the whole tiles and waits again before the tiles can be reused. Products and sums are
// done in double and rounded once to float (the rounding the PYTHON device's emulation does).
static inline float8 __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(half16 a, half16 b, float8 c) {
  static float A[32][16][16], B[32][16][16], C[32][16][16];  // per wave: a workgroup has at most 1024 / 32 of them
  const unsigned int t = tg_amd_mock::linear_thread(), wave = t / 32, lane = t % 32;
  // lanes 16-31 must hold what lanes 0-15 hold (the hardware reads A and B from both halves of the wave): where they
  // disagree, the tile gets a nan, so a kernel that is wrong on the GPU gives wrong numbers here too
  for (int i = 0; i < 16; i++) {
    float &x = A[wave][lane % 16][i], &y = B[wave][i][lane % 16];
    x = lane < 16 || x == (float)a[i] ? (float)a[i] : __builtin_nanf("");
    y = lane < 16 || y == (float)b[i] ? (float)b[i] : __builtin_nanf("");
  }
  for (int i = 0; i < 8; i++) C[wave][2 * i + lane / 16][lane % 16] = c[i];
  tg_mock::barrier();
  float8 d;
  for (int i = 0; i < 8; i++) {
    const unsigned int row = 2 * i + lane / 16, col = lane % 16;
    double acc = C[wave][row][col];
    for (int j = 0; j < 16; j++) acc += (double)A[wave][row][j] * (double)B[wave][j][col];
    d[i] = (float)acc;
  }
  tg_mock::barrier();
  return d;
}
