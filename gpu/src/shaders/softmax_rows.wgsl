// The softmax kernel whose row maximum (phase 0) takes one invocation per row
// (`softmax.wgsl`): no workgroup memory and no barrier, for CPU adapters such as
// lavapipe, where a workgroup's invocations run on one thread.

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if p[3] == 0u {
        max_per_row(i);
    } else {
        sum_and_output(i);
    }
}
