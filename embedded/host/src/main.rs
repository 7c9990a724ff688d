//! Runs the shared training program (`tape-digits`) on the host and prints the lines the
//! device prints over semihosting. Exits with status 1 unless the run passes
//! `Report::check` (tape status, arena use, the pinned parameter hash).

use std::process::ExitCode;
use tape_digits::{train, Banner, Epoch, Observer};

struct Print;

impl Observer for Print {
    fn epoch(&mut self, epoch: &Epoch) {
        println!("{epoch}");
    }
}

fn main() -> ExitCode {
    println!("{Banner}");
    let report = train(&mut Print);
    println!("{report}");
    println!("{}", report.memory());
    match report.check() {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(why) => {
            println!("error: {why}");
            ExitCode::FAILURE
        }
    }
}
