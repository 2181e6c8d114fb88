extern "C" __global__ void __launch_bounds__(1) E_4_8(float* __restrict__ data0, const float* __restrict__ data1, const float* __restrict__ data2) {
  int gidx0 = blockIdx.y; /* 4 */
  int alu0 = (gidx0*8);
  int gidx1 = blockIdx.x; /* 8 */
  int alu1 = (alu0+gidx1);
  float val0 = data1[alu1];
  float val1 = data2[alu1];
  float alu2 = (val0+val1);
  data0[alu1] = alu2;
}
