//! The fixed reduction tree over shards (`docs/distributed.md`, section "The reduction").
//!
//! The shards `0..S` of a step are the leaves of one binary tree that depends only on
//! `S`: a node covering `n ≥ 2` shards `lo..hi` has the left child `lo..lo+p` and the
//! right child `lo+p..hi`, where `p` is the largest power of two below `n`. A leaf's value
//! is the shard's f32 vector; an inner node's value is the element-wise f64 sum of its
//! children's values (a leaf enters the sum converted exactly to f64). The root is
//! rounded once to f32. Every node therefore has one value, fixed by the shards it
//! covers, wherever it is computed.
//!
//! Given which rank holds each shard, the tree is cut into [`Piece`]s: the highest
//! nodes whose shards all live on one rank. A rank evaluates its pieces locally; only
//! pieces travel. The owner of a chunk of the vector evaluates the nodes above the
//! pieces. A leaf piece travels as f32 (4 bytes per element), an inner piece as f64
//! (8 bytes).

use std::ops::Range;

/// A node of the reduction tree: the shards `lo..hi` (`lo < hi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// First shard covered.
    pub lo: usize,
    /// One past the last shard covered.
    pub hi: usize,
}

impl Node {
    /// The root of the tree over `shards` (> 0) leaves.
    pub fn root(shards: usize) -> Node {
        Node { lo: 0, hi: shards }
    }

    /// Number of shards covered (0 for a node with `hi <= lo`).
    pub fn shards(&self) -> usize {
        self.hi.saturating_sub(self.lo)
    }

    /// Whether the node is a single shard.
    pub fn is_leaf(&self) -> bool {
        self.shards() == 1
    }

    /// The two children of an inner node: the left one covers the largest power of two
    /// below [`Node::shards`]; `None` for a leaf.
    pub fn children(&self) -> Option<(Node, Node)> {
        let n = self.shards();
        if n < 2 {
            return None;
        }
        let p = 1usize << (n - 1).ilog2();
        let mid = self.lo + p;
        Some((
            Node {
                lo: self.lo,
                hi: mid,
            },
            Node {
                lo: mid,
                hi: self.hi,
            },
        ))
    }

    /// Bytes per vector element of this node's value on the wire: 4 for a leaf (f32),
    /// 8 for an inner node (f64).
    pub fn width(&self) -> usize {
        if self.is_leaf() {
            4
        } else {
            8
        }
    }
}

/// A maximal subtree whose shards all live on one rank: the unit of communication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The subtree's root.
    pub node: Node,
    /// The rank that holds all of its shards.
    pub rank: usize,
}

/// The rank holding every shard of `node`, if one rank holds them all.
fn single_owner(owner: &[usize], node: Node) -> Option<usize> {
    let first = owner[node.lo];
    owner[node.lo..node.hi]
        .iter()
        .all(|&r| r == first)
        .then_some(first)
}

/// The pieces of the tree over `owner.len()` shards, where shard `s` lives on rank
/// `owner[s]`, in left-to-right tree order. Empty when there are no shards.
pub fn pieces(owner: &[usize]) -> Vec<Piece> {
    fn walk(owner: &[usize], node: Node, out: &mut Vec<Piece>) {
        if let Some(rank) = single_owner(owner, node) {
            out.push(Piece { node, rank });
        } else if let Some((l, r)) = node.children() {
            walk(owner, l, out);
            walk(owner, r, out);
        }
    }
    let mut out = Vec::new();
    if !owner.is_empty() {
        walk(owner, Node::root(owner.len()), &mut out);
    }
    out
}

/// Elements evaluated together by [`evaluate_into`]'s callers: the scratch of one tree
/// level is `BLOCK` f64 values (4 KiB), so a block's whole evaluation stays in cache.
pub(crate) const BLOCK: usize = 512;

/// Scratch rows [`evaluate_into`] needs for a tree over `shards` shards: one per level,
/// `⌈log2 shards⌉`.
pub(crate) fn depth(shards: usize) -> usize {
    if shards <= 1 {
        0
    } else {
        (shards - 1).ilog2() as usize + 1
    }
}

/// Writes the value of `node` into `out`: what `fill(node, out)` writes when it returns
/// true (a node it knows), otherwise the element-wise f64 sum of the children's values,
/// left + right. `scratch` holds at least [`depth`] rows of at least `out.len()`
/// elements.
///
/// Panics when a leaf is not known (callers cover every leaf by a known node).
pub(crate) fn evaluate_into(
    node: Node,
    out: &mut [f64],
    scratch: &mut [Vec<f64>],
    fill: &mut dyn FnMut(Node, &mut [f64]) -> bool,
) {
    if fill(node, out) {
        return;
    }
    let (l, r) = node
        .children()
        .expect("every leaf of the reduction tree lies under a known node");
    evaluate_into(l, out, scratch, fill);
    let (row, deeper) = scratch
        .split_first_mut()
        .expect("one scratch row per tree level");
    let right = &mut row[..out.len()];
    evaluate_into(r, right, deeper, fill);
    for (a, b) in out.iter_mut().zip(right.iter()) {
        *a += *b;
    }
}

/// The value of `node` over the elements `range` of the leaves' f32 vectors (`leaf(s)`
/// for shard `s`), evaluated block by block; `emit(start, values)` receives the values
/// of the elements `start..start + values.len()` in increasing order.
pub(crate) fn evaluate_leaves<'a>(
    node: Node,
    range: Range<usize>,
    leaf: &dyn Fn(usize) -> &'a [f32],
    emit: &mut dyn FnMut(usize, &[f64]),
) {
    let mut scratch = vec![vec![0.0; BLOCK]; depth(node.shards())];
    let mut out = vec![0.0; BLOCK];
    let mut start = range.start;
    while start < range.end {
        let end = (start + BLOCK).min(range.end);
        let out = &mut out[..end - start];
        evaluate_into(node, out, &mut scratch, &mut |n, dst| {
            if !n.is_leaf() {
                return false;
            }
            for (d, &x) in dst.iter_mut().zip(&leaf(n.lo)[start..end]) {
                *d = f64::from(x);
            }
            true
        });
        emit(start, out);
        start = end;
    }
}

/// The elements `[i·len/parts, (i+1)·len/parts)`: chunk `i` of `len` elements cut into
/// `parts` nearly equal chunks.
pub(crate) fn chunk(len: usize, parts: usize, i: usize) -> Range<usize> {
    // u128 avoids overflow of i·len for any usize sizes.
    let at = |k: usize| ((k as u128 * len as u128) / parts as u128) as usize;
    at(i)..at(i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree sum written directly from its definition (recursion over the split at
    /// the largest power of two below n), for one element.
    fn direct(values: &[f32]) -> f64 {
        match values.len() {
            1 => f64::from(values[0]),
            n => {
                let p = 1usize << (n - 1).ilog2();
                direct(&values[..p]) + direct(&values[p..])
            }
        }
    }

    #[test]
    fn children_split_at_the_largest_power_of_two_below_n() {
        let split = |lo, hi| Node { lo, hi }.children().map(|(l, _)| l.hi);
        assert_eq!(split(0, 1), None);
        assert_eq!(split(0, 2), Some(1));
        assert_eq!(split(0, 3), Some(2));
        assert_eq!(split(0, 4), Some(2));
        assert_eq!(split(0, 5), Some(4));
        assert_eq!(split(0, 8), Some(4));
        assert_eq!(split(0, 9), Some(8));
        assert_eq!(split(4, 7), Some(6));
    }

    #[test]
    fn blocked_power_of_two_assignment_sends_one_piece_per_rank() {
        let owner: Vec<usize> = (0..8).map(|s| s / 2).collect();
        let p = pieces(&owner);
        assert_eq!(p.len(), 4);
        for (r, piece) in p.iter().enumerate() {
            assert_eq!(piece.rank, r);
            assert_eq!(
                piece.node,
                Node {
                    lo: 2 * r,
                    hi: 2 * r + 2
                }
            );
        }
        // One rank: the root is its only piece.
        assert_eq!(
            pieces(&[0; 6]),
            vec![Piece {
                node: Node::root(6),
                rank: 0
            }]
        );
    }

    #[test]
    fn pieces_cover_every_shard_once_in_order() {
        // Every assignment of 7 shards to 3 ranks.
        let s = 7;
        for code in 0..3usize.pow(s as u32) {
            let owner: Vec<usize> = (0..s).map(|i| (code / 3usize.pow(i as u32)) % 3).collect();
            let p = pieces(&owner);
            let mut next = 0;
            for piece in &p {
                assert_eq!(piece.node.lo, next, "{owner:?}");
                next = piece.node.hi;
                assert!(owner[piece.node.lo..piece.node.hi]
                    .iter()
                    .all(|&r| r == piece.rank));
            }
            assert_eq!(next, s);
        }
    }

    /// The reduction as the ranks run it (pieces evaluated where their shards live,
    /// the rest at the owner from the pieces, each piece rounded to its wire type)
    /// equals the direct tree sum, for every assignment of up to 6 shards to up to 4
    /// ranks, on values whose sums round differently in different orders.
    #[test]
    fn reduction_through_pieces_equals_the_direct_tree_sum() {
        let values = [1.0e8f32, 1.0, -1.0e8, 3.0e-3, 7.5, -2.5e7, 1.0e-7, 0.1];
        for shards in 1..=6usize {
            for ranks in 1..=4usize {
                for code in 0..ranks.pow(shards as u32) {
                    let owner: Vec<usize> = (0..shards)
                        .map(|i| (code / ranks.pow(i as u32)) % ranks)
                        .collect();
                    // Two elements per shard vector: different values in each.
                    let leaves: Vec<Vec<f32>> = (0..shards)
                        .map(|s| vec![values[s], values[(s * 3 + 1) % values.len()]])
                        .collect();
                    let pieces = pieces(&owner);
                    // Each piece's value where its shards live, rounded to its wire type.
                    let sent: Vec<Vec<f64>> = pieces
                        .iter()
                        .map(|p| {
                            let mut v = Vec::new();
                            evaluate_leaves(p.node, 0..2, &|s| &leaves[s], &mut |_, x| {
                                v.extend_from_slice(x)
                            });
                            if p.node.is_leaf() {
                                v.iter().map(|&x| f64::from(x as f32)).collect()
                            } else {
                                v
                            }
                        })
                        .collect();
                    // The owner's tree above the pieces.
                    let at_owner = |el: usize| -> f64 {
                        let mut out = [0.0];
                        let mut scratch = vec![vec![0.0; 1]; depth(shards)];
                        evaluate_into(Node::root(shards), &mut out, &mut scratch, &mut |n, dst| {
                            match pieces.iter().position(|p| p.node == n) {
                                Some(i) => {
                                    dst[0] = sent[i][el];
                                    true
                                }
                                None => false,
                            }
                        });
                        out[0]
                    };
                    for el in 0..2 {
                        let column: Vec<f32> = leaves.iter().map(|l| l[el]).collect();
                        assert_eq!(
                            at_owner(el).to_bits(),
                            direct(&column).to_bits(),
                            "shards {shards}, owners {owner:?}, element {el}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_give_the_same_values_as_one_pass() {
        // 1,300 elements (three blocks, the last partial) over 5 shards.
        let leaves: Vec<Vec<f32>> = (0..5)
            .map(|s| {
                (0..1300)
                    .map(|i| ((i * 7 + s * 13) % 29) as f32 * 0.37 - 5.0)
                    .collect()
            })
            .collect();
        let mut got = Vec::new();
        let mut starts = Vec::new();
        evaluate_leaves(Node::root(5), 3..1303 - 3, &|s| &leaves[s], &mut |at, v| {
            starts.push(at);
            got.extend_from_slice(v);
        });
        assert_eq!(starts, vec![3, 3 + BLOCK, 3 + 2 * BLOCK]);
        for (k, v) in got.iter().enumerate() {
            let column: Vec<f32> = leaves.iter().map(|l| l[k + 3]).collect();
            assert_eq!(v.to_bits(), direct(&column).to_bits());
        }
    }

    #[test]
    fn depth_counts_the_levels() {
        assert_eq!(
            (1..=9).map(depth).collect::<Vec<_>>(),
            vec![0, 1, 2, 2, 3, 3, 3, 3, 4]
        );
    }

    #[test]
    fn chunks_tile_the_range() {
        for len in [0usize, 1, 5, 100, 101] {
            for parts in 1..=5 {
                let mut next = 0;
                for i in 0..parts {
                    let c = chunk(len, parts, i);
                    assert_eq!(c.start, next);
                    assert!(c.len() <= len / parts + 1);
                    next = c.end;
                }
                assert_eq!(next, len);
            }
        }
    }
}
