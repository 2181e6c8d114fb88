extern "C" __global__ void __launch_bounds__(16) r_6_16(float* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x; /* 6 */
  __shared__ float temp0[16];
  int gidx1 = threadIdx.x; /* 16 */
  int alu0 = (gidx0*256);
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 16; ridx0++) {
    int alu1 = (ridx0*16);
    int alu2 = (alu0+alu1);
    int alu3 = (alu2+gidx1);
    float val0 = data1[alu3];
    float alu4 = (acc0+val0);
    acc0 = alu4;
  }
  temp0[gidx1] = acc0;
  __syncthreads();
  float acc1 = 0.0f;
  for (int ridx1 = 0; ridx1 < 16; ridx1++) {
    float val1 = temp0[ridx1];
    float alu5 = (acc1+val1);
    acc1 = alu5;
  }
  bool alu6 = (gidx1<1);
  if (alu6) { data0[gidx0] = acc1; }
}
