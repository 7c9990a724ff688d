//! Random cases: shapes, lengths, divisors and special-value mixes, and the [`Case`]s of
//! each kernel for a [`Config`] ([`random_case`], [`kernel_cases`]).

use super::*;

/// Lane widths (in f32) of common SIMD paths; random lengths cluster around them.
pub const LANE_WIDTHS: [usize; 6] = [4, 8, 16, 32, 64, 128];

/// A random divisor of `k` (1, `k` or one between), or 1 when `k` is 0: the segment
/// length of a `matmul_acc` case.
pub fn random_divisor(rng: &mut Philox, k: usize) -> usize {
    let divisors: Vec<usize> = (1..=k).filter(|&d| k.is_multiple_of(d)).collect();
    match divisors.len() {
        0 => 1,
        len => divisors[rng.below(len as u32) as usize],
    }
}

/// A random dimension length: 0, 1, one off a lane width, or uniform in 1..=150.
pub fn random_len(rng: &mut Philox) -> usize {
    match rng.below(20) {
        0 => 0,
        1..=3 => 1,
        4..=10 => {
            let w = LANE_WIDTHS[rng.below(LANE_WIDTHS.len() as u32) as usize];
            w + rng.below(3) as usize - 1
        }
        _ => 1 + rng.below(150) as usize,
    }
}

/// A random shape of rank 0 to 4 with at most `max_elems` elements.
pub fn random_shape(rng: &mut Philox, max_elems: usize) -> Vec<usize> {
    let rank = rng.below(5) as usize;
    let mut s: Vec<usize> = (0..rank).map(|_| random_len(rng)).collect();
    shrink_to(&mut s, max_elems);
    s
}

/// Halves the largest dimension until the product is at most `max`.
fn shrink_to(s: &mut [usize], max: usize) {
    while s.iter().product::<usize>() > max.max(1) {
        let i = (0..s.len()).max_by_key(|&i| s[i]).unwrap();
        s[i] /= 2;
    }
}

/// The density of special values of a random case (most cases have some).
fn random_specials(rng: &mut Philox) -> Specials {
    Specials::ALL[rng.below(4) as usize]
}

/// A random case of `kernel`. About one case in eight is large (up to `max_elems`).
pub fn random_case(kernel: Kernel, rng: &mut Philox, config: &Config) -> Case {
    let big = rng.below(8) == 0;
    let small = (config.max_elems / 8).max(1);
    let limit = if big { config.max_elems } else { small };
    let len = |rng: &mut Philox| {
        if big {
            small + rng.below((limit - small) as u32 + 1) as usize
        } else {
            random_len(rng)
        }
    };
    let ops = UnaryOp::SAMPLES;
    let call = match kernel {
        Kernel::CopyStrided => {
            let shape = random_shape(rng, limit);
            Call::CopyStrided {
                src: View::random(&shape, rng),
            }
        }
        Kernel::Unary => Call::Unary {
            op: ops[rng.below(ops.len() as u32) as usize],
            len: len(rng),
        },
        Kernel::Digest => Call::Digest { len: len(rng) },
        Kernel::UnaryBackward => Call::UnaryBackward {
            op: ops[rng.below(ops.len() as u32) as usize],
            len: len(rng),
            y_from_forward: rng.below(2) == 0,
        },
        Kernel::Binary => {
            let shape = random_shape(rng, limit);
            Call::Binary {
                op: BINARY_OPS[rng.below(4) as usize],
                a: Operand::random(&shape, rng),
                b: Operand::random(&shape, rng),
                shape,
            }
        }
        Kernel::Select => {
            let shape = random_shape(rng, limit);
            Call::Select {
                cond: Operand::random(&shape, rng),
                a: Operand::random(&shape, rng),
                b: Operand::random(&shape, rng),
                shape,
            }
        }
        Kernel::Sum => {
            let shape = random_shape(rng, limit);
            Call::Sum {
                reduce: shape.iter().map(|_| rng.below(2) == 0).collect(),
                x: View::random(&shape, rng),
            }
        }
        Kernel::Matmul | Kernel::MatmulAcc => {
            let batch = 1 + rng.below(3) as usize;
            let mut dims = [random_len(rng), random_len(rng), random_len(rng)];
            // The reference is a plain triple loop: keep the product count moderate.
            while batch * dims.iter().product::<usize>() > 64 * limit.max(1 << 12) {
                let i = (0..3).max_by_key(|&i| dims[i]).unwrap();
                dims[i] /= 2;
            }
            Call::Matmul {
                batch,
                m: dims[0],
                k: dims[1],
                n: dims[2],
                a_trans: rng.below(2) == 0,
                b_trans: rng.below(2) == 0,
                a_bcast: rng.below(4) == 0,
                b_bcast: rng.below(4) == 0,
                offsets: (rng.below(4) as usize, rng.below(4) as usize),
                seg: if kernel == Kernel::Matmul {
                    0
                } else {
                    random_divisor(rng, dims[1])
                },
            }
        }
        Kernel::Softmax | Kernel::SoftmaxBackward => {
            let mut s = [random_len(rng), random_len(rng)];
            // (the training kernels are below)
            if big {
                s[0] = s[0].max(1) * 64;
            }
            shrink_to(&mut s, limit);
            let log = rng.below(2) == 0;
            if kernel == Kernel::Softmax {
                Call::Softmax {
                    rows: s[0],
                    cols: s[1],
                    log,
                }
            } else {
                Call::SoftmaxBackward {
                    rows: s[0],
                    cols: s[1],
                    log,
                    y_from_forward: rng.below(4) != 0,
                }
            }
        }
        Kernel::LstmCell | Kernel::LstmCellBackward | Kernel::GruCell | Kernel::GruCellBackward => {
            random_cell_call(kernel, rng, limit)
        }
        k => Call::Train(crate::conformance::training::random_call(k, rng, big)),
    };
    Case {
        call,
        seed: rng.next_u64(),
        specials: random_specials(rng),
    }
}

/// The length of the long row on which every unary operator runs once.
const LONG_UNARY_ROW: usize = 1024;

/// The cases of one kernel for `config`: `config.cases` random ones; for the unary
/// kernels also every op of [`unary_ops`] at a length around a lane width; for the sum,
/// every subset of the dimensions of each random view.
pub fn kernel_cases(kernel: Kernel, config: &Config) -> Vec<Case> {
    let mut rng = Philox::new(config.seed ^ (kernel as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut cases: Vec<Case> = (0..config.cases)
        .map(|_| random_case(kernel, &mut rng, config))
        .collect();
    match kernel {
        Kernel::Digest => {
            // Across blocks of the digest (a backend may digest them on threads), at the
            // edges of its chunks and blocks.
            let block = exactgrad_core::TraceHasher::BLOCK;
            for len in [0, 1, 31, 32, 33, block - 1, block, 2 * block + 33] {
                cases.push(Case {
                    call: Call::Digest { len },
                    seed: rng.next_u64(),
                    specials: random_specials(&mut rng),
                });
            }
        }
        Kernel::Unary | Kernel::UnaryBackward => {
            // Every operator twice: around a lane width, and on a long row, so that a
            // formula that leaves the reference on a small share of the inputs (a
            // library's `exp` differs from the polynomial on about one in seventy of
            // these values) is caught by the quick configuration too.
            for (i, &op) in UnaryOp::SAMPLES.iter().enumerate() {
                let short = LANE_WIDTHS[i % LANE_WIDTHS.len()] + i % 3 + 3 * (i % 2);
                for len in [short, LONG_UNARY_ROW + i % 7] {
                    let call = if kernel == Kernel::Unary {
                        Call::Unary { op, len }
                    } else {
                        Call::UnaryBackward {
                            op,
                            len,
                            y_from_forward: i % 2 == 0,
                        }
                    };
                    cases.push(Case {
                        call,
                        seed: rng.next_u64(),
                        specials: Specials::Some,
                    });
                }
            }
        }
        Kernel::Sum => {
            let extra: Vec<Case> = cases
                .iter()
                .flat_map(|c| {
                    let Call::Sum { x, .. } = &c.call else {
                        unreachable!()
                    };
                    let r = x.shape.len();
                    (0..1usize << r).map(move |mask| Case {
                        call: Call::Sum {
                            x: x.clone(),
                            reduce: (0..r).map(|d| mask >> d & 1 == 1).collect(),
                        },
                        ..c.clone()
                    })
                })
                .collect();
            cases = extra;
        }
        _ => {}
    }
    cases
}

// ----- recurrent cells ------------------------------------------------------------------------

/// A random call of one of the recurrent cell kernels: `hidden` around a lane width (or
/// small), `batch` from 0, the `batch × 4·hidden` gate buffer at most `limit` elements.
fn random_cell_call(kernel: Kernel, rng: &mut Philox, limit: usize) -> Call {
    let mut hidden = random_len(rng).max(1);
    let mut batch = match rng.below(8) {
        0 => 0,
        1 | 2 => 1,
        _ => 1 + rng.below(12) as usize,
    };
    while batch * 4 * hidden > limit.max(4) {
        if hidden > batch {
            hidden = (hidden / 2).max(1);
        } else {
            batch /= 2;
        }
    }
    Call::RecurrentCell {
        kernel,
        batch,
        hidden,
        bias_ih: rng.below(3) != 0,
        bias_hh: rng.below(3) != 0,
        from_forward: rng.below(4) != 0,
    }
}
