//! Tests of `#[derive(Module)]`: the keys and order of the generated visitor equal a
//! hand-written one's, streams and training flags are reached, `Option`/`Vec` fields,
//! generics, tuple structs, renames, a concrete backend, `forward = "…"`, the
//! description. (What must not compile is in `derive_misuse.md`, as doctests.)

use crate::checkpoint::LoadOptions;
use crate::module::{Entry, IntBuffer, ModuleExt, TrainingFlag, Visitor};
use crate::random::RandomStream;
use crate::Module;
use crate::{Dropout, Linear, Relu, Sequential};
use exactgrad_autograd::Tensor;
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::{Backend, Philox};
use std::marker::PhantomData;

type Sr = ScalarRefBackend;
const BE: Sr = ScalarRefBackend;

/// Every entry of the tree as `name kind`, in walk order.
fn entries<B: Backend>(m: &dyn Module<B>) -> Vec<String> {
    let mut out = Vec::new();
    m.visit_entries(&mut |name, e| {
        let kind = match e {
            Entry::Parameter(_) => "parameter",
            Entry::Buffer(_) => "buffer",
            Entry::IntBuffer(_) => "int_buffer",
            Entry::Stream(_) => "stream",
            Entry::Training(_) => "training",
        };
        out.push(format!("{name} {kind}"));
    });
    out
}

fn param(b: &Sr, n: usize) -> Tensor<Sr> {
    Tensor::ones(b, [n]).unwrap().requires_grad().unwrap()
}

/// A block with every kind of field, derived.
#[derive(Module)]
struct Block<B: Backend> {
    #[module(param)]
    scale: Tensor<B>,
    #[module(param)]
    shift: Option<Tensor<B>>,
    #[module(buffer)]
    running: Tensor<B>,
    count: IntBuffer,
    linear: Linear<B>,
    dropout: Dropout,
    layers: Vec<Linear<B>>,
    extra: Option<Linear<B>>,
    #[module(rename = "dropout_rng")]
    rng: RandomStream,
    training: TrainingFlag,
    width: usize,
    #[module(skip)]
    label: String,
}

impl<B: Backend> Block<B> {
    fn forward(&self, x: &Tensor<B>) -> crate::Result<Tensor<B>> {
        let mut y = self.dropout.forward(&self.linear.forward(x)?)?;
        for l in &self.layers {
            y = l.forward(&y)?;
        }
        y.mul(&self.scale)
    }
}

/// The same block with the visitor written by hand, the reference for the keys.
struct ManualBlock<'a>(&'a Block<Sr>);

impl Module<Sr> for ManualBlock<'_> {
    fn forward(&self, x: &Tensor<Sr>) -> crate::Result<Tensor<Sr>> {
        self.0.forward(x)
    }

    fn visit(&self, v: &mut Visitor<'_, Sr>) {
        let b = self.0;
        v.parameter("scale", &b.scale);
        v.parameter("shift", b.shift.as_ref());
        v.buffer("running", &b.running);
        v.int_buffer("count", &b.count);
        v.child("linear", &b.linear);
        v.child("dropout", &b.dropout);
        for (i, l) in b.layers.iter().enumerate() {
            v.child(&format!("layers.{i}"), l);
        }
        if let Some(e) = &b.extra {
            v.child("extra", e);
        }
        v.stream("dropout_rng", &b.rng);
        v.training(&b.training);
    }
}

fn block(b: &Sr, layers: usize, extra: bool, shift: bool) -> Block<Sr> {
    let mut rng = Philox::new(3);
    Block {
        scale: param(b, 3),
        shift: shift.then(|| param(b, 3)),
        running: Tensor::zeros(b, [3]).unwrap(),
        count: IntBuffer::new(0),
        linear: Linear::new(b, 4, 3, &mut rng).unwrap(),
        dropout: Dropout::new(0.5).unwrap(),
        layers: (0..layers)
            .map(|_| Linear::new(b, 3, 3, &mut rng).unwrap())
            .collect(),
        extra: extra.then(|| Linear::new(b, 3, 3, &mut rng).unwrap()),
        rng: RandomStream::new(),
        training: TrainingFlag::new(),
        width: 3,
        label: "block".into(),
    }
}

#[test]
fn keys_and_order_equal_a_hand_written_visitor() {
    for (layers, extra, shift) in [(0, false, false), (2, true, true), (3, false, true)] {
        let m = block(&BE, layers, extra, shift);
        assert_eq!(entries::<Sr>(&m), entries::<Sr>(&ManualBlock(&m)));
        assert_eq!(
            m.state_dict().unwrap().names(),
            ManualBlock(&m).state_dict().unwrap().names()
        );
    }
    let m = block(&BE, 2, true, true);
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    // Own entries first (declaration order), then each child's, as PyTorch.
    assert_eq!(
        names,
        [
            "scale",
            "shift",
            "linear.weight",
            "linear.bias",
            "layers.0.weight",
            "layers.0.bias",
            "layers.1.weight",
            "layers.1.bias",
            "extra.weight",
            "extra.bias"
        ]
    );
    assert_eq!(m.stream_names(), ["dropout_rng", "dropout.rng"]);
    let buffers: Vec<String> = m.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(buffers, ["running"]);
    assert_eq!((m.width, m.label.as_str()), (3, "block"));
}

#[test]
fn streams_are_seeded_and_training_flags_switched() {
    let m = block(&BE, 1, true, false);
    let x = Tensor::ones(&BE, [2, 4]).unwrap();
    let err = Module::forward(&m, &x).unwrap_err().to_string();
    assert!(err.contains("seed_streams"), "{err}");
    m.seed_streams(9).unwrap();
    assert!(m.rng.is_seeded());
    let y = Module::forward(&m, &x).unwrap();
    assert_eq!(y.dims(), [2, 3]);
    assert!(m.is_training() && m.training.get() && m.dropout.is_training());
    m.eval();
    assert!(!m.training.get() && !m.dropout.is_training() && !m.is_training());
    m.train();
    assert!(m.training.get() && m.dropout.is_training());
}

#[test]
fn nested_derived_modules_load_and_save() {
    #[derive(Module)]
    struct Outer<B: Backend> {
        block: Block<B>,
        #[module(rename = "0")]
        head: Linear<B>,
    }
    impl<B: Backend> Outer<B> {
        fn forward(&self, x: &Tensor<B>) -> crate::Result<Tensor<B>> {
            self.head.forward(&self.block.forward(x)?)
        }
    }
    let outer = |seed| Outer {
        block: block(&BE, 1, false, true),
        head: Linear::new(&BE, 3, 2, &mut Philox::new(seed)).unwrap(),
    };
    let (a, b) = (outer(1), outer(2));
    let dict = a.state_dict().unwrap();
    assert!(dict.names().contains(&"block.count"));
    assert!(dict.names().contains(&"0.weight"));
    assert_ne!(b.state_dict().unwrap(), dict);
    b.load_state_dict(&dict, LoadOptions::default()).unwrap();
    assert_eq!(b.state_dict().unwrap(), dict);
    b.eval();
    let x = Tensor::ones(&BE, [1, 4]).unwrap();
    a.eval();
    assert_eq!(
        Module::forward(&a, &x).unwrap().to_vec().unwrap(),
        Module::forward(&b, &x).unwrap().to_vec().unwrap()
    );
}

/// Extra generic parameters, a where-clause, a generic child and a boxed child.
#[derive(Module)]
struct Wrapper<B, M, const N: usize>
where
    B: Backend,
{
    inner: M,
    boxed: Box<dyn Module<B>>,
    #[module(param)]
    gains: Vec<Tensor<B>>,
    sizes: [usize; N],
    marker: PhantomData<B>,
}

impl<B: Backend, M: Module<B>, const N: usize> Wrapper<B, M, N> {
    /// An autograd result: the derived `forward` converts its error.
    fn forward(&self, x: &Tensor<B>) -> exactgrad_autograd::Result<Tensor<B>> {
        x.mul(&self.gains[0])
    }
}

#[test]
fn generic_parameters_where_clauses_and_parameter_lists() {
    let mut rng = Philox::new(5);
    let w = Wrapper::<Sr, _, 2> {
        inner: Linear::new(&BE, 2, 2, &mut rng).unwrap(),
        boxed: Box::new(
            Sequential::new()
                .push(Linear::new(&BE, 2, 2, &mut rng).unwrap())
                .push(Relu),
        ),
        gains: vec![param(&BE, 2), param(&BE, 2)],
        sizes: [1, 2],
        marker: PhantomData,
    };
    let names: Vec<String> = w.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "gains.0",
            "gains.1",
            "inner.weight",
            "inner.bias",
            "boxed.0.weight",
            "boxed.0.bias"
        ]
    );
    assert_eq!(w.sizes, [1, 2]);
    let y = Module::forward(&w, &Tensor::ones(&BE, [1, 2]).unwrap()).unwrap();
    assert_eq!(y.dims(), [1, 2]);
    let err = Module::forward(&w, &Tensor::ones(&BE, [1, 3]).unwrap()).unwrap_err();
    assert!(matches!(err, crate::Error::Core(_)), "{err}");
    assert!(Module::forward(&w.inner, &Tensor::ones(&BE, [1, 2]).unwrap()).is_ok());
}

/// A tuple struct over one concrete backend, its forward under another name.
#[derive(Module)]
#[module(backend = "ScalarRefBackend", forward = "apply")]
struct Pair(
    Linear<ScalarRefBackend>,
    #[module(rename = "out")] Linear<ScalarRefBackend>,
);

impl Pair {
    fn apply(&self, x: &Tensor<Sr>) -> crate::Result<Tensor<Sr>> {
        self.1.forward(&self.0.forward(x)?.relu()?)
    }
}

/// A stateless module, generic over every backend through its generic `forward`.
#[derive(Module, Clone, Copy)]
struct Double;

impl Double {
    fn forward<B: Backend>(&self, x: &Tensor<B>) -> exactgrad_autograd::Result<Tensor<B>> {
        x.mul_scalar(2.0)
    }
}

#[test]
fn tuple_structs_concrete_backends_and_stateless_modules() {
    let mut rng = Philox::new(2);
    let p = Pair(
        Linear::new(&BE, 3, 4, &mut rng).unwrap(),
        Linear::new(&BE, 4, 1, &mut rng).unwrap(),
    );
    let names: Vec<String> = p.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "out.weight", "out.bias"]);
    let x = Tensor::ones(&BE, [2, 3]).unwrap();
    let direct = p.apply(&x).unwrap().to_vec().unwrap();
    assert_eq!(Module::forward(&p, &x).unwrap().to_vec().unwrap(), direct);

    let seq = Sequential::new().push(Double).push(Double);
    let y = seq.forward(&x).unwrap().to_vec().unwrap();
    assert_eq!(y, [4.0; 6]);
    assert!(entries::<Sr>(&Double).is_empty());
    assert_eq!(Module::<Sr>::describe(&Double), "Double()");
}

#[test]
fn describe_lists_children_as_pytorch_prints_them() {
    let m = block(&BE, 1, false, false);
    let text = Module::<Sr>::describe(&m);
    assert_eq!(
        text,
        "Block(\n  (linear): Linear(in_features=4, out_features=3, bias=true)\n  (dropout): Dropout(p=0.5)\n  (layers.0): Linear(in_features=3, out_features=3, bias=true)\n)"
    );
    // A nested description is indented.
    #[derive(Module)]
    struct Outer<B: Backend> {
        inner: Block<B>,
    }
    impl<B: Backend> Outer<B> {
        fn forward(&self, x: &Tensor<B>) -> crate::Result<Tensor<B>> {
            self.inner.forward(x)
        }
    }
    let o = Outer {
        inner: block(&BE, 0, false, false),
    };
    assert_eq!(
        Module::<Sr>::describe(&o),
        "Outer(\n  (inner): Block(\n    (linear): Linear(in_features=4, out_features=3, bias=true)\n    (dropout): Dropout(p=0.5)\n  )\n)"
    );
    // Its dropout stream is not seeded.
    assert!(Module::forward(&o, &Tensor::ones(&BE, [1, 4]).unwrap()).is_err());
}

#[test]
fn parameter_hash_is_the_hash_of_the_parameter_list() {
    let mut rng = Philox::new(3);
    let net = Sequential::new()
        .push(Linear::new(&BE, 3, 4, &mut rng).unwrap())
        .push(Relu)
        .push(Linear::new(&BE, 4, 2, &mut rng).unwrap());
    let params = net.parameters();
    let refs: Vec<&Tensor<Sr>> = params.iter().collect();
    let want = exactgrad_autograd::hash_tensors(&refs).unwrap();
    assert_eq!(net.parameter_hash().unwrap(), want);
    // Every way of passing the list gives that value.
    assert_eq!(exactgrad_autograd::hash_tensors(&params).unwrap(), want);
    assert_eq!(exactgrad_autograd::hash_tensors(&params[..1]).unwrap(), {
        exactgrad_autograd::hash_tensors(&[&params[0]]).unwrap()
    });
    // It follows the values: a changed element changes it.
    params[0].detach().fill_(0.5).unwrap();
    assert_ne!(net.parameter_hash().unwrap(), want);
}
