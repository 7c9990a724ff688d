//! Hostile input through the public API: sizes whose products overflow, layouts that
//! reach outside their buffers, window arguments at `usize::MAX`, allocations no machine
//! can satisfy. Every call must return an error (or the right answer) — never crash,
//! hang, abort or give wrong numbers. Each test is one reproducer of a defect that the
//! checked arithmetic of `exactgrad_core::shape` and the kernels' argument checks
//! (`exactgrad_core::check`) now refuse.

use exactgrad::backends::conformance::check_invalid_arguments;
use exactgrad::core::backend::MatmulSpec;
use exactgrad::core::{BinaryOp, Layout, Shape};
use exactgrad::nn::Linear;
use exactgrad::prelude::*;
use std::time::{Duration, Instant};

type T = Tensor<ScalarRefBackend>;
const B: ScalarRefBackend = ScalarRefBackend;

fn assert_err<V: std::fmt::Debug>(what: &str, r: Result<V, impl std::fmt::Display>) -> String {
    match r {
        Ok(v) => panic!("{what}: accepted, gave {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// Runs `f` and fails the test if it takes longer than `limit` (a hang shows up as a
/// timeout of this helper, not of the whole suite).
fn within<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let t = Instant::now();
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(_) => panic!("did not return within {limit:?} (ran {:?})", t.elapsed()),
    }
}

#[test]
fn reshape_to_a_shape_whose_count_overflows_is_an_error() {
    let x = T::ones(&B, [4]).unwrap();
    let e = assert_err("reshape", x.reshape([(1usize << 62) + 1, 4]));
    assert!(e.contains("reshape"), "{e}");
    assert_err(
        "reshape_infer",
        x.reshape_infer(&[(1isize << 62) + 1, 4, -1]),
    );
    assert_err("view", x.view([usize::MAX, 2]));
    // A product that wraps to exactly the element count is still refused.
    assert_err("reshape", x.reshape([(1usize << 63) + 2, 2]));
}

#[test]
fn from_vec_with_an_overflowing_shape_is_an_error() {
    let e = assert_err(
        "from_vec",
        T::from_vec(&B, vec![1.0; 4], [(1usize << 62) + 1, 4]),
    );
    assert!(e.contains("from_vec"), "{e}");
    assert_err(
        "from_vec",
        T::from_vec(&B, vec![1.0; 4], [1usize << 32, 1 << 32, 4]),
    );
}

#[test]
fn creation_larger_than_memory_is_an_error_not_an_abort() {
    // 2^80 elements: the count overflows.
    let e = assert_err("zeros", T::zeros(&B, [1usize << 40, 1 << 40]));
    assert!(e.contains("zeros"), "{e}");
    // 2^44 elements (64 TiB): a representable count the allocator refuses.
    let e = assert_err("zeros", T::zeros(&B, [1usize << 22, 1 << 22]));
    assert!(e.contains("allocate") || e.contains("elements"), "{e}");
    assert_err("ones", T::ones(&B, [1usize << 22, 1 << 22]));
    assert_err("full", T::full(&B, [1usize << 44], 2.0));
    let mut rng = Philox::new(1);
    assert_err("randn", T::randn(&B, [1usize << 44], 0.0, 1.0, &mut rng));
    // A 2^20 × 2^20 layer needs 4 TiB.
    let e = assert_err(
        "Linear::new",
        Linear::new(&B, 1 << 20, 1 << 20, &mut Philox::new(1)),
    );
    assert!(e.contains("allocate"), "{e}");
}

#[test]
fn expand_to_an_overflowing_count_is_an_error() {
    let one = T::ones(&B, [1]).unwrap();
    assert_err("expand", one.expand(&[1 << 40, 1 << 40]));
    // A huge but representable view is fine (it copies nothing).
    let v = one.expand(&[1 << 30, 1 << 20]).unwrap();
    assert_eq!(v.numel(), 1 << 50);
}

#[test]
fn kernels_refuse_layouts_outside_their_buffers_on_every_backend() {
    check_invalid_arguments(&ScalarRefBackend).unwrap();
    check_invalid_arguments(&FastScalarRefBackend).unwrap();
    for isa in Isa::ALL {
        for threads in [1, 3] {
            if let Ok(b) = ExactBackend::with_isa(isa, threads) {
                check_invalid_arguments(&b).unwrap();
            }
            if let Ok(b) = FastBackend::with_isa(isa, threads) {
                check_invalid_arguments(&b).unwrap();
            }
        }
    }
    // The two reproducers: a sum over a huge stride, and a binary operation whose
    // operand offset wraps around below the buffer.
    let data = vec![1.0f32; 16];
    let mut out = vec![0.0f32; 16];
    let huge = Layout {
        shape: Shape::from([2, 4]),
        strides: vec![1 << 40, 1],
        offset: 0,
    };
    for isa in Isa::ALL {
        let Ok(b) = ExactBackend::with_isa(isa, 1) else {
            continue;
        };
        assert!(b.sum(&data, &huge, &[true, false], &mut out[..4]).is_err());
        let wrapping = Layout {
            shape: Shape::from([8]),
            strides: vec![1],
            offset: usize::MAX - 3,
        };
        let plain = Layout::contiguous([8]);
        assert!(b
            .binary(
                BinaryOp::Add,
                &data,
                &wrapping,
                &data,
                &plain,
                &mut out[..8]
            )
            .is_err());
        let spec = MatmulSpec {
            batch: 1,
            m: 4,
            k: 4,
            n: 4,
            a_offset: usize::MAX,
            a_strides: [0, 4, 1],
            b_offset: 0,
            b_strides: [0, 4, 1],
        };
        assert!(b.matmul(&spec, &data, &data, &mut out).is_err());
    }
}

#[test]
fn max_pool_with_a_huge_kernel_returns_promptly() {
    within(Duration::from_secs(20), || {
        let x = T::ones(&B, [1, 1, 4, 4]).unwrap();
        // The kernel is larger than the padded input: an error, at once.
        let e = assert_err(
            "max_pool2d",
            x.max_pool2d(MaxPool2dOptions {
                stride: Some([1, 1]),
                ..MaxPool2dOptions::new([usize::MAX, 1])
            }),
        );
        assert!(e.contains("max_pool2d"), "{e}");
        // A kernel of 2^40 rows with padding 2^39 covers the input: valid (as in
        // PyTorch), and the loops only visit taps inside the input.
        let y = x
            .max_pool2d(MaxPool2dOptions {
                stride: Some([1, 1]),
                padding: [1 << 39, 0],
                ..MaxPool2dOptions::new([1 << 40, 1])
            })
            .unwrap();
        assert_eq!(y.dims(), [1, 1, 5, 4]);
        assert!(y.to_vec().unwrap().iter().all(|&v| v == 1.0));
    });
}

#[test]
fn window_arguments_at_the_limits_are_errors_not_wrong_answers() {
    let x = T::ones(&B, [1, 1, 4, 4]).unwrap();
    assert_err(
        "max_pool2d dilation",
        x.max_pool2d(MaxPool2dOptions {
            dilation: [1 << 63, 1],
            ..MaxPool2dOptions::new([2, 2])
        }),
    );
    assert_err(
        "avg_pool2d kernel",
        x.avg_pool2d(AvgPool2dOptions::new([usize::MAX, 1])),
    );
    // A kernel of usize::MAX rows with half of it as padding covers the input: PyTorch
    // defines one window, whose divisor counts the padded rows (computed without
    // overflow): the four ones of a column divided by 4 + 2·⌊MAX/2⌋ rows.
    let y = x
        .avg_pool2d(AvgPool2dOptions {
            stride: Some([usize::MAX, usize::MAX]),
            padding: [usize::MAX / 2, 0],
            ..AvgPool2dOptions::new([usize::MAX, 1])
        })
        .unwrap();
    let rows = (4u128 + 2 * (usize::MAX / 2) as u128) as f32;
    assert_eq!(y.dims(), [1, 1, 1, 1]);
    assert_eq!(y.item().unwrap().to_bits(), (4.0f32 / rows).to_bits());
    let w = T::ones(&B, [1, 1, 3, 3]).unwrap();
    let e = assert_err(
        "conv2d dilation",
        x.conv2d(
            &w,
            None,
            Conv2dOptions {
                dilation: [1 << 63, 1],
                ..Conv2dOptions::default()
            },
        ),
    );
    assert!(e.contains("conv2d"), "{e}");
    assert_err(
        "conv2d padding",
        x.conv2d(
            &w,
            None,
            Conv2dOptions {
                padding: [usize::MAX, 0],
                ..Conv2dOptions::default()
            },
        ),
    );
    assert_err(
        "conv2d stride",
        x.conv2d(
            &w,
            None,
            Conv2dOptions {
                stride: [0, 1],
                ..Conv2dOptions::default()
            },
        ),
    );
}

#[test]
fn outputs_larger_than_memory_are_errors() {
    let x = T::ones(&B, [1, 1, 4, 4]).unwrap();
    assert_err(
        "adaptive_avg_pool2d",
        x.adaptive_avg_pool2d([1 << 40, 1 << 40]),
    );
    assert_err("adaptive_avg_pool2d", x.adaptive_avg_pool2d([1 << 44, 1]));
    let w = T::ones(&B, [1, 1, 3, 3]).unwrap();
    assert_err(
        "conv2d padding",
        x.conv2d(
            &w,
            None,
            Conv2dOptions {
                padding: [1 << 40, 0],
                ..Conv2dOptions::default()
            },
        ),
    );
    assert_err("pad", x.pad(&[1 << 40, 1 << 40], 0.0));
    let e = assert_err("pad", x.pad(&[usize::MAX, 1], 0.0));
    assert!(e.contains("pad"), "{e}");
}

#[test]
fn mean_of_a_huge_broadcast_view_is_refused_before_it_overflows() {
    let one = T::ones(&B, [1]).unwrap();
    assert_err("expand", one.expand(&[1 << 40, 1 << 40]));
    assert_err("zeros", T::zeros(&B, [1usize << 40, 1 << 40]));
}

#[test]
fn a_lane_type_cannot_be_reached_from_safe_code() {
    // The SIMD lane types are private to the backends crate; their vector forms are
    // reached only through a call that checks the CPU first.
    use exactgrad::backends::cpu::vector_forms::{vector_form, Transcendental};
    let mut out = [0.0f32; 64];
    for isa in Isa::ALL {
        let supported = isa.is_supported(ComputeMode::Exact);
        assert_eq!(
            vector_form(isa, Transcendental::Exp, 0x3f80_0000, &mut out).is_ok(),
            supported
        );
    }
}

#[test]
fn slicing_an_empty_tensor_with_a_dimension_beyond_isize_max_is_exact() {
    // An empty tensor may have a dimension larger than isize::MAX (its element count is
    // 0); slice and narrow clamp their bounds against it without converting it to isize.
    let big = usize::MAX - 1;
    let x = T::zeros(&B, [0, 1]).unwrap().expand(&[0, big]).unwrap();
    assert_eq!(x.slice(1, 0, 5, 1).unwrap().dims(), [0, 5]);
    assert_eq!(x.slice(1, -3, -1, 1).unwrap().dims(), [0, 2]);
    // isize::MAX is below the size: an end, not a clamp.
    assert_eq!(x.slice(1, -3, isize::MAX, 1).unwrap().dims(), [0, 0]);
    assert_eq!(
        x.slice(1, 1, isize::MAX, 1).unwrap().dims(),
        [0, isize::MAX as usize - 1]
    );
    // Start big − 2^63, end big − 1, every second element.
    let len = (big - 1 - (big - (1 << 63))).div_ceil(2);
    assert_eq!(x.slice(1, isize::MIN, -1, 2).unwrap().dims(), [0, len]);
    assert_eq!(x.narrow(1, 0, 1 << 63).unwrap().dims(), [0, 1 << 63]);
    assert_eq!(x.narrow(1, 2, big - 2).unwrap().dims(), [0, big - 2]);
    assert_err("narrow", x.narrow(1, 2, big - 1));
    let pieces = x.chunk(2, 1).unwrap();
    let sizes: Vec<usize> = pieces.iter().map(|p| p.dims()[1]).collect();
    assert_eq!(sizes, [big / 2, big / 2]);
}

#[test]
fn normalising_an_empty_input_with_huge_dimensions_or_group_counts_returns_promptly() {
    within(Duration::from_secs(20), || {
        type Norm = Box<dyn Fn(&T) -> exactgrad::autograd::Result<T>>;
        let cases: Vec<(Vec<usize>, Norm)> = vec![
            (
                vec![1, 0],
                Box::new(|x: &T| x.group_norm(usize::MAX, GroupNormOptions::default())),
            ),
            (
                vec![3, 0, 2],
                Box::new(|x: &T| x.group_norm(1 << 62, GroupNormOptions::default())),
            ),
            (
                vec![0, 4, 1 << 40, 1 << 40],
                Box::new(|x: &T| x.group_norm(2, GroupNormOptions::default())),
            ),
            (
                vec![1 << 40, 1 << 40, 0],
                Box::new(|x: &T| x.layer_norm(&[0], LayerNormOptions::default())),
            ),
            (
                vec![0, 1 << 40, 1 << 40],
                Box::new(|x: &T| x.layer_norm(&[1 << 40, 1 << 40], LayerNormOptions::default())),
            ),
            (
                vec![1 << 60, 0, 3],
                Box::new(|x: &T| x.batch_norm(BatchNormOptions::training())),
            ),
            (
                vec![1 << 40, 0, 1 << 40],
                Box::new(|x: &T| x.batch_norm(BatchNormOptions::training())),
            ),
        ];
        for (shape, f) in cases {
            let x = T::zeros(&B, shape.clone())
                .unwrap()
                .requires_grad()
                .unwrap();
            let y = f(&x).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
            assert_eq!(y.dims(), shape);
            y.sum().unwrap().backward().unwrap();
            assert_eq!(x.grad().unwrap().dims(), shape);
        }
        // A small empty input keeps working, with affine parameters of its shape.
        let x = T::zeros(&B, [2, 0]).unwrap();
        let (w, b) = (T::ones(&B, [0]).unwrap(), T::zeros(&B, [0]).unwrap());
        let y = x
            .layer_norm(&[0], LayerNormOptions::default().affine(&w, &b))
            .unwrap();
        assert_eq!(y.dims(), [2, 0]);
    });
}

#[test]
fn a_convolution_layer_whose_fan_in_overflows_is_an_error() {
    // in_channels · KH · KW overflows usize: refused (the weight cannot exist), in debug
    // builds too, where the product used to panic.
    let mut rng = Philox::new(1);
    for (c, k) in [
        (usize::MAX, [3, 3]),
        (1, [1 << 40, 1 << 40]),
        (1 << 62, [2, 4]),
    ] {
        let e = assert_err(
            "Conv2d::new",
            exactgrad::nn::Conv2d::new(&B, Conv2dConfig::new(c, 1, k), &mut rng),
        );
        assert!(e.contains("Conv2d") || e.contains("elements"), "{e}");
    }
}

#[test]
fn a_size_one_dimension_with_a_stride_near_usize_max_is_walked_without_overflow() {
    // A step past the end leaves one element whose stride saturates at usize::MAX; the
    // element walks (copies, element-wise kernels, in-place writes, slice backward) never
    // add that stride, in debug builds too.
    fn run<Bk: Backend>(b: &Bk) {
        let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let x = Tensor::from_vec(b, v, [3, 4])
            .unwrap()
            .requires_grad()
            .unwrap();
        let row = x.slice(0, 1, 3, usize::MAX).unwrap();
        assert_eq!(row.layout().strides, [usize::MAX, 1]);
        assert_eq!(row.to_vec().unwrap(), [4.0, 5.0, 6.0, 7.0]);
        let col = row.t().unwrap().slice(1, 0, 1, usize::MAX).unwrap();
        assert_eq!(col.to_vec().unwrap(), [4.0, 5.0, 6.0, 7.0]);
        let y = row.mul(&row.t().unwrap().t().unwrap()).unwrap();
        assert_eq!(y.to_vec().unwrap(), [16.0, 25.0, 36.0, 49.0]);
        y.sum().unwrap().backward().unwrap();
        let g = x.grad().unwrap().to_vec().unwrap();
        assert_eq!(&g[4..8], [8.0, 10.0, 12.0, 14.0]);
        assert!(g[..4].iter().chain(&g[8..]).all(|&v| v == 0.0));
        let z = Tensor::zeros(b, [3, 4]).unwrap();
        z.slice(0, 2, 3, usize::MAX).unwrap().fill_(1.0).unwrap();
        assert_eq!(z.sum().unwrap().item().unwrap(), 4.0);
    }
    // The kernels themselves, given such layouts directly.
    fn kernels<Bk: Backend<Views = exactgrad::core::HostViews>>(b: &Bk) {
        let data: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let row = Layout {
            shape: Shape::from([1, 4]),
            strides: vec![usize::MAX, 1],
            offset: 4,
        };
        let col = Layout {
            shape: Shape::from([4, 1]),
            strides: vec![1, usize::MAX],
            offset: 0,
        };
        let mut out = [0.0f32; 4];
        b.copy_strided(&data, &row, &mut out).unwrap();
        assert_eq!(out, [4.0, 5.0, 6.0, 7.0]);
        let plain = Layout::contiguous([1, 4]);
        b.binary(BinaryOp::Add, &data, &row, &data, &plain, &mut out)
            .unwrap();
        assert_eq!(out, [4.0, 6.0, 8.0, 10.0]);
        let ones = [1.0f32; 4];
        b.select(&ones, &plain, &data, &row, &data, &plain, &mut out)
            .unwrap();
        assert_eq!(out, [4.0, 5.0, 6.0, 7.0]);
        b.sum(&data, &col, &[true, false], &mut out[..1]).unwrap();
        assert_eq!(out[0], 6.0);
        b.sum(&data, &col, &[false, true], &mut out).unwrap();
        assert_eq!(out, [0.0, 1.0, 2.0, 3.0]);
    }
    run(&ScalarRefBackend);
    kernels(&ScalarRefBackend);
    for isa in Isa::ALL {
        if let Ok(b) = ExactBackend::with_isa(isa, 1) {
            run(&b);
            kernels(&b);
        }
    }
}

#[test]
fn average_pooling_to_an_empty_output_with_a_huge_dimension_allocates_no_windows() {
    // An empty output (a zero output size or no planes) has no windows, however large
    // its other dimension: the CPU backends return it as ScalarRef does.
    let huge = 1usize << 56;
    for b in [ExactBackend::new(), ExactBackend::with_threads(3)] {
        let x = Tensor::ones(&b, [1, 1, 1]).unwrap();
        let y = x.adaptive_avg_pool2d([huge, 0]).unwrap();
        assert_eq!(y.dims(), [1, huge, 0]);
        let x = Tensor::zeros(&b, [0, 1, 1, 1])
            .unwrap()
            .requires_grad()
            .unwrap();
        let y = x.adaptive_avg_pool2d([huge, usize::MAX]).unwrap();
        assert_eq!(y.dims(), [0, 1, huge, usize::MAX]);
        y.sum().unwrap().backward().unwrap();
        assert_eq!(x.grad().unwrap().dims(), [0, 1, 1, 1]);
    }
}

#[test]
fn ctc_loss_whose_recursion_table_no_memory_holds_is_an_error() {
    // 2^22 steps and 2^22 labels: the α table of `T · (2S + 1)` f64 needs 2^48 bytes,
    // more than any 64-bit address space holds (the inputs themselves take 100 MiB).
    let t = 1usize << 22;
    let x = T::zeros(&B, [t, 1, 2]).unwrap().requires_grad().unwrap();
    let labels = vec![1i64; t];
    let batch = CtcBatch {
        targets: CtcTargets::Concatenated(&labels),
        input_lengths: &[t],
        target_lengths: &[t],
    };
    let e = assert_err("ctc_loss", x.ctc_loss(batch, CtcLossOptions::default()));
    assert!(e.contains("ctc_loss") && e.contains("allocate"), "{e}");
    // The same entry with a short input is computed (an impossible alignment: +∞).
    let batch = CtcBatch {
        input_lengths: &[3],
        ..batch
    };
    let loss = x.ctc_loss(batch, CtcLossOptions::default()).unwrap();
    assert_eq!(loss.item().unwrap(), f32::INFINITY);
}

#[test]
fn interpolate_to_a_size_whose_index_tables_no_memory_holds_is_an_error() {
    let x = T::ones(&B, [1, 1, 2, 2]).unwrap();
    let huge = 1usize << 45;
    for options in [
        InterpolateOptions::default(),
        InterpolateOptions::bilinear(),
        InterpolateOptions {
            align_corners: true,
            ..InterpolateOptions::bilinear()
        },
    ] {
        for size in [
            InterpolateSize::Size([huge, 1]),
            InterpolateSize::Size([1, huge]),
            InterpolateSize::ScaleFactor([1.0, (1u64 << 44) as f64]),
        ] {
            let e = assert_err("interpolate", x.interpolate(size, options));
            assert!(e.contains("interpolate"), "{size:?}: {e}");
        }
        // An empty batch builds no table: any representable size is fine.
        let empty = T::zeros(&B, [0, 1, 2, 2]).unwrap().requires_grad().unwrap();
        let y = empty
            .interpolate(InterpolateSize::Size([huge, 3]), options)
            .unwrap();
        assert_eq!(y.dims(), [0, 1, huge, 3]);
        y.sum().unwrap().backward().unwrap();
        assert_eq!(empty.grad().unwrap().dims(), [0, 1, 2, 2]);
    }
}

/// Set in the child process of the next test.
const CHILD: &str = "EXACTGRAD_NO_CRASH_THREAD_CHILD";

#[test]
fn compute_threads_the_system_refuses_leave_a_backend_on_fewer_threads() {
    if std::env::var_os(CHILD).is_some() {
        // Every thread of this process asks for a stack of 2^50 bytes, which no 64-bit
        // address space holds, so the system refuses each one: the backend runs on the
        // calling thread, with the same bits.
        for threads in [2, 100_000, usize::MAX] {
            let b = ExactBackend::with_threads(threads);
            assert_eq!(b.threads(), 1, "{threads} threads asked");
            let x = Tensor::randn(&b, [300, 200], 0.0, 1.0, &mut Philox::new(5)).unwrap();
            let y = x.matmul(&x.t().unwrap()).unwrap().exp().unwrap();
            let xr = T::randn(&B, [300, 200], 0.0, 1.0, &mut Philox::new(5)).unwrap();
            let yr = xr.matmul(&xr.t().unwrap()).unwrap().exp().unwrap();
            let same = y
                .to_vec()
                .unwrap()
                .iter()
                .zip(yr.to_vec().unwrap())
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{threads} threads asked: bits differ from ScalarRef");
        }
        println!("child: every backend ran");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            &super::test_name(
                module_path!(),
                "compute_threads_the_system_refuses_leave_a_backend_on_fewer_threads",
            ),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("RUST_MIN_STACK", (1u64 << 50).to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child: every backend ran"),
        "child failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `with_threads(100000)` and `with_threads(usize::MAX)` started helpers until the system
/// refused one (or a new thread could not map its signal stack and the process aborted);
/// now at most `ComputeContext::max_threads()` start, and the backend computes the same
/// bits.
#[test]
fn compute_threads_far_beyond_the_machine_are_capped() {
    use exactgrad::backends::cpu::ComputeContext;
    let cap = ComputeContext::max_threads();
    let xr = T::randn(&B, [40, 70], 0.0, 1.0, &mut Philox::new(3)).unwrap();
    let want = xr.matmul(&xr.t().unwrap()).unwrap().to_vec().unwrap();
    for threads in [100_000, usize::MAX] {
        let b = ExactBackend::with_threads(threads);
        assert!(
            (1..=cap).contains(&b.threads()),
            "{threads}: {}",
            b.threads()
        );
        let x = Tensor::randn(&b, [40, 70], 0.0, 1.0, &mut Philox::new(3)).unwrap();
        let got = x.matmul(&x.t().unwrap()).unwrap().to_vec().unwrap();
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, w)| a.to_bits() == w.to_bits()));
        assert!(FastBackend::with_threads(threads).threads() <= cap);
    }
}

/// A product of operands broadcast along k (stride 0) fits any buffer, whatever k: with
/// k = 2^60 the CPU driver divided by `16 · 2^60`, which wraps to 0 (a panic), and
/// `Backend::matmul` with k = 2^63 likewise. Every backend now refuses a reduction beyond
/// `MatmulSpec::MAX_K` (and an operand beyond MAX_ELEMENTS) before any work.
#[test]
fn products_over_a_broadcast_reduction_beyond_any_buffer_are_errors() {
    fn tensors<Bk: Backend>(b: &Bk) {
        let k = 1usize << 60;
        let a = Tensor::ones(b, [1, 1]).unwrap().expand(&[1, k]).unwrap();
        let c = Tensor::ones(b, [1, 1]).unwrap().expand(&[k, 1]).unwrap();
        let e = assert_err("matmul", a.matmul(&c));
        assert!(e.contains("matmul") && e.contains("k"), "{}: {e}", b.name());
        let c3 = Tensor::ones(b, [1, 1, 1])
            .unwrap()
            .expand(&[1, k, 1])
            .unwrap();
        let a3 = Tensor::ones(b, [1, 1, 1])
            .unwrap()
            .expand(&[1, 1, k])
            .unwrap();
        assert_err("bmm", a3.matmul(&c3));
        // Through the kernel itself, k = 2^63.
        let spec = MatmulSpec {
            batch: 1,
            m: 1,
            k: 1 << 63,
            n: 1,
            a_offset: 0,
            a_strides: [0, 0, 0],
            b_offset: 0,
            b_strides: [0, 0, 0],
        };
        let x = b.storage_from_vec(vec![1.0]).unwrap();
        let mut out = b.zeros(1).unwrap();
        let e = assert_err(
            "Backend::matmul",
            b.matmul(&spec, Bk::view(&x), Bk::view(&x), Bk::view_mut(&mut out)),
        );
        assert!(e.contains("matmul"), "{e}");
    }
    for isa in Isa::ALL {
        for threads in [1, 2] {
            if let Ok(b) = ExactBackend::with_isa(isa, threads) {
                within(Duration::from_secs(20), move || tensors(&b));
            }
            if let Ok(b) = FastBackend::with_isa(isa, threads) {
                within(Duration::from_secs(20), move || tensors(&b));
            }
        }
    }
    within(Duration::from_secs(20), || tensors(&B));
}

#[test]
fn a_data_set_whose_size_product_wraps_is_an_error() {
    use exactgrad::nn::data::ClassificationData;
    // 2 rows × 2^63 features wraps to 0 values: refused, not accepted empty.
    let e = assert_err(
        "ClassificationData::new",
        ClassificationData::new(vec![], vec![0, 1], 1 << 63, 2),
    );
    assert!(
        e.contains("ClassificationData::new") && e.contains("features"),
        "{e}"
    );
    let data = ClassificationData::new(vec![1.0, 2.0, 3.0, 4.0], vec![0, 1], 2, 2).unwrap();
    assert_eq!(data.row(1), Some(&[3.0, 4.0][..]));
    // 2^63 · 2 wraps to 0: no row, not row 0.
    assert_eq!(data.row(1 << 63), None);
    assert_eq!(data.row(usize::MAX), None);
    let empty = ClassificationData::new(vec![], vec![0, 1], 0, 2).unwrap();
    assert_eq!(empty.row(1), Some(&[][..]));
    assert_eq!(empty.row(2), None);
    // 2^22 copies of a row of 2^24 features need 2^48 bytes: an error, not an abort.
    let wide = ClassificationData::new(vec![0.5; 1 << 24], vec![0], 1 << 24, 1).unwrap();
    let e = assert_err("ClassificationData::subset", wide.subset(&vec![0; 1 << 22]));
    assert!(e.contains("ClassificationData::subset"), "{e}");
}

#[test]
fn operators_on_an_empty_batch_whose_items_overflow_return_empty_results() {
    // An empty batch may have items whose size alone overflows usize (its element count
    // is 0): attention, convolution and pooling form no product of those sizes (in
    // debug builds they used to panic) and give empty results and gradients.
    fn run<Bk: Backend>(b: &Bk) {
        let h = 1usize << 40;
        let leaf = |d: &[usize]| {
            Tensor::zeros(b, d.to_vec())
                .unwrap()
                .requires_grad()
                .unwrap()
        };
        let backward = |y: &Tensor<Bk>| y.sum().unwrap().backward().unwrap();
        for (qd, kd, vd) in [
            ([0, h, h], [0, 1, h], [0, 1, 1]),
            ([0, 1, h], [0, h, h], [0, h, h]),
        ] {
            let (q, k, v) = (leaf(&qd), leaf(&kd), leaf(&vd));
            let y = q
                .scaled_dot_product_attention(&k, &v, AttentionOptions::default())
                .unwrap();
            assert_eq!(y.dims(), [0, qd[1], vd[2]]);
            backward(&y);
            assert_eq!(q.grad().unwrap().dims(), qd);
            assert_eq!(k.grad().unwrap().dims(), kd);
            assert_eq!(v.grad().unwrap().dims(), vd);
        }
        let x = leaf(&[0, 2, 1 << 62, 1 << 62]);
        let w = leaf(&[1, 2, 1, 1]);
        let y = x
            .conv2d(
                &w,
                None,
                Conv2dOptions {
                    stride: [1 << 62, 1 << 62],
                    ..Conv2dOptions::default()
                },
            )
            .unwrap();
        assert_eq!(y.dims(), [0, 1, 1, 1]);
        backward(&y);
        assert_eq!(x.grad().unwrap().dims(), [0, 2, 1 << 62, 1 << 62]);
        assert_eq!(w.grad().unwrap().to_vec().unwrap(), [0.0, 0.0]);
        let x = leaf(&[0, h, h, h]);
        let y = x.max_pool2d(MaxPool2dOptions::new([1, 1])).unwrap();
        assert_eq!(y.dims(), [0, h, h, h]);
        let z = x.avg_pool2d(AvgPool2dOptions::new([1, 1])).unwrap();
        assert_eq!(z.dims(), [0, h, h, h]);
        backward(&y.add(&z).unwrap());
        assert_eq!(x.grad().unwrap().dims(), [0, h, h, h]);
    }
    run(&ScalarRefBackend);
    for threads in [1, 2] {
        run(&ExactBackend::with_threads(threads));
    }
}

#[test]
fn recurrent_layers_whose_gate_or_step_counts_overflow_are_errors() {
    let x = T::zeros(&B, [2, 1, 3]).unwrap();
    // An empty weight_hh of hidden size 2^62: 4 · 2^62 wraps to 0 rows, which used to
    // accept this weight as a valid [4·H, H] (or panic in debug builds).
    for (h, gru) in [(1usize << 62, false), (usize::MAX, true)] {
        let (wi, wh) = (T::zeros(&B, [0, 3]).unwrap(), T::zeros(&B, [0, h]).unwrap());
        let w = [RnnWeights {
            weight_ih: &wi,
            weight_hh: &wh,
            bias_ih: None,
            bias_hh: None,
        }];
        let e = if gru {
            assert_err(
                "gru",
                x.gru(&w, GruOptions::default())
                    .map(|o| o.h_n.dims().to_vec()),
            )
        } else {
            assert_err(
                "lstm",
                x.lstm(&w, LstmOptions::default())
                    .map(|o| o.h_n.dims().to_vec()),
            )
        };
        assert!(e.contains("weight_hh") && e.contains("overflow"), "{e}");
    }
    // No input features, 2^44 steps of a batch of 2^20: the gates of every step
    // (T · B · 4·H) cannot exist; T · B used to wrap.
    let x = T::zeros(&B, [1 << 44, 1 << 20, 0]).unwrap();
    let (wi, wh) = (T::zeros(&B, [4, 0]).unwrap(), T::zeros(&B, [4, 1]).unwrap());
    let w = [RnnWeights {
        weight_ih: &wi,
        weight_hh: &wh,
        bias_ih: None,
        bias_hh: None,
    }];
    let e = assert_err(
        "lstm",
        x.lstm(&w, LstmOptions::default())
            .map(|o| o.h_n.dims().to_vec()),
    );
    assert!(e.contains("lstm"), "{e}");
}

#[test]
fn a_gradient_check_of_a_huge_broadcast_output_is_an_error() {
    // f returns a view of 2^60 elements: the check's weight tensor cannot be allocated.
    let x = T::ones(&B, [1]).unwrap();
    let e = assert_err(
        "gradcheck",
        GradCheck::default().run("huge", &[x], |v| v[0].expand(&[1 << 40, 1 << 20])),
    );
    assert!(e.contains("gradcheck") && e.contains("allocate"), "{e}");
}
