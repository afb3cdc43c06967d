//! Where `metrics get --watch` draws: a terminal, redrawn in place, or
//! anything else (a pipe, a file), written block after block.
//!
//! Owns: the choice between the two, the terminal's size, and the escape
//! codes (cursor home, clear to the end of a line and of the screen, hide
//! and show the cursor). Must never: emit an escape code when stdout is not
//! a terminal, or clear the whole screen after the first frame (a frame
//! overwrites the one before, line by line, so nothing flickers).

use std::io::IsTerminal as _;

/// Hide the cursor, then clear the screen once.
const START: &str = "\x1b[?25l\x1b[2J";
/// Cursor to the top left corner.
const HOME: &str = "\x1b[H";
/// Clear from the cursor to the end of the line: the rest of a longer
/// line of the frame before.
const CLEAR_LINE: &str = "\x1b[K";
/// Clear from the cursor to the end of the screen: the lines of a longer
/// frame before.
const CLEAR_BELOW: &str = "\x1b[J";
/// Show the cursor again.
const RESTORE: &str = "\x1b[?25h";

/// How stdout shows a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Screen {
    /// A terminal: each frame replaces the one before.
    Terminal,
    /// A pipe, a file or a dumb terminal: frames follow one another,
    /// separated by a blank line.
    Plain,
}

impl Screen {
    /// What stdout is: a terminal unless `TERM` says it cannot move the
    /// cursor.
    pub(super) fn of_stdout() -> Self {
        let dumb = std::env::var_os("TERM").is_some_and(|term| term == "dumb");
        if std::io::stdout().is_terminal() && !dumb {
            Self::Terminal
        } else {
            Self::Plain
        }
    }

    /// The terminal's (columns, rows), read anew for each frame so that a
    /// resize is followed; `None` off a terminal.
    pub(super) fn size(self) -> Option<(usize, usize)> {
        match self {
            Self::Terminal => terminal_size::terminal_size_of(std::io::stdout())
                .map(|(width, height)| (usize::from(width.0), usize::from(height.0))),
            Self::Plain => None,
        }
    }

    /// The bytes that show `lines` as the next frame; `first` for the
    /// first one.
    pub(super) fn frame(self, lines: &[String], first: bool) -> String {
        let mut out = String::new();
        match self {
            Self::Terminal => {
                if first {
                    out.push_str(START);
                }
                out.push_str(HOME);
                for line in lines {
                    out.push_str(line);
                    out.push_str(CLEAR_LINE);
                    out.push('\n');
                }
                out.push_str(CLEAR_BELOW);
            }
            Self::Plain => {
                if !first {
                    out.push('\n');
                }
                for line in lines {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        out
    }

    /// The bytes that give the terminal back as it was (the cursor shown);
    /// the last frame stays on screen.
    pub(super) fn restore(self) -> &'static str {
        match self {
            Self::Terminal => RESTORE,
            Self::Plain => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Screen;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn plain_frames_are_blocks_without_escape_codes() {
        let one = Screen::Plain.frame(&lines(&["head", "row"]), true);
        let two = Screen::Plain.frame(&lines(&["head", "row"]), false);
        assert_eq!(format!("{one}{two}"), "head\nrow\n\nhead\nrow\n");
        assert_eq!(Screen::Plain.restore(), "");
        assert!(!format!("{one}{two}").contains('\x1b'));
        assert_eq!(Screen::Plain.size(), None);
    }

    #[test]
    fn terminal_frames_overwrite_in_place() {
        let first = Screen::Terminal.frame(&lines(&["a", "b"]), true);
        assert_eq!(first, "\x1b[?25l\x1b[2J\x1b[Ha\x1b[K\nb\x1b[K\n\x1b[J");
        let next = Screen::Terminal.frame(&lines(&["c"]), false);
        assert_eq!(
            next, "\x1b[Hc\x1b[K\n\x1b[J",
            "no full clear after the first frame"
        );
        assert_eq!(Screen::Terminal.restore(), "\x1b[?25h");
    }
}
