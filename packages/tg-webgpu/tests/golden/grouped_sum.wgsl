@group(0) @binding(0) var<storage, read_write> data0: array<f32>;
@group(0) @binding(1) var<storage, read_write> data1: array<f32>;
var<workgroup> temp0: array<f32, 4>;
@compute @workgroup_size(4, 1, 1)
fn r_4_2(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let lidx0 = i32(lid.x); /* 4 */
  let gidx0 = i32(gid.x); /* 4 */
  let alu0 = (gidx0 * 8i);
  let alu1 = (lidx0 * 2i);
  var acc0: f32 = 0.0f;
  for (var ridx0: i32 = 0i; ridx0 < 2i; ridx0++) {
    let alu2 = (alu0 + ridx0);
    let alu3 = (alu2 + alu1);
    let val0 = data1[alu3];
    let alu4 = (acc0 + val0);
    acc0 = alu4;
  }
  temp0[lidx0] = acc0;
  workgroupBarrier();
  let alu5 = (lidx0 < 1i);
  if (alu5) {
    var acc1: f32 = 0.0f;
    for (var ridx1: i32 = 0i; ridx1 < 4i; ridx1++) {
      let val1 = temp0[ridx1];
      let alu6 = (acc1 + val1);
      acc1 = alu6;
    }
    data0[gidx0] = acc1;
  }
}
