//! What the core records of a complete ClientHello for the access log
//! (`SniPrereadCore::hello`): ECH, the highest version offered, the size of
//! the records, checked against the captured corpus and its manifest.

mod common;

use std::error::Error;
use std::time::Instant;

use common::{CORPUS_ROUTES, config, corpus_file, manifest};
use preread_core::{HelloSummary, Input, PrereadConfig, SniPrereadCore, TlsVersion};
use preread_parser::tls::EchKind;

type Checked = Result<(), Box<dyn Error>>;

fn corpus_config() -> PrereadConfig {
    let mut config = config(CORPUS_ROUTES);
    config.max_bytes = 65_536;
    config
}

/// The core's summary after `file` arrived whole.
fn summary_of(file: &str) -> Option<HelloSummary> {
    let mut core = SniPrereadCore::new();
    let window = corpus_file(file);
    let input = Input::Bytes {
        buf: &window,
        now: Instant::now(),
    };
    let _ = core.handle_input(&corpus_config(), input);
    core.hello()
}

#[test]
fn every_complete_hello_of_the_corpus_is_summarized_as_its_manifest_says() -> Checked {
    let mut summarized = 0;
    for entry in manifest() {
        let file = entry["file"].as_str().ok_or("a file name")?;
        if entry.get("proxy_protocol").is_some() {
            continue;
        }
        let complete = matches!(
            entry["expected"].as_str(),
            Some("routed" | "NoSni" | "EchOuterAbsent")
        );
        let summary = summary_of(file);
        if !complete {
            assert_eq!(summary, None, "{file}: no complete hello, no summary");
            continue;
        }
        let summary = summary.ok_or(format!("{file}: a complete hello is summarized"))?;
        let records = entry["clienthello_len"].as_u64().ok_or("clienthello_len")?;
        assert_eq!(summary.len as u64, records, "{file}: the hello's records");
        let ech = entry["ech_present"].as_bool().ok_or("ech_present")?;
        assert_eq!(summary.ech.is_some(), ech, "{file}");
        summarized += 1;
    }
    assert!(
        summarized >= 25,
        "{summarized} complete hellos in the corpus"
    );
    Ok(())
}

#[test]
fn the_highest_version_skips_grease_and_falls_back_to_legacy() -> Checked {
    let expected = [
        // GREASE 0x7a7a first, then 1.3 and 1.2; an outer GREASE ECH.
        ("chromium_a_1.bin", Some(EchKind::Outer), "1.3", 1921),
        (
            "gen_j_ech_outer_public_name.bin",
            Some(EchKind::Outer),
            "1.3",
            627,
        ),
        ("openssl_sni.bin", None, "1.3", 319),
        ("openssl_tls13.bin", None, "1.3", 256),
        // No supported_versions: the legacy version.
        ("curl_tls12.bin", None, "1.2", 224),
    ];
    for (file, ech, version, len) in expected {
        let summary = summary_of(file).ok_or(format!("{file}: summarized"))?;
        assert_eq!(
            (summary.ech, summary.version.to_string(), summary.len),
            (ech, version.to_owned(), len),
            "{file}"
        );
    }
    assert_eq!(TlsVersion(0x0303).to_string(), "1.2");
    Ok(())
}
