extern "C" __global__ void __launch_bounds__(16) r_6_16(float* __restrict__ data0, const float* __restrict__ data1) {
  __shared__ float temp0[16];
  int gidx0 = threadIdx.x; /* 16 */
  int gidx1 = blockIdx.x; /* 6 */
  int alu0 = (gidx1*256);
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    int alu1 = (ridx0*16);
    int alu2 = (alu0+alu1);
    int alu3 = (alu2+gidx0);
    float val0 = data1[alu3];
    float alu4 = (acc0+val0);
    acc0 = alu4;
  }
  temp0[gidx0] = acc0;
  __syncthreads();
  bool alu5 = (gidx0<1);
  if (alu5) {
    float acc1 = 0.0f;
    for (int ridx1 = 0; ridx1 < 16; ridx1++) {
      float val1 = temp0[ridx1];
      float alu6 = (acc1+val1);
      acc1 = alu6;
    }
    data0[gidx1] = acc1;
  }
}
