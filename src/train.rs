//! Watching a training run: a progress bar on the terminal ([`Progress`], feature
//! `progress`), and the curves of named values per epoch or step ([`History`]) written as
//! CSV and, with the feature `plots`, as an SVG plot. Both features are on by default;
//! without them the crate has no indicatif or plotters dependency and [`History`] still
//! writes CSV.
//!
//! ```
//! use exactgrad::train::History;
//!
//! # fn main() -> exactgrad::Result<()> {
//! let mut history = History::new("epoch", &["train_loss", "test_accuracy"]);
//! history.push(1, &[0.9, 0.71])?;
//! history.push(2, &[0.4, 0.93])?;
//! let dir = std::env::temp_dir();
//! let csv = dir.join(format!("history-doc-{}.csv", std::process::id()));
//! history.write_csv(&csv)?;
//! assert!(std::fs::read_to_string(&csv).unwrap().starts_with("epoch,train_loss,test_accuracy\n1,"));
//! # std::fs::remove_file(&csv).ok();
//! # Ok(())
//! # }
//! ```

use crate::nn::checkpoint::write_atomic;
use crate::{Error, Result};
use std::path::Path;

/// A progress bar over the training steps: steps/s, the loss of the last step and the
/// ETA. It draws on stderr only when stderr is a terminal (hidden otherwise, e.g. in CI
/// or when piped); [`Progress::println`] prints either way.
#[cfg(feature = "progress")]
pub struct Progress {
    bar: indicatif::ProgressBar,
}

#[cfg(feature = "progress")]
impl Progress {
    /// A bar over `total` steps, already at `done` (a resumed run); hidden when stderr
    /// is not a terminal.
    pub fn new(total: u64, done: u64) -> Self {
        use std::io::IsTerminal;
        Self::with_terminal(total, done, std::io::stderr().is_terminal())
    }

    /// [`Progress::new`] drawing on stderr if `terminal`, hidden otherwise.
    fn with_terminal(total: u64, done: u64, terminal: bool) -> Self {
        use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
        let target = if terminal {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:32.cyan/blue} {pos}/{len} steps  {per_sec}  loss {msg}  ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_position(done);
        Self { bar }
    }

    /// One step done with training loss `loss`.
    pub fn step(&self, loss: f64) {
        self.bar.set_message(format!("{loss:.4}"));
        self.bar.inc(1);
    }

    /// Steps done so far.
    pub fn position(&self) -> u64 {
        self.bar.position()
    }

    /// Whether the bar is not drawn (stderr is not a terminal).
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// Prints a line above the bar (on stdout, whether or not the bar is drawn).
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Curves of a training run: for each epoch (or step) `x`, one value of each named
/// series (training loss, test accuracy, learning rate, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    x_name: String,
    names: Vec<String>,
    rows: Vec<(usize, Vec<f64>)>,
}

impl History {
    /// Empty curves whose abscissa is named `x_name` (`epoch`, `step`) with the series
    /// `names`, in the order of the CSV columns and of the plot's panels.
    pub fn new(x_name: &str, names: &[&str]) -> Self {
        Self {
            x_name: x_name.to_string(),
            names: names.iter().map(|n| n.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds the values of every series at `x`; fails when `values` has not one value
    /// per series.
    pub fn push(&mut self, x: usize, values: &[f64]) -> Result<()> {
        if values.len() != self.names.len() {
            return Err(Error::invalid(
                "History::push",
                "values",
                format!(
                    "{} values for the {} series {:?}",
                    values.len(),
                    self.names.len(),
                    self.names
                ),
            ));
        }
        self.rows.push((x, values.to_vec()));
        Ok(())
    }

    /// The series' names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The rows: `x` and the value of each series.
    pub fn rows(&self) -> &[(usize, Vec<f64>)] {
        &self.rows
    }

    /// The points of the series `name` (`None` when there is no such series).
    pub fn series(&self, name: &str) -> Option<Vec<(usize, f64)>> {
        let k = self.names.iter().position(|n| n == name)?;
        Some(self.rows.iter().map(|(x, v)| (*x, v[k])).collect())
    }

    /// The curves as CSV text: a header `x_name,name…`, then one line per row, values
    /// printed in full (Rust's shortest round-trip form).
    pub fn to_csv(&self) -> String {
        let mut text = self.x_name.clone();
        for n in &self.names {
            text.push(',');
            text.push_str(n);
        }
        text.push('\n');
        for (x, values) in &self.rows {
            text.push_str(&x.to_string());
            for v in values {
                text.push(',');
                text.push_str(&v.to_string());
            }
            text.push('\n');
        }
        text
    }

    /// Curves read back from [`History::to_csv`]'s text (e.g. kept in a training
    /// checkpoint, so that a resumed run plots the whole run); fails, naming the line,
    /// when the header is missing or a line does not hold `x` and one number per series.
    pub fn from_csv(text: &str) -> Result<Self> {
        let op = "History::from_csv";
        let mut lines = text.lines();
        let header = lines
            .next()
            .ok_or_else(|| Error::invalid(op, "text", "no header line"))?;
        let mut columns = header.split(',');
        let x_name = columns.next().unwrap_or_default();
        let names: Vec<&str> = columns.collect();
        let mut history = History::new(x_name, &names);
        for (i, line) in lines.enumerate() {
            let bad = || Error::invalid(op, "text", format!("line {}: `{line}`", i + 2));
            let mut fields = line.split(',');
            let x = fields.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
            let values = fields
                .map(|v| v.parse::<f64>())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| bad())?;
            if values.len() != names.len() {
                return Err(bad());
            }
            history.rows.push((x, values));
        }
        Ok(history)
    }

    /// Writes [`History::to_csv`] to `path` atomically (a reader never sees half a
    /// file); fails with [`Error::Write`] naming the file.
    pub fn write_csv(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomic(path.as_ref(), self.to_csv().as_bytes())
    }

    /// Draws the curves as an SVG file at `path`: one panel per series, stacked, against
    /// `x`, under `title`. Needs no system library (plotters' SVG backend; the viewer
    /// draws the text). Fails with [`Error::Write`] naming the file.
    #[cfg(feature = "plots")]
    pub fn write_svg(&self, path: impl AsRef<Path>, title: &str) -> Result<()> {
        let path = path.as_ref();
        let svg = self.to_svg(title)?;
        write_atomic(path, svg.as_bytes())
    }

    /// The SVG text of [`History::write_svg`]; fails (an invalid argument naming the
    /// plotting error) only if plotters refuses the drawing.
    #[cfg(feature = "plots")]
    pub fn to_svg(&self, title: &str) -> Result<String> {
        use plotters::prelude::*;
        const COLORS: [RGBColor; 4] = [RED, BLUE, GREEN, MAGENTA];
        let err =
            |e: &dyn std::fmt::Display| Error::invalid("History::to_svg", "history", e.to_string());
        let panels = self.names.len().max(1);
        let height = 40 + 260 * panels as u32;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (800, height)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(&e))?;
            let root = root
                .titled(title, ("sans-serif", 22))
                .map_err(|e| err(&e))?;
            // The abscissa's range: every x (rows may come in any order), at least one
            // wide, also at usize::MAX.
            let xs = self.rows.iter().map(|r| r.0);
            let (first, last) = match (xs.clone().min(), xs.max()) {
                (Some(a), Some(b)) if a < b => (a, b),
                (Some(a), _) if a < usize::MAX => (a, a + 1),
                (Some(a), _) => (a - 1, a),
                _ => (0, 1),
            };
            for (k, (name, area)) in self
                .names
                .iter()
                .zip(root.split_evenly((panels, 1)))
                .enumerate()
            {
                let values = self
                    .rows
                    .iter()
                    .map(|(_, v)| v[k])
                    .filter(|v| v.is_finite());
                let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                    (lo.min(v), hi.max(v))
                });
                let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
                // Values near ±f64::MAX are drawn in units of 2^24, so that the range's
                // width (up to 2·f64::MAX, which is ∞) stays finite: plotters looked for
                // ticks over an infinite range forever. The labels show the values.
                let size = lo.abs().max(hi.abs());
                let unit = if size > 2f64.powi(1000) {
                    2f64.powi(24)
                } else {
                    1.0
                };
                let (lo, hi) = (lo / unit, hi / unit);
                // A margin of 5 % of the range, and never less than a billionth of the
                // values' size: a constant series of 1e300 had a range of no width.
                let pad = ((hi - lo) * 0.05)
                    .max(lo.abs().max(hi.abs()) * 1e-9)
                    .max(1e-9);
                let mut chart = ChartBuilder::on(&area)
                    .margin(12)
                    .x_label_area_size(30)
                    .y_label_area_size(60)
                    .build_cartesian_2d(first..last, (lo - pad)..(hi + pad))
                    .map_err(|e| err(&e))?;
                let scaled = |v: &f64| format!("{:e}", v * unit);
                let mut mesh = chart.configure_mesh();
                mesh.y_desc(name.as_str()).x_desc(self.x_name.as_str());
                if size >= 1e15 {
                    // Scientific labels (the default writes every digit of 1e300).
                    mesh.y_label_formatter(&scaled);
                }
                mesh.draw().map_err(|e| err(&e))?;
                chart
                    .draw_series(LineSeries::new(
                        // Non-finite values (a diverged loss) have no place on the axis:
                        // the line joins the finite ones.
                        self.rows
                            .iter()
                            .filter(|(_, v)| v[k].is_finite())
                            .map(|(x, v)| (*x, v[k] / unit)),
                        &COLORS[k % COLORS.len()],
                    ))
                    .map_err(|e| err(&e))?
                    .label(name.as_str());
            }
            root.present().map_err(|e| err(&e))?;
        }
        Ok(svg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        let mut h = History::new("epoch", &["train_loss", "test_accuracy"]);
        h.push(1, &[2.25, 0.5]).unwrap();
        h.push(2, &[1.125, 0.875]).unwrap();
        h.push(3, &[0.1, 0.9375]).unwrap();
        h
    }

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("exactgrad-train-{}-{name}", std::process::id()))
    }

    #[test]
    fn csv_holds_a_header_and_every_value() -> Result<()> {
        let h = history();
        let path = temp("curves.csv");
        h.write_csv(&path)?;
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(
            text,
            "epoch,train_loss,test_accuracy\n1,2.25,0.5\n2,1.125,0.875\n3,0.1,0.9375\n"
        );
        // Values round-trip.
        let last: Vec<f64> = text
            .lines()
            .nth(3)
            .unwrap()
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(last, [3.0, 0.1, 0.9375]);
        assert_eq!(h.series("test_accuracy").unwrap()[1], (2, 0.875));
        assert_eq!(History::from_csv(&text)?, h);
        assert!(History::from_csv("").is_err());
        let err = History::from_csv("epoch,loss\n1,0.5\n2\n").unwrap_err();
        assert!(err.to_string().contains("line 3: `2`"), "{err}");
        assert!(h.series("lr").is_none());
        Ok(())
    }

    #[test]
    fn bad_rows_and_unwritable_paths_are_errors() {
        let mut h = history();
        let err = h.push(4, &[1.0]).unwrap_err().to_string();
        assert!(err.contains("1 values for the 2 series"), "{err}");
        assert_eq!(h.rows().len(), 3);
        let dir = temp("no-such-dir").join("curves.csv");
        let err = h.write_csv(&dir).unwrap_err();
        assert!(matches!(err, Error::Write { .. }), "{err}");
        assert!(err.to_string().contains("no-such-dir"), "{err}");
    }

    #[cfg(feature = "plots")]
    #[test]
    fn svg_draws_one_line_per_series() -> Result<()> {
        let h = history();
        let path = temp("curves.svg");
        h.write_svg(&path, "digits: a title")?;
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("digits: a title"));
        assert!(svg.contains("train_loss") && svg.contains("test_accuracy"));
        // One line per series in its colour (red, blue), with a point per row.
        for colour in ["#FF0000", "#0000FF"] {
            let lines: Vec<&str> = svg
                .split("<polyline")
                .filter(|l| l.contains(&format!("stroke=\"{colour}\"")))
                .collect();
            assert_eq!(lines.len(), 1, "{colour}: {svg}");
            let points = lines[0].split("points=\"").nth(1).unwrap();
            let points = points.split('"').next().unwrap();
            assert_eq!(points.split_whitespace().count(), 3, "{points}");
        }
        // Without rows the plot still draws (empty panels).
        let empty = History::new("step", &["loss"]);
        assert!(empty.to_svg("empty")?.contains("loss"));
        let err = h
            .write_svg(temp("no-such-dir").join("c.svg"), "t")
            .unwrap_err();
        assert!(matches!(err, Error::Write { .. }), "{err}");
        Ok(())
    }

    /// Values near ±f64::MAX made the range's width ∞ and plotters looked for ticks
    /// forever; a constant series of 1e300 had a range of no width. Each plot must come
    /// back within seconds (here, in milliseconds), with every point drawn.
    #[cfg(feature = "plots")]
    #[test]
    fn svg_of_extreme_values_returns_promptly() {
        let cases: [&[(usize, f64)]; 8] = [
            &[(0, 1e308), (1, -1e308)],
            &[(0, f64::MAX), (1, -f64::MAX), (2, f64::MIN_POSITIVE)],
            &[(0, -1e308), (1, 1e308), (2, f64::NAN), (3, f64::INFINITY)],
            &[(0, 1e300), (1, 1e300)],
            &[(0, 1e300), (1, 1e300 * (1.0 + f64::EPSILON))],
            &[(0, 5e-324), (1, -5e-324)],
            &[(usize::MAX, 1.0)],
            &[(7, 1.0), (2, 3.0), (usize::MAX - 1, 2.0)],
        ];
        for (i, rows) in cases.into_iter().enumerate() {
            let mut h = History::new("step", &["loss"]);
            for &(x, v) in rows {
                h.push(x, &[v]).unwrap();
            }
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(h.to_svg("extremes"));
            });
            let svg = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("case {i}: to_svg did not return"))
                .unwrap();
            // The series' line (red): a point per finite value.
            let points: usize = svg
                .split("<polyline")
                .filter(|l| l.contains("stroke=\"#FF0000\""))
                .map(|l| {
                    let p = l.split("points=\"").nth(1).unwrap_or_default();
                    p.split('"')
                        .next()
                        .unwrap_or_default()
                        .split_whitespace()
                        .count()
                })
                .sum();
            let finite = rows.iter().filter(|(_, v)| v.is_finite()).count();
            assert_eq!(points, finite, "case {i}: {svg}");
        }
    }

    #[cfg(feature = "progress")]
    #[test]
    fn the_bar_is_hidden_off_a_terminal_and_counts_steps() {
        use std::io::IsTerminal;
        let bar = Progress::with_terminal(10, 3, false);
        assert!(bar.is_hidden());
        bar.step(0.5);
        bar.step(0.25);
        assert_eq!(bar.position(), 5);
        bar.println("a line above the bar");
        bar.finish();
        assert_eq!(
            Progress::new(4, 0).is_hidden(),
            !std::io::stderr().is_terminal()
        );
    }
}
