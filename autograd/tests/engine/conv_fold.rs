//! Convolutions with few output positions per item run the items of a batch as one
//! product with their columns side by side (`docs/conv.md` §1, "Items folded into one
//! product"). The folding must change no bit: a batch gives, item for item, the bits of
//! the same convolution run on each item alone (which is never folded), forward and
//! input gradient, for `conv2d` and `conv_transpose2d`, on every backend. Likewise the
//! weight gradient, formed by one segmented product over a block of items
//! (`Backend::matmul_acc`), must be the items' own weight gradients added in item order
//! from `+0`.

use exactgrad_autograd::{Conv2dOptions, ConvTranspose2dOptions, Tensor};
use exactgrad_backends::{ExactBackend, FastBackend, ScalarRefBackend};
use exactgrad_core::Backend;

/// Deterministic values in about [-1, 1), some of them exactly zero.
fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if i % 11 == 0 {
                0.0
            } else {
                ((s >> 40) as f32 / (1u64 << 23) as f32) - 1.0
            }
        })
        .collect()
}

/// One geometry: batch, channels in and out, image and kernel sizes, stride, padding.
struct Case {
    n: usize,
    c: usize,
    o: usize,
    hw: [usize; 2],
    k: [usize; 2],
    stride: usize,
    pad: usize,
}

/// Output, input gradient and weight gradient of one run.
type Run = (Vec<f32>, Vec<f32>, Vec<f32>);

/// A convolution of an input by a weight.
type Conv<'a, B> = &'a dyn Fn(&Tensor<B>, &Tensor<B>) -> Tensor<B>;

/// [`Run`] of `f(x, w)` on the whole batch and on each item alone (`w` of shape
/// `w_shape` holding `w`).
fn batch_and_items<B: Backend>(
    be: &B,
    x_shape: [usize; 4],
    x: &[f32],
    (w_shape, w): ([usize; 4], &[f32]),
    f: Conv<'_, B>,
) -> (Run, Vec<Run>) {
    // The upstream gradient of the whole batch; item i gets its i-th part.
    let up_all = std::cell::RefCell::new(Vec::new());
    let run = |data: &[f32], n: usize, item: Option<usize>| {
        let t = Tensor::from_slice(be, data, [n, x_shape[1], x_shape[2], x_shape[3]])
            .unwrap()
            .requires_grad()
            .unwrap();
        let wt = Tensor::from_slice(be, w, w_shape)
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = f(&t, &wt);
        if item.is_none() {
            *up_all.borrow_mut() = values(7, y.numel());
        }
        let len = y.numel();
        let start = item.map_or(0, |i| i * len);
        let up = Tensor::from_slice(be, &up_all.borrow()[start..start + len], y.dims()).unwrap();
        y.mul(&up).unwrap().sum().unwrap().backward().unwrap();
        (
            y.to_vec().unwrap(),
            t.grad().unwrap().to_vec().unwrap(),
            wt.grad().unwrap().to_vec().unwrap(),
        )
    };
    let item = x.len() / x_shape[0];
    let whole = run(x, x_shape[0], None);
    let items = (0..x_shape[0])
        .map(|i| run(&x[i * item..(i + 1) * item], 1, Some(i)))
        .collect();
    (whole, items)
}

fn check<B: Backend>(be: &B, label: &str) {
    let cases = [
        // The last stage of a ResNet on 32×32 inputs: 4×4 outputs.
        Case {
            n: 5,
            c: 6,
            o: 20,
            hw: [4, 4],
            k: [3, 3],
            stride: 1,
            pad: 1,
        },
        // Stride 2 with an odd image, and a 1×1 kernel.
        Case {
            n: 3,
            c: 4,
            o: 9,
            hw: [7, 5],
            k: [3, 3],
            stride: 2,
            pad: 1,
        },
        Case {
            n: 17,
            c: 3,
            o: 70,
            hw: [3, 3],
            k: [1, 1],
            stride: 1,
            pad: 0,
        },
        // More items than one folded block holds (256 columns of 1 position).
        Case {
            n: 300,
            c: 2,
            o: 3,
            hw: [1, 1],
            k: [1, 1],
            stride: 1,
            pad: 0,
        },
    ];
    for (ci, cs) in cases.iter().enumerate() {
        let x_shape = [cs.n, cs.c, cs.hw[0], cs.hw[1]];
        let x = values(ci as u64, x_shape.iter().product());
        let w_len = cs.o * cs.c * cs.k[0] * cs.k[1];
        let w = values(100 + ci as u64, w_len);
        let bias = Tensor::from_slice(be, &values(200 + ci as u64, cs.o), [cs.o]).unwrap();
        let conv = |t: &Tensor<B>, w: &Tensor<B>| {
            let opts = Conv2dOptions {
                stride: [cs.stride; 2],
                padding: [cs.pad; 2],
                ..Conv2dOptions::default()
            };
            t.conv2d(w, Some(&bias), opts).unwrap()
        };
        // conv_transpose2d takes `[C_in, C_out, KH, KW]`: the same weight read with the
        // roles of the channels swapped, on an input of `o` channels.
        let wt = values(300 + ci as u64, w_len);
        let convt = |t: &Tensor<B>, w: &Tensor<B>| {
            let opts = ConvTranspose2dOptions {
                stride: [cs.stride; 2],
                padding: [cs.pad; 2],
                ..ConvTranspose2dOptions::default()
            };
            t.conv_transpose2d(w, None, opts).unwrap()
        };
        let xt_shape = [cs.n, cs.c, cs.hw[0], cs.hw[1]];
        for (name, f, shape, weight) in [
            (
                "conv2d",
                &conv as Conv<'_, B>,
                x_shape,
                ([cs.o, cs.c, cs.k[0], cs.k[1]], &w[..]),
            ),
            (
                "conv_transpose2d",
                &convt,
                xt_shape,
                ([cs.c, cs.o, cs.k[0], cs.k[1]], &wt[..]),
            ),
        ] {
            let (whole, items) = batch_and_items(be, shape, &x, weight, f);
            let (y_len, g_len) = (whole.0.len() / cs.n, whole.1.len() / cs.n);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            // The weight gradient: the items' own, added in item order from +0.
            let mut gw = vec![0.0f32; whole.2.len()];
            for (_, _, gwi) in &items {
                gw.iter_mut().zip(gwi).for_each(|(a, &v)| *a += v);
            }
            assert_eq!(
                bits(&whole.2),
                bits(&gw),
                "{label} {name} case {ci}: weight gradient"
            );
            for (i, (y, g, _)) in items.iter().enumerate() {
                assert_eq!(
                    bits(&whole.0[i * y_len..(i + 1) * y_len]),
                    bits(y),
                    "{label} {name} case {ci} item {i}: output"
                );
                assert_eq!(
                    bits(&whole.1[i * g_len..(i + 1) * g_len]),
                    bits(g),
                    "{label} {name} case {ci} item {i}: input gradient"
                );
            }
        }
    }
}

#[test]
fn folded_items_give_the_bits_of_each_item_alone() {
    check(&ScalarRefBackend, "scalar-ref");
    check(&ExactBackend::with_threads(2), "exact");
    check(&FastBackend::with_threads(2), "fast");
}
