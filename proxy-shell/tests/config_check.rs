//! `preread config check` as an operator runs it, the real binary on real
//! files: one pass reports a type error, an unknown key (with the key it
//! was probably meant to be) and four validation problems, each with its
//! code, and warns about a preread timeout of 5 ms; a config with warnings
//! alone is valid (exit 0) and still shows them; and `preread start` logs
//! the warnings of the config it runs.

use std::error::Error;
use std::path::PathBuf;
use std::process::{Command, Output};

type Outcome = Result<(), Box<dyn Error>>;

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../command/tests/data"
    ))
    .join(name)
}

fn preread(args: &[&str]) -> Result<Output, Box<dyn Error>> {
    Ok(Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(args)
        .env_remove("PREREAD_CONFIG")
        .env_remove("RUST_LOG")
        .output()?)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The line of `stdout` at `line` of the file with `code`.
fn line_with<'a>(stdout: &'a str, file: &str, line: usize, code: &str) -> Option<&'a str> {
    let at = format!("{file}:{line}:");
    stdout
        .lines()
        .find(|l| l.starts_with(&at) && l.contains(&format!(": {code}: ")))
}

#[test]
fn one_pass_reports_six_problems_each_with_its_code_and_the_warning() -> Outcome {
    let file = data("one_pass.toml");
    let shown = file.display().to_string();
    let out = preread(&["-c", &shown, "config", "check"])?;
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    let errors: Vec<&str> = stdout.lines().filter(|l| l.contains(": E")).collect();
    assert_eq!(errors.len(), 6, "{stdout}");

    let type_error = line_with(&stdout, &shown, 4, "E001").ok_or("no type error")?;
    assert!(
        type_error.ends_with("buffer_size: expected an integer, found \"16k\""),
        "{type_error}"
    );
    let unknown = line_with(&stdout, &shown, 5, "E002").ok_or("no unknown key")?;
    assert!(
        unknown.contains("unknown key `worker_cuont`: did you mean `worker_count`?"),
        "{unknown}"
    );
    for (line, code) in [(7, "E101"), (13, "E003"), (16, "E003"), (18, "E201")] {
        assert!(
            line_with(&stdout, &shown, line, code).is_some(),
            "{code} at line {line}:\n{stdout}"
        );
    }
    let warning = line_with(&stdout, &shown, 9, "W001").ok_or("no warning")?;
    assert!(
        warning.contains("sni_preread_timeout = 5 is 5ms")
            && warning.contains("if seconds were meant, write \"5s\""),
        "{warning}"
    );
    assert!(stderr.contains("6 error(s), 1 warning(s)"), "{stderr}");
    // Values are shown as the file writes them, never in Rust's debug form.
    assert!(!stdout.contains("Some("), "{stdout}");
    Ok(())
}

#[test]
fn warnings_alone_are_a_valid_config() -> Outcome {
    let file = data("warnings_only.toml");
    let shown = file.display().to_string();
    let out = preread(&["-c", &shown, "config", "check"])?;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.ends_with(&format!("{shown}: ok\n")), "{stdout}");
    let warnings = stdout.lines().filter(|l| l.contains(": W")).count();
    assert_eq!(warnings, 7, "{stdout}");
    assert!(text(&out.stderr).contains("0 error(s), 7 warning(s)"));

    let json = preread(&["-c", &shown, "--json", "config", "check"])?;
    assert_eq!(json.status.code(), Some(0));
    for line in text(&json.stdout).lines() {
        let value: serde_json::Value = serde_json::from_str(line)?;
        assert_eq!(value["severity"], "warning", "{line}");
        assert!(
            value["code"].as_str().is_some_and(|c| c.starts_with('W')),
            "{line}"
        );
    }
    Ok(())
}

#[test]
fn explain_of_a_warning_cites_its_section() -> Outcome {
    let out = preread(&["explain", "w001"])?;
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("W001: a preread timeout under 50 ms"),
        "{stdout}"
    );
    assert!(stdout.contains("See: doc/configure.md §3.3"), "{stdout}");
    Ok(())
}
