#include "tg_fp16.h"
extern "C" __global__ void __launch_bounds__(1) E_8(half* __restrict__ data0, const half* __restrict__ data1) {
  int gidx0 = blockIdx.x; /* 8 */
  half val0 = data1[gidx0];
  float cast0 = (float)(val0);
  float alu0 = (cast0*0.6931471824645996f);
  float alu1 = (alu0*1.4426950216293335f);
  float alu2 = exp2f(alu1);
  half cast1 = (half)(alu2);
  data0[gidx0] = cast1;
}
