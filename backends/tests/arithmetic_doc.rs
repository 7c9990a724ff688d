//! The special-value tables of `docs/arithmetic.md` §3, parsed from the document and
//! checked row by row against the scalar reference, so that the contract and the code
//! that defines it cannot drift apart.

use exactgrad_backends::scalar;
use exactgrad_core::UnaryOp;

const DOC: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../docs/arithmetic.md"
));

/// The header of the element-wise table.
const UNARY_HEADER: &str = "| operator | x | forward | gradient at g = 1 |";
/// The header of the row-maximum table.
const ROW_MAX_HEADER: &str = "| row | row maximum |";

/// The body rows of the table under `header`, each split into its trimmed cells.
fn table(header: &str) -> Vec<Vec<String>> {
    let mut lines = DOC.lines().skip_while(|l| l.trim() != header);
    assert!(
        lines.next().is_some(),
        "docs/arithmetic.md has no table headed {header:?}"
    );
    let separator = lines.next().unwrap_or_default();
    assert!(separator.starts_with("|---"), "{header:?} is not a table");
    lines
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// A value as the document writes it: `+0`, `−0`, `+∞`, `−∞`, `NaN` or a decimal (the
/// minus sign `−` or `-`).
fn value(text: &str) -> f32 {
    let t = text.replace('−', "-");
    match t.as_str() {
        "NaN" => f32::NAN,
        "+∞" | "∞" => f32::INFINITY,
        "-∞" => f32::NEG_INFINITY,
        "+0" | "0" => 0.0,
        "-0" => -0.0,
        _ => t
            .parse()
            .unwrap_or_else(|e| panic!("{text:?} is not a value of the table: {e}")),
    }
}

/// An operator as the document writes it: `abs`, `pow(0.5)`, `clamp(−∞, 1)`.
fn operator(text: &str) -> UnaryOp {
    let (name, params) = match text.split_once('(') {
        Some((name, rest)) => {
            let inner = rest
                .strip_suffix(')')
                .unwrap_or_else(|| panic!("{text:?}: an unclosed parenthesis"));
            (name, inner.split(',').map(|p| value(p.trim())).collect())
        }
        None => (text, Vec::new()),
    };
    UnaryOp::from_parts(name, &params)
        .unwrap_or_else(|| panic!("{text:?} is not an element-wise operator"))
}

/// Equal bits, or both NaN (the kernels canonicalise NaN afterwards).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn special_values_of_elementwise_operators_match_the_reference() {
    let rows = table(UNARY_HEADER);
    assert_eq!(rows.len(), 22, "the element-wise table's rows as parsed");
    let mut failures = Vec::new();
    for row in &rows {
        let [op, x, forward, gradient] = row.as_slice() else {
            panic!("{row:?}: four cells expected");
        };
        let (o, xv) = (operator(op), value(x));
        let y = scalar::unary(o, xv);
        if !same(y, value(forward)) {
            failures.push(format!(
                "{op} at {x}: the reference gives {y:?}, the table {forward}"
            ));
        }
        if gradient != "—" {
            let d = scalar::unary_backward(o, xv, y, 1.0);
            if !same(d, value(gradient)) {
                failures.push(format!(
                    "the gradient of {op} at {x}: the reference gives {d:?}, the table {gradient}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "docs/arithmetic.md §3 disagrees: {failures:#?}"
    );
}

#[test]
fn softmax_row_maximum_matches_the_reference() {
    let rows = table(ROW_MAX_HEADER);
    assert_eq!(rows.len(), 6, "the row-maximum table's rows as parsed");
    for row in &rows {
        let [input, max] = row.as_slice() else {
            panic!("{row:?}: two cells expected");
        };
        let x: Vec<f32> = input.split(',').map(|v| value(v.trim())).collect();
        let m = scalar::row_max(&x);
        assert!(
            same(m, value(max)),
            "docs/arithmetic.md §3: the row maximum of [{input}] is {max} there, the reference gives {m:?}"
        );
    }
}

#[test]
fn the_parser_reads_the_document_notation() {
    assert_eq!(value("−0").to_bits(), (-0.0f32).to_bits());
    assert_eq!(value("+0").to_bits(), 0);
    assert_eq!(value("−∞"), f32::NEG_INFINITY);
    assert!(value("NaN").is_nan());
    assert_eq!(
        operator("clamp(−∞, 1)"),
        UnaryOp::Clamp(f32::NEG_INFINITY, 1.0)
    );
    assert_eq!(operator("pow(−0.5)"), UnaryOp::Pow(-0.5));
}
