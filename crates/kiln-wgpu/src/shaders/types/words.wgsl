// A weight matrix kept as the GGUF file stores it, read 16 bytes at a
// time (formats whose blocks and rows are 16-byte aligned: F32, F16,
// Q4_K, Q5_K).
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
