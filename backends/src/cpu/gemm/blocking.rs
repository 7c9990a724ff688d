//! The block sizes of the GEMM, chosen at run time from the caches of the core
//! (`docs/gemm.md` §2, "Block sizes").
//!
//! [`blocking`] is a pure function of the cache sizes, the core and the micro-tile of the
//! ISA path; [`detect`] reads the caches of this machine once (CPUID leaf 4 on Intel,
//! 0x8000001D on AMD, sysfs on Linux/AArch64) and falls back to the defaults of the core
//! when a size cannot be read. Block sizes decide only where an accumulator lives between
//! two steps of its sum (the k blocks continue the same accumulator in the same order),
//! so they change the speed and never a bit.

use super::super::Isa;
use exactgrad_core::ComputeMode;

/// The sizes in bytes of the data caches one core works in; 0 where unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Caches {
    /// Level-1 data cache of one core.
    pub l1d: usize,
    /// Level-2 cache of one core (its share when several cores share it).
    pub l2: usize,
    /// The share of the last-level cache of one core (0: none or unknown).
    pub l3: usize,
}

/// The kind of core, for the defaults of the caches that cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// Each architecture detects only its own kinds; the others serve the unit tests.
#[allow(dead_code)]
pub(crate) enum Core {
    /// AMD Zen 2 to 5: a level-2 cache private to the core, a victim level 3.
    AmdZen,
    /// Intel cores (Skylake-SP and later server cores, client cores).
    Intel,
    /// Arm Neoverse and Cortex-A cores (AArch64 servers and boards).
    ArmNeoverse,
    /// Apple M-class performance cores (a large level 1, a level 2 shared by a cluster).
    AppleM,
    /// Anything else.
    Other,
}

/// The block sizes of one micro-kernel on one core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Steps of `k` per block: a `KC × NR` panel of packed `B` is what one micro-kernel
    /// call streams, `MR × KC` of packed `A` what it reads from level 1.
    pub kc: usize,
    /// Rows of `A` per packed block (`MC × KC` stays in level 2), a multiple of `MR`.
    pub mc: usize,
    /// Columns per block of packed `B` swept by one block of `A` (`KC × NC` stays in
    /// the core's share of the last-level cache), a multiple of `NR`.
    pub nc: usize,
}

/// The micro-tile of a kernel: `MR` rows by `NR` columns of f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tile {
    /// Rows of the micro-tile.
    pub mr: usize,
    /// Columns of the micro-tile (the width of a packed panel of `B`).
    pub nr: usize,
}

/// The micro-tile the GEMM uses on `isa` in `mode` (`docs/gemm.md` §3; the kernels of
/// `gemm` are declared with these shapes, which a unit test checks).
pub(crate) fn tile(isa: Isa, mode: ComputeMode) -> Tile {
    match (isa, mode) {
        (Isa::Avx512, _) => Tile { mr: 6, nr: 64 },
        (Isa::Avx2, _) => Tile { mr: 6, nr: 16 },
        (Isa::V128, _) => Tile { mr: 6, nr: 8 },
        (Isa::Neon, ComputeMode::Exact) => Tile { mr: 6, nr: 12 },
        (Isa::Neon, ComputeMode::Fast) => Tile { mr: 8, nr: 12 },
        (Isa::Scalar, _) => Tile { mr: 4, nr: 4 },
    }
}

/// The caches assumed for a core whose sizes cannot be read.
pub(crate) fn default_caches(core: Core) -> Caches {
    const K: usize = 1024;
    match core {
        Core::AmdZen => Caches {
            l1d: 32 * K,
            l2: 1024 * K,
            l3: 4096 * K,
        },
        Core::Intel => Caches {
            l1d: 48 * K,
            l2: 1280 * K,
            l3: 1536 * K,
        },
        Core::ArmNeoverse => Caches {
            l1d: 64 * K,
            l2: 1024 * K,
            l3: 1024 * K,
        },
        Core::AppleM => Caches {
            l1d: 128 * K,
            l2: 4096 * K,
            l3: 0,
        },
        Core::Other => Caches {
            l1d: 32 * K,
            l2: 256 * K,
            l3: 1024 * K,
        },
    }
}

/// Fewest and most steps of `k` per block. Every k block stores its tile of
/// accumulators and loads it back, so a block shorter than 128 steps spends a visible
/// share of its time on that; longer than 1024 gains nothing more.
const KC_MIN: usize = 128;
const KC_MAX: usize = 1024;

/// The block sizes of `tile` on a core with `caches` (sizes of 0 take the defaults of
/// `core`). A pure function: the same arguments give the same blocks on every machine.
///
/// The rule (`docs/gemm.md` §2):
///
/// - **`KC`**: the micro-kernel reads, per step of `k`, `MR` values of the packed `A`
///   micro-panel and `NR` of the packed `B` panel. The `A` micro-panel (`MR × KC`) is
///   read once per call and the `B` panel (`KC × NR`) once per `A` micro-panel of the
///   block; both stream from level 2 at a fraction of its bandwidth. What limits `KC`
///   is level 2 holding the `B` panel beside the `A` block, and the tile's load and
///   store at each block boundary, which favours long blocks: `KC` is the largest
///   multiple of 64 with `KC × NR × 4` bytes at most an eighth of level 2 (the `B`
///   panel, kept in level 2 while the `A` micro-panels stream past it), and at most a
///   quarter of level 1 for the `A` micro-panel, clamped to 128 … 1024.
/// - **`MC`**: the packed `A` block (`MC × KC`) fills at most half of level 2, a multiple
///   of `MR`, at least `MR`.
/// - **`NC`**: the packed `B` block that one `A` block sweeps (`KC × NC`) fits in half of
///   the core's share of the last-level cache or of its level 2, whichever is larger; a
///   multiple of `NR`, at least 16 panels (each column block packs the `A` block again,
///   which must stay small beside the `2·MC·KC·NC` multiply-adds that use it).
pub(crate) fn blocking(caches: Caches, core: Core, tile: Tile) -> Blocking {
    let d = default_caches(core);
    let pick = |v: usize, dflt: usize| if v == 0 { dflt } else { v };
    let l1 = pick(caches.l1d, d.l1d);
    let l2 = pick(caches.l2, d.l2);
    let l3 = if caches.l1d == 0 && caches.l2 == 0 && caches.l3 == 0 {
        d.l3
    } else {
        caches.l3
    };
    let f = core::mem::size_of::<f32>();
    let (mr, nr) = (tile.mr.max(1), tile.nr.max(1));
    let kc_b = l2 / 8 / (nr * f);
    let kc_a = l1 / 4 / (mr * f);
    let kc = (kc_b.min(kc_a) / 64 * 64).clamp(KC_MIN, KC_MAX);
    let mc = (l2 / 2 / (kc * f) / mr * mr).max(mr);
    let last = l3.max(l2);
    let nc = (last / 2 / (kc * f) / nr * nr).max(16 * nr);
    Blocking { kc, mc, nc }
}

/// This machine's caches and core kind, read once.
pub(crate) fn machine() -> (Caches, Core) {
    if cfg!(miri) {
        // Miri cannot run CPUID (inline assembly): the defaults of an unknown core.
        let unknown = Caches {
            l1d: 0,
            l2: 0,
            l3: 0,
        };
        return (unknown, Core::Other);
    }
    static M: std::sync::OnceLock<(Caches, Core)> = std::sync::OnceLock::new();
    *M.get_or_init(detect)
}

/// The blocks of `tile` on this machine.
pub(crate) fn for_machine(tile: Tile) -> Blocking {
    let (caches, core) = machine();
    blocking(caches, core, tile)
}

/// Reads the caches and the core kind of this machine.
#[cfg(target_arch = "x86_64")]
pub(crate) fn detect() -> (Caches, Core) {
    use core::arch::x86_64::{__cpuid_count, CpuidResult};
    // CPUID exists on every x86-64 CPU; leaves above the maximum reported by leaf 0 (or
    // 0x80000000) are not queried.
    // The intrinsics are `unsafe fn` in older toolchains (the MSRV) and safe in newer
    // ones, hence the allowed `unused_unsafe`.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is available on every x86-64 CPU; it only reads identification
    // registers.
    let leaf = |l: u32, s: u32| -> CpuidResult { unsafe { __cpuid_count(l, s) } };
    let l0 = leaf(0, 0);
    let vendor: [u8; 12] = {
        let mut v = [0u8; 12];
        v[..4].copy_from_slice(&l0.ebx.to_le_bytes());
        v[4..8].copy_from_slice(&l0.edx.to_le_bytes());
        v[8..].copy_from_slice(&l0.ecx.to_le_bytes());
        v
    };
    let core = match &vendor {
        b"AuthenticAMD" | b"HygonGenuine" => Core::AmdZen,
        b"GenuineIntel" => Core::Intel,
        _ => Core::Other,
    };
    let max_ext = leaf(0x8000_0000, 0).eax;
    let (cache_leaf, max) = match core {
        Core::AmdZen => {
            let topo = max_ext >= 0x8000_0001 && leaf(0x8000_0001, 0).ecx & (1 << 22) != 0;
            if topo && max_ext >= 0x8000_001D {
                (0x8000_001D, max_ext)
            } else {
                (0, 0)
            }
        }
        _ => (4, l0.eax),
    };
    let mut subleaves = [[0u32; 3]; 8];
    let mut count = 0;
    if cache_leaf != 0 && cache_leaf <= max {
        while count < subleaves.len() {
            let r = leaf(cache_leaf, count as u32);
            if r.eax & 0x1F == 0 {
                break;
            }
            subleaves[count] = [r.eax, r.ebx, r.ecx];
            count += 1;
        }
    }
    let mut caches = caches_from_leaf4(&subleaves[..count]);
    if caches.l1d == 0 && core == Core::AmdZen && max_ext >= 0x8000_0006 {
        // The older AMD leaves: L1D in KiB, L2 in KiB, L3 in 512 KiB units (whole chip).
        caches.l1d = (leaf(0x8000_0005, 0).ecx >> 24) as usize * 1024;
        caches.l2 = (leaf(0x8000_0006, 0).ecx >> 16) as usize * 1024;
    }
    (caches, core)
}

/// The caches of the subleaves (EAX, EBX, ECX) of CPUID leaf 4 (Intel) or 0x8000001D
/// (AMD), which share one format: EAX bits 4–0 the type (1 data, 3 unified), 7–5 the level, 25–14 the
/// logical processors sharing it minus one; EBX the ways, partitions and line size
/// minus one; ECX the sets minus one. A cache shared by several logical processors
/// counts with the share of one (the level 2 of a core shared by its two hyperthreads
/// counts whole: one compute thread per core is the case the blocks are made for).
#[cfg(any(target_arch = "x86_64", test))]
pub(crate) fn caches_from_leaf4(subleaves: &[[u32; 3]]) -> Caches {
    let mut c = Caches {
        l1d: 0,
        l2: 0,
        l3: 0,
    };
    for &[eax, ebx, ecx] in subleaves {
        let kind = eax & 0x1F;
        if kind != 1 && kind != 3 {
            continue;
        }
        let level = (eax >> 5) & 0x7;
        let sharing = ((eax >> 14) & 0xFFF) as usize + 1;
        let ways = ((ebx >> 22) & 0x3FF) as usize + 1;
        let parts = ((ebx >> 12) & 0x3FF) as usize + 1;
        let line = (ebx & 0xFFF) as usize + 1;
        let sets = ecx as usize + 1;
        let size = ways * parts * line * sets;
        match level {
            1 => c.l1d = size,
            2 => c.l2 = if sharing > 2 { size / sharing } else { size },
            3 => c.l3 = size / sharing,
            _ => {}
        }
    }
    c
}

/// Reads the caches and the core kind of this machine.
#[cfg(target_arch = "aarch64")]
pub(crate) fn detect() -> (Caches, Core) {
    let core = if cfg!(target_vendor = "apple") {
        Core::AppleM
    } else {
        Core::ArmNeoverse
    };
    let mut caches = Caches {
        l1d: 0,
        l2: 0,
        l3: 0,
    };
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let Some(level) = read("level") else { break };
        let kind = read("type").unwrap_or_default();
        let size = read("size").map_or(0, |s| parse_size(s.trim()));
        let sharing = read("shared_cpu_list").map_or(1, |s| count_cpus(s.trim()));
        match (level.trim(), kind.trim()) {
            ("1", "Data") => caches.l1d = size,
            ("2", "Unified") => caches.l2 = size / sharing.max(1),
            ("3", "Unified") => caches.l3 = size / sharing.max(1),
            _ => {}
        }
    }
    (caches, core)
}

/// Reads the caches and the core kind of this machine (no probe on this architecture).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn detect() -> (Caches, Core) {
    (
        Caches {
            l1d: 0,
            l2: 0,
            l3: 0,
        },
        Core::Other,
    )
}

/// A sysfs cache size such as `32K`, `1024K` or `8M`, in bytes (0 if unreadable).
#[cfg(any(target_arch = "aarch64", test))]
fn parse_size(s: &str) -> usize {
    let (num, mul) = match s.as_bytes().last() {
        Some(b'K') => (&s[..s.len() - 1], 1024),
        Some(b'M') => (&s[..s.len() - 1], 1024 * 1024),
        Some(b'G') => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<usize>().map_or(0, |n| n * mul)
}

/// The number of CPUs in a sysfs CPU list such as `0-3,8,10-11` (at least 1).
#[cfg(any(target_arch = "aarch64", test))]
fn count_cpus(s: &str) -> usize {
    s.split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 1,
            },
            None => 1,
        })
        .sum::<usize>()
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: usize = 1024;
    const M: usize = 1024 * 1024;

    fn caches(l1d: usize, l2: usize, l3: usize) -> Caches {
        Caches { l1d, l2, l3 }
    }

    /// The classes of CPU that `docs/gemm.md` §2 lists, with the blocks the rule gives
    /// for each path (worked out by hand from the rule): the table there is this one.
    #[test]
    fn the_documented_blocks_of_each_cpu_class() {
        let avx512 = tile(Isa::Avx512, ComputeMode::Exact);
        let avx2 = tile(Isa::Avx2, ComputeMode::Exact);
        let neon_e = tile(Isa::Neon, ComputeMode::Exact);
        let neon_f = tile(Isa::Neon, ComputeMode::Fast);
        use Core::{AmdZen as Amd, AppleM as Apple, ArmNeoverse as Arm, Intel};
        // L1D, L2 and L3 share in KiB; the core; the tile; KC, MC, NC.
        let cases = [
            // AMD Zen 4: this VM (a 32 MiB L3 shared by 2 vCPUs), a server core (4 MiB)
            (32, 1024, 16384, Amd, avx512, [320, 408, 6528]),
            (32, 1024, 16384, Amd, avx2, [320, 408, 6544]),
            (32, 1024, 4096, Amd, avx512, [320, 408, 1600]),
            (32, 1024, 4096, Amd, avx2, [320, 408, 1632]),
            // AMD Zen 5
            (48, 1024, 4096, Amd, avx512, [512, 252, 1024]),
            (48, 1024, 4096, Amd, avx2, [512, 252, 1024]),
            // Intel Skylake-SP, Ice Lake-SP, Sapphire Rapids
            (32, 1024, 1408, Intel, avx512, [320, 408, 1024]),
            (32, 1024, 1408, Intel, avx2, [320, 408, 560]),
            (48, 1280, 1536, Intel, avx512, [512, 318, 1024]),
            (48, 1280, 1536, Intel, avx2, [512, 318, 384]),
            (48, 2048, 1920, Intel, avx512, [512, 510, 1024]),
            (48, 2048, 1920, Intel, avx2, [512, 510, 512]),
            // Neoverse N1 / V1, Apple M1 performance core (its 3 MiB of a 12 MiB L2)
            (64, 1024, 512, Arm, neon_e, [640, 204, 204]),
            (64, 1024, 512, Arm, neon_f, [512, 256, 252]),
            (128, 3072, 0, Apple, neon_e, [1024, 384, 384]),
            (128, 3072, 0, Apple, neon_f, [1024, 384, 384]),
        ];
        for (l1, l2, l3, core, t, [kc, mc, nc]) in cases {
            let c = caches(l1 * K, l2 * K, l3 * K);
            let want = Blocking { kc, mc, nc };
            assert_eq!(blocking(c, core, t), want, "{c:?} {core:?} {t:?}");
        }
    }

    #[test]
    fn blocks_are_whole_tiles_within_their_caches() {
        for core in [
            Core::AmdZen,
            Core::Intel,
            Core::ArmNeoverse,
            Core::AppleM,
            Core::Other,
        ] {
            for isa in Isa::ALL {
                for mode in [ComputeMode::Exact, ComputeMode::Fast] {
                    let t = tile(isa, mode);
                    for l1 in [16 * K, 32 * K, 48 * K, 64 * K, 128 * K] {
                        for l2 in [256 * K, 512 * K, M, 1280 * K, 2 * M, 16 * M] {
                            for l3 in [0, 512 * K, 2 * M, 32 * M] {
                                let blk = blocking(caches(l1, l2, l3), core, t);
                                assert!((KC_MIN..=KC_MAX).contains(&blk.kc), "{blk:?}");
                                assert_eq!(blk.mc % t.mr, 0, "{blk:?}");
                                assert_eq!(blk.nc % t.nr, 0, "{blk:?}");
                                assert!(blk.nc >= 16 * t.nr, "{blk:?}");
                                // The A block fits in half of level 2, unless it is one
                                // micro-panel.
                                assert!(blk.mc == t.mr || blk.mc * blk.kc * 4 <= l2 / 2, "{blk:?}");
                                // A larger level 2 never gives smaller blocks.
                                let big = blocking(caches(l1, 2 * l2, l3), core, t);
                                assert!(big.kc >= blk.kc && big.mc * big.kc >= blk.mc * blk.kc);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn unknown_caches_take_the_defaults_of_the_core() {
        let t = tile(Isa::Avx512, ComputeMode::Fast);
        for core in [
            Core::AmdZen,
            Core::Intel,
            Core::ArmNeoverse,
            Core::AppleM,
            Core::Other,
        ] {
            assert_eq!(
                blocking(caches(0, 0, 0), core, t),
                blocking(default_caches(core), core, t)
            );
        }
        // A known level 1 with an unknown level 2 takes the level 2 of the core.
        assert_eq!(
            blocking(caches(32 * K, 0, 0), Core::Intel, t),
            blocking(caches(32 * K, 1280 * K, 0), Core::Intel, t)
        );
    }

    #[test]
    fn cpuid_cache_leaves_are_read() {
        // CPUID 0x8000001D of an AMD EPYC (Zen 4) VM: L1D 8-way 64 sets, L1I, L2 8-way
        // 2048 sets, L3 16-way 32768 sets shared by 2 logical processors.
        let zen4 = [
            [0x0000_0121, 0x01c0_003f, 0x0000_003f],
            [0x0000_0122, 0x01c0_003f, 0x0000_003f],
            [0x0000_0143, 0x01c0_003f, 0x0000_07ff],
            [0x0000_4163, 0x03c0_003f, 0x0000_7fff],
        ];
        assert_eq!(caches_from_leaf4(&zen4), caches(32 * K, M, 16 * M));
        // CPUID 4 of a Skylake-SP core with hyperthreading: L1D and L2 shared by the two
        // threads of the core (counted whole), an 11-way 40960-set L3 shared by 64.
        let skx = [
            [0x1c00_4121, 0x01c0_003f, 0x0000_003f],
            [0x1c00_4122, 0x01c0_003f, 0x0000_003f],
            [0x1c00_4143, 0x03c0_003f, 0x0000_03ff],
            [0x1c0f_c163, 0x0280_003f, 0x0000_9fff],
        ];
        assert_eq!(
            caches_from_leaf4(&skx),
            caches(32 * K, M, 11 * 64 * 40960 / 64)
        );
        assert_eq!(caches_from_leaf4(&[]), caches(0, 0, 0));
    }

    #[test]
    fn sysfs_sizes_and_cpu_lists_are_read() {
        assert_eq!(parse_size("64K"), 64 * K);
        assert_eq!(parse_size("1024K"), M);
        assert_eq!(parse_size("8M"), 8 * M);
        assert_eq!(parse_size("512"), 512);
        assert_eq!(parse_size("x"), 0);
        assert_eq!(count_cpus("0"), 1);
        assert_eq!(count_cpus("0-3"), 4);
        assert_eq!(count_cpus("0-3,8,10-11"), 7);
        assert_eq!(count_cpus(""), 1);
    }

    #[test]
    fn this_machine_is_read() {
        let (c, core) = machine();
        let blk = blocking(
            c,
            core,
            tile(Isa::best(ComputeMode::Exact), ComputeMode::Exact),
        );
        assert!(
            blk.kc >= KC_MIN && blk.mc > 0 && blk.nc > 0,
            "{c:?} {core:?} {blk:?}"
        );
    }
}
