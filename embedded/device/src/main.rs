//! The shared training program (`tape-digits`) on a Cortex-M, with no heap: no global
//! allocator and no `alloc` crate are linked, so anything that allocates fails to link.
//!
//! Built for `thumbv7em-none-eabihf` (Cortex-M4F, QEMU `mps2-an386`) and
//! `thumbv7m-none-eabi` (Cortex-M3 without FPU, QEMU `mps2-an385`); `.cargo/config.toml`
//! runs it under `qemu-system-arm`. It prints over semihosting the lines the host binary
//! prints, then the SysTick ticks per SGD step (at the core clock), the ticks of a loop of
//! known length and from them the instructions per step (exact under QEMU's
//! `-icount shift=0`, where one instruction takes 1 ns and a tick of the boards' 25 MHz
//! clock is 40 instructions), the RAM it used (statics, and the stack's peak measured by the paint
//! cortex-m-rt puts on the free RAM at reset), and exits with status 0 if the run passes
//! `Report::check` (tape status, arena use, pinned hash), 1 otherwise or on a panic.
#![no_std]
#![no_main]

use core::panic::PanicInfo;
use core::ptr::{addr_of, read_volatile};
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use tape_digits::{train, Banner, Epoch, Observer, STEPS};

/// Iterations of the calibration loop, and instructions per iteration.
const CALIBRATION_LOOPS: u32 = 100_000;
const CALIBRATION_LOOP_INSTRUCTIONS: u32 = 8;

/// SysTick's counter is 24 bits wide and counts down.
const SYST_MASK: u32 = 0x00FF_FFFF;
/// The value cortex-m-rt's `paint-stack` writes over the free RAM.
const PAINT: u32 = 0xCCCC_CCCC;

/// Times each SGD step with SysTick and prints the epoch lines.
struct Timer {
    start: u32,
    total: u64,
    min: u32,
    max: u32,
}

impl Observer for Timer {
    fn step_begin(&mut self) {
        self.start = SYST::get_current();
    }

    fn step_end(&mut self) {
        let ticks = self.start.wrapping_sub(SYST::get_current()) & SYST_MASK;
        self.total += u64::from(ticks);
        self.min = self.min.min(ticks);
        self.max = self.max.max(ticks);
    }

    fn epoch(&mut self, epoch: &Epoch) {
        hprintln!("{}", epoch);
    }
}

/// SysTick ticks taken by a loop of exactly `CALIBRATION_LOOPS × 8` instructions: turns
/// ticks into instructions whatever the board's clock (exact under `-icount`).
fn calibration_ticks() -> u32 {
    let start = SYST::get_current();
    // SAFETY: the loop only counts its own register down to zero and changes the flags;
    // it touches no memory and no stack.
    unsafe {
        core::arch::asm!(
            "2:",
            "nop",
            "nop",
            "nop",
            "nop",
            "nop",
            "nop",
            "subs {n}, {n}, #1",
            "bne 2b",
            n = inout(reg) CALIBRATION_LOOPS => _,
            options(nomem, nostack),
        );
    }
    start.wrapping_sub(SYST::get_current()) & SYST_MASK
}

extern "C" {
    /// End of the statics in RAM (cortex-m-rt's link.x): the lowest address of the stack.
    static _stack_end: u32;
    /// The initial stack pointer: the top of RAM.
    static _stack_start: u32;
}

/// The RAM bytes below the stack (`.data`, `.bss`, `.uninit`) and the deepest the stack
/// has reached: the painted words from `_stack_end` up that are still intact.
fn ram_use() -> (usize, usize) {
    let bottom = addr_of!(_stack_end) as usize;
    let top = addr_of!(_stack_start) as usize;
    let mut untouched = bottom;
    // SAFETY: every address from `_stack_end` to `_stack_start` is RAM that belongs to
    // the stack (link.x); the words below the current stack pointer are not in use, and
    // those above it are read only, with volatile reads of aligned `u32`s.
    while untouched < top && unsafe { read_volatile(untouched as *const u32) } == PAINT {
        untouched += 4;
    }
    (bottom - 0x2000_0000, top - untouched)
}

#[entry]
fn main() -> ! {
    let mut core = cortex_m::Peripherals::take().expect("core peripherals");
    core.SYST.set_clock_source(SystClkSource::Core);
    core.SYST.set_reload(SYST_MASK);
    core.SYST.clear_current();
    core.SYST.enable_counter();

    hprintln!("{}", Banner);
    let mut timer = Timer {
        start: 0,
        total: 0,
        min: u32::MAX,
        max: 0,
    };
    let report = train(&mut timer);
    hprintln!("{}", report);
    hprintln!("{}", report.memory());
    hprintln!(
        "SysTick ticks per step (core clock): mean {}, min {}, max {}, total {} over {} steps",
        timer.total / STEPS as u64,
        timer.min,
        timer.max,
        timer.total,
        STEPS
    );
    let calibration = calibration_ticks();
    let instructions = u64::from(CALIBRATION_LOOPS * CALIBRATION_LOOP_INSTRUCTIONS);
    hprintln!(
        "calibration: {} instructions in {} ticks; about {} instructions per step",
        instructions,
        calibration,
        timer.total * instructions / u64::from(calibration.max(1)) / STEPS as u64
    );
    let (statics, stack) = ram_use();
    hprintln!(
        "RAM: {} bytes of statics, stack peak {} bytes",
        statics,
        stack
    );
    match report.check() {
        Ok(()) => {
            hprintln!("ok");
            debug::exit(debug::EXIT_SUCCESS);
        }
        Err(why) => {
            hprintln!("error: {}", why);
            debug::exit(debug::EXIT_FAILURE);
        }
    }
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}
