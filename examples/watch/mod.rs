//! Watching a training run: a progress bar on the terminal, and the loss and accuracy
//! curves as CSV and as an SVG plot. Shared by the examples (`#[path]`-included).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plotters::prelude::*;
use std::path::Path;

/// A progress bar over the training steps: steps/s, the loss of the last step and the
/// ETA. It draws on stderr only when stderr is a terminal (hidden otherwise, e.g. in CI
/// or when piped); [`Progress::println`] prints either way.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar over `total` steps, already at `done` (a resumed run).
    pub fn new(total: u64, done: u64) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
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

    /// Prints a line above the bar (on stdout, whether or not the bar is drawn).
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| println!("{line}"));
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// One row of the curves: an epoch's mean training loss and test accuracy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochRecord {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss over the epoch.
    pub loss: f64,
    /// Accuracy on the test images after the epoch.
    pub test_accuracy: f64,
}

/// Writes the curves as CSV: `epoch,train_loss,test_accuracy`, one line per epoch.
pub fn write_csv(path: &Path, rows: &[EpochRecord]) -> std::io::Result<()> {
    let mut text = String::from("epoch,train_loss,test_accuracy\n");
    for r in rows {
        text.push_str(&format!("{},{},{}\n", r.epoch, r.loss, r.test_accuracy));
    }
    std::fs::write(path, text)
}

/// Draws the curves as an SVG file: the training loss above, the test accuracy below,
/// against the epoch.
pub fn write_svg(path: &Path, title: &str, rows: &[EpochRecord]) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (800, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(280);
    let last = rows.last().map_or(1, |r| r.epoch.max(1));
    let max_loss = rows.iter().map(|r| r.loss).fold(0.0f64, f64::max).max(1e-9) * 1.05;
    let min_acc = rows
        .iter()
        .map(|r| r.test_accuracy)
        .fold(1.0f64, f64::min)
        .min(0.9)
        - 0.02;

    let mut loss = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(1usize..last, 0.0..max_loss)
        .map_err(|e| err(&e))?;
    loss.configure_mesh()
        .y_desc("training loss")
        .x_desc("epoch")
        .draw()
        .map_err(|e| err(&e))?;
    loss.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.epoch, r.loss)),
        &RED,
    ))
    .map_err(|e| err(&e))?;

    let mut acc = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(1usize..last, min_acc.max(0.0)..1.0)
        .map_err(|e| err(&e))?;
    acc.configure_mesh()
        .y_desc("test accuracy")
        .x_desc("epoch")
        .draw()
        .map_err(|e| err(&e))?;
    acc.draw_series(LineSeries::new(
        rows.iter().map(|r| (r.epoch, r.test_accuracy)),
        &BLUE,
    ))
    .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
