#include "tg_fp16.h"
extern "C" __global__ void __launch_bounds__(1) E_8(half* __restrict__ data0, const half* __restrict__ data1) {
  int gidx0 = blockIdx.x; /* 8 */
  half val0 = data1[gidx0];
  half alu0 = (val0*(half)(0.6931471805599453));
  half alu1 = (alu0*(half)(1.4426950408889634));
  half alu2 = exp2f(alu1);
  data0[gidx0] = alu2;
}
