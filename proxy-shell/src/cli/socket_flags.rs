//! Where `--socket` and `--timeout` are offered: at the top level (`preread
//! --socket PATH status`, as doc/configure.md writes it), and after the
//! subcommands that talk to the command socket (`preread status --socket
//! PATH`); `start` takes `--socket` alone (where it creates the socket).
//!
//! Owns: the list of socket subcommands, the two flags' definitions there,
//! and reading them back from whichever level gave them. Must never: offer
//! them on an offline subcommand (`config check`, `explain`, `inspect`,
//! `state seal`), whose `--help` would list flags that do nothing.

use std::path::PathBuf;

use super::args::Cli;

/// The subcommands (as paths of names) that talk to the command socket:
/// `--socket` and `--timeout` are theirs, after the subcommand too
/// (`preread status --socket PATH`), and every subcommand under them
/// inherits the two.
pub(super) const SOCKET_COMMANDS: &[&[&str]] = &[
    &["status"],
    &["shutdown"],
    &["listener"],
    &["cluster"],
    &["frontend"],
    &["backend"],
    &["state", "save"],
    &["state", "load"],
    &["metrics"],
    &["rejects"],
    &["reload"],
    &["sources"],
    &["upgrade"],
];

/// The flag set of a socket subcommand: `--socket` and `--timeout`, as the
/// top level documents them. `start` takes only `--socket` (where it
/// creates the socket); the offline subcommands take neither, so their
/// `--help` does not offer flags that would do nothing.
fn socket_flag(help: &'static str) -> clap::Arg {
    clap::Arg::new("socket")
        .long("socket")
        .value_name("PATH")
        .value_parser(clap::value_parser!(PathBuf))
        .global(true)
        .help(help)
}

fn timeout_flag() -> clap::Arg {
    clap::Arg::new("timeout")
        .short('t')
        .long("timeout")
        .value_name("MS")
        .value_parser(clap::value_parser!(u64))
        .global(true)
        .help("How long the command waits for its answer, in milliseconds (default 5000)")
}

fn under(
    command: clap::Command,
    path: &[&str],
    add: &dyn Fn(clap::Command) -> clap::Command,
) -> clap::Command {
    match path.split_first() {
        None => add(command),
        Some((name, rest)) => command.mut_subcommand(*name, |sub| under(sub, rest, add)),
    }
}

/// The value of `id` given at the deepest level of `matches` that has it:
/// `preread --socket A status --socket B` talks to B.
fn scoped<T: Clone + Send + Sync + 'static>(matches: &clap::ArgMatches, id: &str) -> Option<T> {
    let mut found = None;
    let mut level = Some(matches);
    while let Some(matches) = level {
        if let Ok(Some(value)) = matches.try_get_one::<T>(id) {
            found = Some(value.clone());
        }
        level = matches.subcommand().map(|(_, sub)| sub);
    }
    found
}

impl Cli {
    /// The command line, with `--socket` and `--timeout` on the
    /// subcommands where they mean something, besides the top level.
    pub fn command_line() -> clap::Command {
        let mut command = <Self as clap::CommandFactory>::command();
        let talk = |sub: clap::Command| {
            sub.arg(socket_flag(
                "The command socket to talk to (overrides the config's command_socket)",
            ))
            .arg(timeout_flag())
        };
        for path in SOCKET_COMMANDS {
            command = under(command, path, &talk);
        }
        under(command, &["start"], &|sub| {
            sub.arg(socket_flag(
                "Where to create the command socket (overrides the config's command_socket)",
            ))
        })
    }

    /// Parses `args` (the program name first).
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut matches = Self::command_line().try_get_matches_from(args)?;
        let socket = scoped::<PathBuf>(&matches, "socket");
        let timeout = scoped::<u64>(&matches, "timeout");
        let mut cli = <Self as clap::FromArgMatches>::from_arg_matches_mut(&mut matches)?;
        cli.socket = socket;
        cli.timeout = timeout;
        Ok(cli)
    }

    /// Parses the process's arguments; a mistake or `--help` ends the
    /// process the way clap does (usage on stderr and status 2, or the help).
    pub fn parse_args() -> Self {
        Self::try_parse_args(std::env::args_os()).unwrap_or_else(|error| error.exit())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::Cli;

    fn help(path: &[&str]) -> String {
        let mut line = vec!["preread"];
        line.extend_from_slice(path);
        line.push("--help");
        match Cli::try_parse_args(line) {
            Err(help) => help.to_string(),
            Ok(cli) => panic!("{path:?} --help parsed as {cli:?}"),
        }
    }

    #[test]
    fn offline_subcommands_do_not_offer_socket_flags() {
        for path in [
            &["config", "check"][..],
            &["explain"],
            &["inspect"],
            &["state", "seal"],
        ] {
            let text = help(path);
            assert!(!text.contains("--socket"), "{path:?}: {text}");
            assert!(!text.contains("--timeout"), "{path:?}: {text}");
            assert!(text.contains("--config"), "{path:?}: {text}");
        }
        let start = help(&["start"]);
        assert!(start.contains("--socket"), "{start}");
        assert!(!start.contains("--timeout"), "{start}");
        for path in [
            &["status"][..],
            &["frontend", "tcp", "add"],
            &["state", "save"],
            &["metrics", "get"],
            &["reload"],
            &["upgrade"],
        ] {
            let text = help(path);
            assert!(
                text.contains("--socket") && text.contains("--timeout"),
                "{path:?}: {text}"
            );
        }
        let top = help(&[]);
        assert!(
            top.contains("--socket") && top.contains("--timeout"),
            "{top}"
        );
    }

    #[test]
    fn socket_flags_are_read_before_or_after_the_subcommand() {
        let parsed = |line: &str| {
            let cli = Cli::try_parse_args(line.split_whitespace())
                .unwrap_or_else(|e| panic!("{line}: {e}"));
            (cli.socket, cli.timeout)
        };
        let socket = |path: &str| Some(PathBuf::from(path));
        for line in [
            "preread --socket /s -t 7 status",
            "preread status --socket /s --timeout 7",
            "preread frontend --socket /s list -t 7",
            "preread --socket /other frontend tcp add -i w -a 127.0.0.1:1 --socket /s -t 7",
            "preread -t 1 state save -f x --socket /s -t 7",
        ] {
            assert_eq!(parsed(line), (socket("/s"), Some(7)), "{line}");
        }
        assert_eq!(parsed("preread status"), (None, None));
        assert_eq!(parsed("preread start --socket /s"), (socket("/s"), None));
        // The documented top-level form is accepted whatever follows.
        assert_eq!(
            parsed("preread --socket /s config check"),
            (socket("/s"), None)
        );
        for line in [
            "preread config check --socket /s",
            "preread inspect --timeout 7 f.bin",
            "preread start -t 7",
        ] {
            assert!(
                Cli::try_parse_args(line.split_whitespace()).is_err(),
                "{line}"
            );
        }
    }
}
