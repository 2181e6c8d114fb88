// tg_amd.h: the types tg's AMD kernels use, included by every kernel (the AMDGPU build gets no other header: no
// ROCm is needed). Compiled by clang for amdgcn (__AMDGPU__) and, with AMD_MOCK=1, by the host C++ compiler.
//
// - half is _Float16, computed natively on the GPU (and in single operations rounded to half by g++ on the CPU).
// - bfloat16 (tg_bf16) is 16 bits in memory, arithmetic in float: a bfloat16 is the top half of a float, so both
//   conversions are integer operations; float -> bfloat16 rounds to nearest even and keeps nan a nan.
// - vectors are clang's ext_vector_type on the GPU, GCC's vector_size on the CPU: both index as v[i], are built as
//   (float4){a, b, c, d} and have the element type's size times the lane count as alignment.
#pragma once

#ifdef __AMDGPU__
#define TG_DEVICE __attribute__((device)) static inline
#define TG_VECTOR(T, n) T __attribute__((ext_vector_type(n)))
#else
#define TG_DEVICE static inline
#define TG_VECTOR(T, n) T __attribute__((vector_size((n) * sizeof(T))))
#endif

typedef _Float16 half;
typedef TG_VECTOR(float, 2) float2;
typedef TG_VECTOR(float, 4) float4;
typedef TG_VECTOR(float, 8) float8;
typedef TG_VECTOR(half, 2) half2;
typedef TG_VECTOR(half, 4) half4;
typedef TG_VECTOR(half, 8) half8;
typedef TG_VECTOR(half, 16) half16;

TG_DEVICE unsigned short tg_float_to_bf16_bits(float f) {
  unsigned int u = __builtin_bit_cast(unsigned int, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // nan: keep it a (quiet) nan
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

struct tg_bf16 {
  unsigned short x;
  tg_bf16() = default;
#ifdef __AMDGPU__
  __attribute__((device))
#endif
  tg_bf16(float f) : x(tg_float_to_bf16_bits(f)) {}
#ifdef __AMDGPU__
  __attribute__((device))
#endif
  operator float() const { return __builtin_bit_cast(float, (unsigned int)x << 16); }
};
