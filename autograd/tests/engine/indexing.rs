//! gather, one_hot, argmax, argmin, masked_fill and index tensors
//! (`autograd/src/ops/index.rs`): forward values against PyTorch's documented semantics
//! (the expectations are worked by hand from `torch.gather`, `F.one_hot`,
//! `torch.argmax`/`argmin` and `Tensor.masked_fill`), gradient checks on contiguous and
//! strided inputs, the Σ64 order of gather's backward, and the errors of bad input.

use exactgrad_autograd::{BackwardOptions, Error, GradCheck, Tensor, MAX_TENSOR_INDEX};
use exactgrad_backends::{ExactBackend, ScalarRefBackend};
use exactgrad_core::{Backend, Philox};

type Sr = ScalarRefBackend;
const B: Sr = ScalarRefBackend;

fn t(v: &[f32], shape: &[usize]) -> Tensor<Sr> {
    Tensor::from_slice(&B, v, shape).unwrap()
}

fn err_text<T: std::fmt::Debug>(r: exactgrad_autograd::Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn gather_forward_follows_torch_gather() {
    // torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]]))
    // = [[1, 1], [4, 3]] (PyTorch's documentation).
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = x.gather(1, &(vec![0i64, 0, 1, 0], [2, 2])).unwrap();
    assert_eq!(
        (y.dims(), y.to_vec().unwrap()),
        (&[2, 2][..], vec![1.0, 1.0, 4.0, 3.0])
    );
    // dim 0: out[i][j] = x[index[i][j]][j].
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let y = x.gather(0, &(vec![0i64, 1, 1], [1, 3])).unwrap();
    assert_eq!(y.to_vec().unwrap(), [1.0, 5.0, 6.0]);
    // An index smaller than the input in the other dimensions; a negative dim.
    let x = t(&(0..12).map(|v| v as f32).collect::<Vec<_>>(), &[3, 4]);
    let y = x.gather(-1, &(vec![3i64, 0, 2, 2], [2, 2])).unwrap();
    assert_eq!(y.to_vec().unwrap(), [3.0, 0.0, 6.0, 6.0]);
    // 3-D along the middle dimension: out[i][j][k] = x[i][index[i][j][k]][k].
    let x = t(&(0..12).map(|v| v as f32).collect::<Vec<_>>(), &[2, 3, 2]);
    let y = x.gather(1, &(vec![2i64, 0, 1, 1], [2, 1, 2])).unwrap();
    assert_eq!(y.to_vec().unwrap(), [4.0, 1.0, 8.0, 9.0]);
    // A strided input (a transpose) reads its logical elements.
    let xt = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).t().unwrap(); // [[1,4],[2,5],[3,6]]
    let y = xt.gather(1, &(vec![1i64, 0, 1], [3, 1])).unwrap();
    assert_eq!(y.to_vec().unwrap(), [4.0, 2.0, 6.0]);
    // A 1-D index from a slice, and the same index as an index tensor.
    let v = t(&[10.0, 20.0, 30.0], &[3]);
    assert_eq!(
        v.gather(0, &[2, 2, 0]).unwrap().to_vec().unwrap(),
        [30.0, 30.0, 10.0]
    );
    let it = Tensor::from_indices(&B, &[2, 2, 0], [3]).unwrap();
    assert_eq!(
        v.gather(0, &it).unwrap().to_vec().unwrap(),
        [30.0, 30.0, 10.0]
    );
}

#[test]
fn gather_backward_is_scatter_add_in_position_order() {
    // Repeated indices add up: d/dx of sum(gather(x, 1, [[0, 0, 2], [1, 1, 1]])).
    let x = t(&[1.0; 6], &[2, 3]).requires_grad().unwrap();
    let y = x.gather(1, &(vec![0i64, 0, 2, 1, 1, 1], [2, 3])).unwrap();
    y.sum().unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec().unwrap(),
        [2.0, 0.0, 1.0, 0.0, 3.0, 0.0]
    );
    // Σ64 in increasing position order, rounded once: 1e8 + 1 − 1e8 is 1, where an f32
    // accumulation would give 0.
    let x = t(&[0.0, 0.0], &[2]).requires_grad().unwrap();
    let y = x.gather(0, &[1, 1, 1]).unwrap();
    let seed = t(&[1.0e8, 1.0, -1.0e8], &[3]);
    y.backward_with(BackwardOptions::default().gradient(&seed))
        .unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), [0.0, 1.0]);
}

fn gradchecks<Be: Backend>(b: &Be) {
    let mut rng = Philox::new(5);
    let x = Tensor::rand_uniform(b, [3, 4], -1.0, 1.0, &mut rng).unwrap();
    let idx = (vec![3i64, 3, 0, 1, 2, 2, 2, 0], [2, 4]);
    GradCheck::default()
        .run("gather dim 0", std::slice::from_ref(&x), |v| {
            v[0].gather(0, &(vec![2i64, 0, 1, 2, 2, 2, 0, 1], [2, 4]))
        })
        .unwrap()
        .assert_passed();
    GradCheck::default()
        .run("gather dim 1", std::slice::from_ref(&x), |v| {
            v[0].gather(1, &idx)
        })
        .unwrap()
        .assert_passed();
    // A strided view: the transpose of the input, gathered along its rows.
    GradCheck::default()
        .run("gather of a transpose", std::slice::from_ref(&x), |v| {
            v[0].t()?
                .gather(1, &(vec![2i64, 0, 1, 1, 0, 2, 2, 2], [4, 2]))
        })
        .unwrap()
        .assert_passed();
    // masked_fill with a broadcast mask, followed by a non-linear function.
    let mask = Tensor::from_vec(b, vec![1.0, 0.0, 0.0, 1.0], [1, 4]).unwrap();
    GradCheck::default()
        .run("masked_fill", std::slice::from_ref(&x), |v| {
            v[0].masked_fill(&mask, -2.0)?.tanh()
        })
        .unwrap()
        .assert_passed();
}

#[test]
fn gather_and_masked_fill_pass_the_gradient_check() {
    gradchecks(&B);
    gradchecks(&ExactBackend::with_threads(2));
}

#[test]
fn gather_errors_name_what_is_wrong() {
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let e = err_text(x.gather(1, &(vec![0i64, 3], [2, 1])));
    assert!(
        e.contains("gather") && e.contains("index 3 at position 1") && e.contains("size 3"),
        "{e}"
    );
    let e = err_text(x.gather(1, &(vec![-1i64, 0], [2, 1])));
    assert!(e.contains("index -1"), "{e}");
    let e = err_text(x.gather(1, &[0, 1]));
    assert!(e.contains("same number of dimensions"), "{e}");
    let e = err_text(x.gather(1, &(vec![0i64; 3], [3, 1])));
    assert!(e.contains("size 3 of dimension 0"), "{e}");
    let e = err_text(x.gather(2, &(vec![0i64; 2], [2, 1])));
    assert!(e.contains("gather"), "{e}");
    let e = err_text(x.gather(1, &(vec![0i64; 3], [2, 1])));
    assert!(e.contains("3 values given for the shape [2, 1]"), "{e}");
    let e = err_text(t(&[1.0], &[]).gather(0, &[0]));
    assert!(e.contains("at least one dimension"), "{e}");
    // An index tensor must hold whole numbers.
    let half = t(&[0.5, 1.0], &[2, 1]);
    let e = err_text(x.gather(1, &half));
    assert!(e.contains("element 0 of the index tensor is 0.5"), "{e}");
}

#[test]
fn index_tensors_are_exact_up_to_two_to_the_24() {
    let v =
        Tensor::from_indices(&B, &[0, -3, MAX_TENSOR_INDEX, -MAX_TENSOR_INDEX], [2, 2]).unwrap();
    assert_eq!(v.dims(), &[2, 2]);
    assert_eq!(v.to_indices().unwrap(), [0, -3, 1 << 24, -(1 << 24)]);
    // 2^24 + 1 has no f32: refused, not rounded to 2^24.
    let e = err_text(Tensor::from_indices(&B, &[1, MAX_TENSOR_INDEX + 1], [2]));
    assert!(
        e.contains("from_indices") && e.contains("16777217 at position 1"),
        "{e}"
    );
    let e = err_text(Tensor::from_indices(&B, &[1, 2, 3], [2]));
    assert!(e.contains("from_indices"), "{e}");
    // A float tensor beyond 2^24 (2^25 is a whole f32) is refused when read as indices.
    let big = t(&[33_554_432.0], &[1]);
    let e = err_text(big.to_indices());
    assert!(e.contains("2^24"), "{e}");
    assert!(t(&[f32::NAN], &[1]).to_indices().is_err());
    assert!(t(&[f32::INFINITY], &[1]).to_indices().is_err());
}

#[test]
fn one_hot_follows_f_one_hot() {
    // F.one_hot(torch.tensor([0, 2, 1]), 3) = [[1,0,0],[0,0,1],[0,1,0]].
    let y = Tensor::one_hot(&B, &[0, 2, 1], 3).unwrap();
    assert_eq!(y.dims(), &[3, 3]);
    assert_eq!(y.to_vec().unwrap(), [1., 0., 0., 0., 0., 1., 0., 1., 0.]);
    assert!(!y.is_requires_grad());
    // Labels of shape [2, 2] give [2, 2, 2]; an index tensor gives the same.
    let y = Tensor::one_hot(&B, &(vec![1i64, 0, 0, 1], [2, 2]), 2).unwrap();
    assert_eq!(y.dims(), &[2, 2, 2]);
    assert_eq!(y.to_vec().unwrap(), [0., 1., 1., 0., 1., 0., 0., 1.]);
    let labels = Tensor::from_indices(&B, &[1, 0, 0, 1], [2, 2]).unwrap();
    assert_eq!(
        Tensor::one_hot(&B, &labels, 2).unwrap().to_vec().unwrap(),
        y.to_vec().unwrap()
    );
    // A label outside [0, C) is an InvalidLabel error naming it and its position.
    let e = Tensor::one_hot(&B, &[0, 3], 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidLabel {
                op: "one_hot",
                label: 3,
                index: 1,
                classes: 3
            }
        ),
        "{e}"
    );
    assert!(Tensor::one_hot(&B, &[-1], 3).is_err());
}

#[test]
fn argmax_and_argmin_follow_torch() {
    // torch.argmax([[1, 5, 5], [7, 2, 7]], dim=1) = [1, 0]: the first of equal maxima.
    let x = t(&[1.0, 5.0, 5.0, 7.0, 2.0, 7.0], &[2, 3]);
    let m = x.argmax(1, false).unwrap();
    assert_eq!((m.dims(), m.to_indices().unwrap()), (&[2][..], vec![1, 0]));
    let m = x.argmax(-1, true).unwrap();
    assert_eq!(m.dims(), &[2, 1]);
    // dim 0: per column.
    assert_eq!(x.argmax(0, false).unwrap().to_indices().unwrap(), [1, 0, 1]);
    assert_eq!(x.argmin(0, false).unwrap().to_indices().unwrap(), [0, 1, 0]);
    assert_eq!(x.argmin(1, false).unwrap().to_indices().unwrap(), [0, 1]);
    // NaN is taken as the extreme, the first one if several (torch.argmax/argmin).
    let n = t(&[1.0, f32::NAN, 3.0, f32::NAN], &[4]);
    assert_eq!(n.argmax(0, false).unwrap().to_indices().unwrap(), [1]);
    assert_eq!(n.argmin(0, false).unwrap().to_indices().unwrap(), [1]);
    // A strided view: the transpose's rows are the columns.
    let xt = x.t().unwrap();
    assert_eq!(
        xt.argmax(1, false).unwrap().to_indices().unwrap(),
        [1, 0, 1]
    );
    // 0-d input: index 0 with shape [].
    let s = t(&[4.0], &[]).argmax(0, false).unwrap();
    assert_eq!((s.dims(), s.to_indices().unwrap()), (&[][..], vec![0]));
    // Errors: an empty dimension, a dimension out of range.
    assert!(err_text(t(&[], &[2, 0]).argmax(1, false)).contains("argmax"));
    assert!(x.argmin(2, false).is_err());
    // No gradient flows.
    let xg = x.detach().requires_grad().unwrap();
    assert!(!xg.argmax(1, false).unwrap().is_requires_grad());
}

#[test]
fn masked_fill_follows_torch() {
    // x.masked_fill(mask, -inf) with a row mask broadcast over two rows.
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])
        .requires_grad()
        .unwrap();
    let mask = t(&[0.0, 1.0, 0.0], &[3]);
    let y = x.masked_fill(&mask, f32::NEG_INFINITY).unwrap();
    let inf = f32::NEG_INFINITY;
    assert_eq!(y.to_vec().unwrap(), [1.0, inf, 3.0, 4.0, inf, 6.0]);
    y.sum().unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec().unwrap(),
        [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    );
    // The output has the input's shape: a mask that would enlarge it is an error.
    let small = t(&[1.0, 2.0, 3.0], &[3]);
    let e = err_text(small.masked_fill(&t(&[1.0; 6], &[2, 3]), 0.0));
    assert!(
        e.contains("masked_fill") && e.contains("does not broadcast"),
        "{e}"
    );
    assert!(small.masked_fill(&t(&[1.0; 2], &[2]), 0.0).is_err());
}

#[test]
fn cross_entropy_takes_an_index_tensor_like_i64_labels() {
    let x = t(&[0.5, -1.0, 2.0, 0.0, 1.0, -0.5], &[2, 3]);
    let a = x.cross_entropy(&[2, 0], Default::default()).unwrap();
    let labels = Tensor::from_indices(&B, &[2, 0], [2]).unwrap();
    let b = x.cross_entropy(&labels, Default::default()).unwrap();
    assert_eq!(
        a.to_vec().unwrap()[0].to_bits(),
        b.to_vec().unwrap()[0].to_bits()
    );
}

#[test]
fn index_select_takes_any_one_dimensional_indices() {
    let x = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let want = x.index_select(1, &[2, 0, 2]).unwrap().to_vec().unwrap();
    assert_eq!(want, [3.0, 1.0, 3.0, 6.0, 4.0, 6.0]);
    let it = Tensor::from_indices(&B, &[2, 0, 2], [3]).unwrap();
    assert_eq!(x.index_select(1, &it).unwrap().to_vec().unwrap(), want);
    assert_eq!(
        x.index_select(1, &vec![2i64, 0, 2])
            .unwrap()
            .to_vec()
            .unwrap(),
        want
    );
    // A 2-D index is refused, naming the operator.
    let e = err_text(x.index_select(1, &(vec![0i64, 1], [1, 2])));
    assert!(e.contains("index_select") && e.contains("1-D"), "{e}");
}
