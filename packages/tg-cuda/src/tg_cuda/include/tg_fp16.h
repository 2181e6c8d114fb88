// tg_fp16.h: `half` for tg's CUDA kernels: 16 bits in memory, arithmetic in float.
//
// Why not cuda_fp16.h: the NVRTC wheel tg-cuda uses (12.9) ships no CUDA headers (bundled headers arrive with
// NVRTC 13.3), and needing a CUDA toolkit only for this header would defeat `pip install tg-cuda`.
// Each operation on half values converts them to float, computes there and rounds the result back to half when it
// is stored in a half variable. For +, -, *, / and sqrt that gives the correctly rounded half result (float's
// 24-bit significand is more than twice half's 11 bits), so it matches half hardware arithmetic.
//
// On the GPU the conversions are single PTX cvt instructions; compiled for the CPU (CUDA_MOCK=1) they are done
// in software with round-to-nearest-even, as cvt.rn does.
#pragma once

#ifdef __CUDA_ARCH__
__device__ __forceinline__ unsigned short tg_float_to_half_bits(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float tg_half_bits_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
#else
static inline unsigned short tg_float_to_half_bits(float f) {
  unsigned int u = __float_as_uint(f);
  unsigned int sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x47800000u)  // |f| >= 65536 (or inf, nan): inf, or a quiet nan
    return (unsigned short)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a < 0x38800000u) {  // below half's smallest normal (2^-14): a subnormal half or zero
    // adding 0.5 puts the half's subnormal bits at the bottom of the float's significand, rounded by the FPU
    return (unsigned short)(sign | (__float_as_uint(__uint_as_float(a) + 0.5f) - 0x3f000000u));
  }
  // rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a carry into the exponent
  // is the correct result (up to inf for values that round past 65504)
  a += 0xc8000fffu + ((a >> 13) & 1u);
  return (unsigned short)(sign | (a >> 13));
}
static inline float tg_half_bits_to_float(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24 is exact in float
    float f = (float)m * 5.9604644775390625e-8f;
    return __uint_as_float(__float_as_uint(f) | sign);
  }
  return __uint_as_float(sign | (e == 31 ? 0x7f800000u : (e + 112u) << 23) | (m << 13));
}
#endif

struct half {
  unsigned short x;
  half() = default;
  __device__ __forceinline__ half(float f) : x(tg_float_to_half_bits(f)) {}
  __device__ __forceinline__ operator float() const { return tg_half_bits_to_float(x); }
};

// double -> half in one correct rounding. half(float) after C++'s double -> float conversion rounds twice (wrong for
// doubles just off a midpoint between two halves, one case in three near them). Rounding to odd first (toward zero,
// then the last bit set when inexact) keeps enough information for the float -> half rounding to be the right one.
__device__ __forceinline__ half tg_double_to_half(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return half(f);
  unsigned int u = __float_as_uint(f);
  if ((f < 0.0f ? -(double)f : (double)f) > (d < 0.0 ? -d : d)) u -= 1u;
  return half(__uint_as_float(u | 1u));
}
