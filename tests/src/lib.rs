//! Support code for ninetrix's end-to-end tests: finding the real `ninetrix` binary the workspace
//! built, and facts about the machine the tests run on.
//!
//! The tests themselves live in `tests/tests/*.rs`; they drive the real binary (and, as the
//! orchestration lands, the real Docker Engine), never in-process shortcuts.

use std::path::PathBuf;

/// The `ninetrix` executable under test: `$NINETRIX_BIN` if set, else the one cargo built next to
/// this test binary (`target/<triple>/<profile>/ninetrix`; `cargo nextest run --workspace` builds
/// it, since the CLI crate has integration tests).
pub fn ninetrix_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("NINETRIX_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary knows its path");
    // target/<triple>/<profile>/deps/<test> → target/<triple>/<profile>/ninetrix
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in <profile>/deps");
    let bin = profile_dir.join("ninetrix");
    assert!(
        bin.exists(),
        "{} does not exist: build it with `cargo build -p ninetrix-cli` or set NINETRIX_BIN",
        bin.display()
    );
    bin
}

/// Whether this process runs as root (read from /proc, without unsafe code).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Facts read from an ELF executable's program headers.
#[derive(Debug, PartialEq, Eq)]
pub struct ElfLinkage {
    /// It names a dynamic loader (`PT_INTERP`): it needs one at run time.
    pub has_interpreter: bool,
    /// Shared libraries it needs (`DT_NEEDED` entries).
    pub needed_libraries: usize,
}

/// Reads the linkage of a 64-bit little-endian ELF file (x86_64, aarch64).
pub fn elf_linkage(bytes: &[u8]) -> Result<ElfLinkage, String> {
    let u16_at = |o: usize| -> Result<u16, String> {
        bytes
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| format!("truncated at {o}"))
    };
    let u32_at = |o: usize| -> Result<u32, String> {
        bytes
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .ok_or_else(|| format!("truncated at {o}"))
    };
    let u64_at = |o: usize| -> Result<u64, String> {
        bytes
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .ok_or_else(|| format!("truncated at {o}"))
    };
    if bytes.get(0..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    let mut linkage = ElfLinkage {
        has_interpreter: false,
        needed_libraries: 0,
    };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(ph)? {
            3 => linkage.has_interpreter = true, // PT_INTERP
            2 => {
                // PT_DYNAMIC: (tag, value) pairs until DT_NULL.
                let offset = u64_at(ph + 8)? as usize;
                let size = u64_at(ph + 32)? as usize;
                for entry in (offset..offset + size).step_by(16) {
                    match u64_at(entry)? {
                        0 => break,
                        1 => linkage.needed_libraries += 1, // DT_NEEDED
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(linkage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_program_is_recognised() {
        // The test harness itself is built by the same rules; use a system binary that is
        // certainly dynamic to check the parser can tell the difference.
        let Ok(bytes) = std::fs::read("/bin/sh").or_else(|_| std::fs::read("/usr/bin/env")) else {
            return;
        };
        let linkage = elf_linkage(&bytes).unwrap();
        assert!(
            linkage.has_interpreter && linkage.needed_libraries > 0,
            "{linkage:?}"
        );
    }

    #[test]
    fn garbage_is_not_elf() {
        assert!(elf_linkage(b"#!/bin/sh\n").is_err());
    }
}
