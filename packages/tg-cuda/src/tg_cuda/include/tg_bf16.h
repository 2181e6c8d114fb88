// tg_bf16.h: `__nv_bfloat16` for tg's CUDA kernels: 16 bits in memory, arithmetic in float.
//
// Why not cuda_bf16.h: see tg_fp16.h. A bfloat16 is the top half of a float, so both conversions are integer
// operations that every GPU has; float -> bfloat16 rounds to nearest even like cvt.rn.bf16.f32 (sm_80+) and
// keeps nan a nan. The same code runs on the GPU and, with CUDA_MOCK=1, on the CPU.
#pragma once

__device__ __forceinline__ unsigned short tg_float_to_bf16_bits(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // nan: keep it a (quiet) nan
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct __nv_bfloat16 {
  unsigned short x;
  __nv_bfloat16() = default;
  __device__ __forceinline__ __nv_bfloat16(float f) : x(tg_float_to_bf16_bits(f)) {}
  __device__ __forceinline__ operator float() const { return __uint_as_float((unsigned int)x << 16); }
};
