//! Backends with one deliberately wrong kernel (the scalar reference wrapped, one kernel
//! overridden): the kit's documented entry point, `check_backend` with
//! [`Config::quick`], must report each, naming the kernel.

use exactgrad_backends::conformance::{self, Config, Mismatch};
use exactgrad_backends::{scalar, ScalarRefBackend};
use exactgrad_core::backend::{
    BinaryArgs, Checked, CopyStridedArgs, MatmulArgs, SelectArgs, SoftmaxArgs, SoftmaxBackwardArgs,
    SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad_core::{BackendImpl, ComputeMode, Layout, Result, Shape, UnaryOp};

/// A backend named `$name` that runs the scalar reference for every required kernel but
/// the ones written in its body.
macro_rules! wrapped_reference {
    ($ty:ident, $name:literal, { $($kernel:item)* }, [$($reference:ident: $args:ident),*]) => {
        #[derive(Clone, Copy, Debug, Default)]
        struct $ty;

        impl BackendImpl for $ty {
            type Storage = Vec<f32>;
            exactgrad_core::host_views!();

            fn name(&self) -> String {
                $name.into()
            }
            fn mode(&self) -> ComputeMode {
                ComputeMode::Exact
            }
            fn zeros(&self, len: usize) -> Result<Vec<f32>> {
                Ok(vec![0.0; len])
            }
            fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> {
                Ok(data)
            }
            $($kernel)*
            $(fn $reference(&self, args: Checked<$args<'_>>) -> Result<()> {
                ScalarRefBackend.$reference(args)
            })*
        }
    };
}

wrapped_reference!(
    ReversedSum,
    "reversed-sum",
    {
        /// Rule 3's f64 sum, but over the reduced elements in decreasing order.
        fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
            let SumArgs { x, layout, reduce, out } = args.into_inner();
            let part = |reduced: bool| Layout {
                shape: Shape::new(
                    layout
                        .shape
                        .dims()
                        .iter()
                        .zip(reduce)
                        .filter(|(_, &r)| r == reduced)
                        .map(|(&d, _)| d)
                        .collect::<Vec<_>>(),
                ),
                strides: layout
                    .strides
                    .iter()
                    .zip(reduce)
                    .filter(|(_, &r)| r == reduced)
                    .map(|(&s, _)| s)
                    .collect(),
                offset: layout.offset,
            };
            let (kept, red) = (part(false), part(true));
            let mut i = 0;
            kept.for_each_index(|base| {
                let mut index = Vec::new();
                Layout {
                    offset: base,
                    ..red.clone()
                }
                .for_each_index(|s| index.push(s));
                let acc = index.iter().rev().fold(0.0f64, |a, &s| a + f64::from(x[s]));
                out[i] = scalar::canon(acc as f32);
                i += 1;
            });
            Ok(())
        }
    },
    [
        copy_strided_impl: CopyStridedArgs,
        unary_impl: UnaryArgs,
        unary_backward_impl: UnaryBackwardArgs,
        binary_impl: BinaryArgs,
        select_impl: SelectArgs,
        matmul_impl: MatmulArgs,
        softmax_impl: SoftmaxArgs,
        softmax_backward_impl: SoftmaxBackwardArgs
    ]
);

wrapped_reference!(
    StdExp,
    "std-exp",
    {
        /// The reference, except that `exp` is the standard library's.
        fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
            let UnaryArgs { op, x, out } = args.into_inner();
            for (o, &v) in out.iter_mut().zip(x) {
                *o = scalar::canon(if op == UnaryOp::Exp {
                    v.exp()
                } else {
                    scalar::unary(op, v)
                });
            }
            Ok(())
        }
    },
    [
        copy_strided_impl: CopyStridedArgs,
        unary_backward_impl: UnaryBackwardArgs,
        binary_impl: BinaryArgs,
        select_impl: SelectArgs,
        sum_impl: SumArgs,
        matmul_impl: MatmulArgs,
        softmax_impl: SoftmaxArgs,
        softmax_backward_impl: SoftmaxBackwardArgs
    ]
);

/// The kit's verdict on `backend` with the documented quick configuration.
fn quick_verdict<B: BackendImpl>(backend: &B) -> Box<Mismatch> {
    conformance::check_backend(backend, &ScalarRefBackend, &Config::quick())
        .expect_err("Config::quick() must catch the wrong kernel")
}

#[test]
fn quick_catches_a_sum_in_reversed_order() {
    let err = quick_verdict(&ReversedSum);
    let msg = err.to_string();
    assert!(err.kernel.starts_with("sum"), "{msg}");
    assert_eq!(err.backend, "reversed-sum");
    assert!(msg.contains("sum"), "{msg}");
}

#[test]
fn quick_catches_std_exp() {
    let err = quick_verdict(&StdExp);
    let msg = err.to_string();
    assert_eq!(err.kernel, "unary(Exp)", "{msg}");
    assert_eq!(err.backend, "std-exp");
    assert!(msg.contains("unary(Exp)"), "{msg}");
}
