//! The exact transcendental functions: fixed polynomials using IEEE + − × ÷ only.
//! See `docs/transcendentals.md`.
#![allow(missing_docs)]

pub fn exp(x: f32) -> f32 {
    todo!("exp {x}")
}
pub fn log(x: f32) -> f32 {
    todo!("log {x}")
}
pub fn tanh(x: f32) -> f32 {
    todo!("tanh {x}")
}
pub fn sigmoid(x: f32) -> f32 {
    todo!("sigmoid {x}")
}
pub fn erf(x: f32) -> f32 {
    todo!("erf {x}")
}
pub fn gelu_erf(x: f32) -> f32 {
    todo!("gelu {x}")
}
pub fn gelu_tanh(x: f32) -> f32 {
    todo!("gelu_tanh {x}")
}
pub fn gelu_erf_grad(x: f32) -> f32 {
    todo!("gelu' {x}")
}
pub fn gelu_tanh_grad(x: f32) -> f32 {
    todo!("gelu_tanh' {x}")
}
