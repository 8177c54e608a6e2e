// Decode products' row sums by subgroup operations, compiled where the
// adapter's subgroups are exactly 32 invocations (the device opened with
// wgpu's SUBGROUP feature; naga takes the builtins without WGSL's
// `enable subgroups`): a row pair's 32 threads are one subgroup
// (numbered by `subgroup_id`, not by their place in the workgroup), and
// `row_sum` adds its 32 partial sums without workgroup memory or a
// barrier.
const SUB: bool = true;

fn row_sum(v: f32) -> f32 {
    return subgroupAdd(v);
}
