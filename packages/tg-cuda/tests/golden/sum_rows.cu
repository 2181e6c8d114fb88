extern "C" __global__ void __launch_bounds__(1) r_6_16(float* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x; /* 6 */
  int alu0 = (gidx0*16);
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    int alu1 = (alu0+ridx0);
    float val0 = data1[alu1];
    float alu2 = (acc0+val0);
    acc0 = alu2;
  }
  data0[gidx0] = acc0;
}
