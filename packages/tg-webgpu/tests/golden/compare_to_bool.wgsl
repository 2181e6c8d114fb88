@group(0) @binding(0) var<storage, read_write> data0: array<atomic<u32>>;
@group(0) @binding(1) var<storage, read_write> data1: array<f32>;
@compute @workgroup_size(8, 1, 1)
fn E_4_1(@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let gidx0 = i32(gid.x); /* 4 */
  let alu0 = (gidx0 * 8i);
  let lidx0 = i32(lid.x); /* 8 */
  let alu1 = (alu0 + lidx0);
  let val0 = data1[alu1];
  let alu2 = ((val0 < 0.5f) & !(((bitcast<u32>(val0) & 0x7fffffffu) > 0x7f800000u)));
  { let word0 = (alu1) / 4; let shift0 = u32((alu1) % 4) * 8u; atomicAnd(&data0[word0], ~(0xffu << shift0)); atomicOr(&data0[word0], select(0u, 1u, alu2) << shift0); }
}
