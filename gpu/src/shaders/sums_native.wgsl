// The f64 of the sums of rule 3 (docs/arithmetic.md §1) on a device with f64: the
// device's own binary64 (the probes check its additions and rounding to f32).
alias F64 = f64;
fn d_zero() -> F64 { return f64(0.0); }
fn d_from(x: f32) -> F64 { return f64(x); }
fn d_add(a: F64, b: F64) -> F64 { return a + b; }
fn d_mul(x: f32, y: f32) -> F64 { return f64(x) * f64(y); }
fn d_to32(a: F64) -> f32 { return f32(a); }
