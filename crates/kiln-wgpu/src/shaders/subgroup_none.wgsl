// Without subgroups: a row pair's threads are numbered by their place in
// the workgroup and their sums go through workgroup memory (`row_sum` is
// never called).
const SUB: bool = false;

fn row_sum(v: f32) -> f32 {
    return v;
}
