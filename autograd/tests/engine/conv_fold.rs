//! Convolutions with few output positions per item run the items of a batch as one
//! product with their columns side by side (`docs/conv.md` §1, "Items folded into one
//! product"). The folding must change no bit: a batch gives, item for item, the bits of
//! the same convolution run on each item alone (which is never folded), forward and
//! input gradient, for `conv2d` and `conv_transpose2d`, on every backend.

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

/// Output and input gradient of `f` on the whole batch and on each item alone.
#[allow(clippy::type_complexity)]
fn batch_and_items<B: Backend>(
    be: &B,
    x_shape: [usize; 4],
    x: &[f32],
    f: &dyn Fn(&Tensor<B>) -> Tensor<B>,
) -> ((Vec<f32>, Vec<f32>), Vec<(Vec<f32>, Vec<f32>)>) {
    // The upstream gradient of the whole batch; item i gets its i-th part.
    let up_all = std::cell::RefCell::new(Vec::new());
    let run = |data: &[f32], n: usize, item: Option<usize>| {
        let t = Tensor::from_slice(be, data, [n, x_shape[1], x_shape[2], x_shape[3]])
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = f(&t);
        if item.is_none() {
            *up_all.borrow_mut() = values(7, y.numel());
        }
        let len = y.numel();
        let start = item.map_or(0, |i| i * len);
        let up = Tensor::from_slice(be, &up_all.borrow()[start..start + len], y.dims()).unwrap();
        y.mul(&up).unwrap().sum().unwrap().backward().unwrap();
        (y.to_vec().unwrap(), t.grad().unwrap().to_vec().unwrap())
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
        let w = Tensor::from_slice(
            be,
            &values(100 + ci as u64, w_len),
            [cs.o, cs.c, cs.k[0], cs.k[1]],
        )
        .unwrap();
        let bias = Tensor::from_slice(be, &values(200 + ci as u64, cs.o), [cs.o]).unwrap();
        let conv = |t: &Tensor<B>| {
            let opts = Conv2dOptions {
                stride: [cs.stride; 2],
                padding: [cs.pad; 2],
                ..Conv2dOptions::default()
            };
            t.conv2d(&w, Some(&bias), opts).unwrap()
        };
        // conv_transpose2d takes `[C_in, C_out, KH, KW]`: the same weight read with the
        // roles of the channels swapped, on an input of `o` channels.
        let wt = Tensor::from_slice(
            be,
            &values(300 + ci as u64, w_len),
            [cs.c, cs.o, cs.k[0], cs.k[1]],
        )
        .unwrap();
        let convt = |t: &Tensor<B>| {
            let opts = ConvTranspose2dOptions {
                stride: [cs.stride; 2],
                padding: [cs.pad; 2],
                ..ConvTranspose2dOptions::default()
            };
            t.conv_transpose2d(&wt, None, opts).unwrap()
        };
        let xt_shape = [cs.n, cs.c, cs.hw[0], cs.hw[1]];
        for (name, f, shape) in [
            ("conv2d", &conv as &dyn Fn(&Tensor<B>) -> Tensor<B>, x_shape),
            ("conv_transpose2d", &convt, xt_shape),
        ] {
            let (whole, items) = batch_and_items(be, shape, &x, f);
            let (y_len, g_len) = (whole.0.len() / cs.n, whole.1.len() / cs.n);
            for (i, (y, g)) in items.iter().enumerate() {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
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
