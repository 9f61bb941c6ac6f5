//! Standard output for every command, through one writer: a reader that went away (`ninetrix
//! trace | head -1`) ends the command quietly with status 0, like `cat` would once its reader is
//! gone, instead of the panic `println!` gives on a closed pipe. (Rust ignores SIGPIPE, so the
//! write fails with `BrokenPipe`; restoring the signal's default would exit 141 instead.)
//!
//! `up`'s progress and `run`'s streamed output do not go through here: they write best-effort,
//! so a closed pipe never stops a reconcile half-way or hides a job's exit code.

use std::io::Write as _;

/// Writes `text` to stdout and flushes; on a closed pipe the process exits 0, on any other write
/// failure it exits 1 with the error on stderr.
pub(crate) fn text(text: &str) {
    let mut out = std::io::stdout().lock();
    let result = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    if let Err(e) = result {
        drop(out);
        exit_on(&e);
    }
}

/// Writes one formatted line (see [`text`]).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let result = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    if let Err(e) = result {
        drop(out);
        exit_on(&e);
    }
}

/// Whether a write failure means the reader is gone.
pub(crate) fn is_closed(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

fn exit_on(e: &std::io::Error) -> ! {
    if is_closed(e) {
        std::process::exit(0);
    }
    eprintln!("error: cannot write to standard output: {e}");
    std::process::exit(i32::from(crate::EXIT_FAILURE));
}

/// `println!` through [`line`]: a closed stdout ends the process quietly with status 0.
macro_rules! outln {
    () => {
        $crate::output::text("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
