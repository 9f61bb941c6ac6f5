//! Terminal styling: colour only when the stream is a terminal and `NO_COLOR` is unset
//! (anstream's detection, which also honours `CLICOLOR` and `CLICOLOR_FORCE`).

use anstream::ColorChoice;
use anstyle::{AnsiColor, Style as Ansi};

/// Whether and how to colour one output stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Style {
    pub(crate) color: bool,
}

impl Style {
    /// Styling for stderr.
    pub(crate) fn stderr() -> Self {
        Self {
            color: anstream::AutoStream::choice(&std::io::stderr()) != ColorChoice::Never,
        }
    }

    /// Styling for stdout.
    pub(crate) fn stdout() -> Self {
        Self {
            color: anstream::AutoStream::choice(&std::io::stdout()) != ColorChoice::Never,
        }
    }

    fn paint(self, style: Ansi, text: &str) -> String {
        if self.color {
            format!("{style}{text}{style:#}")
        } else {
            text.to_string()
        }
    }

    pub(crate) fn error(self, text: &str) -> String {
        self.paint(AnsiColor::Red.on_default().bold(), text)
    }

    pub(crate) fn ok(self, text: &str) -> String {
        self.paint(AnsiColor::Green.on_default().bold(), text)
    }

    pub(crate) fn bold(self, text: &str) -> String {
        self.paint(Ansi::new().bold(), text)
    }

    pub(crate) fn dim(self, text: &str) -> String {
        self.paint(Ansi::new().dimmed(), text)
    }
}
