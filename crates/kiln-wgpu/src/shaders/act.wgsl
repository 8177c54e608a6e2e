// The gated unit's activation: SiLU, or GELU's tanh form when `gelu`
// (tanh saturates long before ±15; clamping keeps every driver's tanh
// away from overflow). Prepended to glu.wgsl and product.wgsl.
fn act(v: vec4<f32>, gelu: bool) -> vec4<f32> {
    if (gelu) {
        let z = clamp(0.7978845608 * (v + 0.044715 * v * v * v), vec4<f32>(-15.0), vec4<f32>(15.0));
        return 0.5 * v * (1.0 + tanh(z));
    }
    return v / (1.0 + exp(-v));
}
