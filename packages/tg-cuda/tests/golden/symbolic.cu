extern "C" __global__ void __launch_bounds__(1) E_3_n(float* __restrict__ data0, const float* __restrict__ data1, const int n) {
  int gidx0 = blockIdx.y; /* 3 */
  int alu0 = (gidx0*n);
  int gidx1 = blockIdx.x; /* <n[1-64]> */
  int alu1 = (alu0+gidx1);
  float val0 = data1[alu1];
  float alu2 = (val0*2.0f);
  data0[alu1] = alu2;
}
