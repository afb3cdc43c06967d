//! `parse_client_hello_resuming`: a cursor kept across calls changes what
//! each call walks, never its answer. Every window a connection can show,
//! in the order it grows, gets exactly the answer of a fresh parse.

mod common;

use common::{corpus, reframe, split_single_record};
use preread_parser::tls::{
    FrameCursor, Parsed, TlsError, parse_client_hello_resuming, parse_client_hello_within,
};
use proptest::prelude::*;

/// Grows `window` by the read sizes `reads` (cycled), feeding each grown
/// window to one cursor, and checks each answer against a fresh parse
/// under `limit`; then feeds it once more with trailing bytes.
fn assert_resumes_like_fresh(name: &str, window: &[u8], reads: &[usize], limit: usize) {
    let mut cursor = FrameCursor::default();
    let (mut resumed, mut fresh) = (Vec::new(), Vec::new());
    let mut len = 0;
    let mut sizes = reads.iter().cycle();
    let mut settled = false;
    while len < window.len() && !settled {
        len = (len + sizes.next().copied().unwrap_or(1).max(1)).min(window.len());
        let got = parse_client_hello_resuming(&window[..len], limit, &mut cursor, &mut resumed);
        let want = parse_client_hello_within(&window[..len], limit, &mut fresh);
        assert_eq!(
            got,
            want,
            "{name}: {len} of {} bytes, limit {limit}",
            window.len()
        );
        settled = !matches!(got, Ok(Parsed::Incomplete(_)));
    }
    // A settled answer stays: the cursor never reads past the hello.
    if settled {
        let mut longer = window[..len].to_vec();
        longer.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        let again = parse_client_hello_resuming(&longer, limit, &mut cursor, &mut resumed);
        let want = parse_client_hello_within(&window[..len], limit, &mut fresh);
        let again = again.map(|parsed| format!("{parsed:?}"));
        assert_eq!(
            again,
            want.map(|parsed| format!("{parsed:?}")),
            "{name}: after more bytes"
        );
    }
}

/// Every corpus file, and each real routed one re-framed into records of
/// 1, 7 and 300 bytes, under no limit, a 1,000-byte one and its own size
/// minus one.
fn windows() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in corpus() {
        let tls = entry.bytes[entry.prefix_len()..].to_vec();
        if entry.json["kind"] == "real" && entry.expected() == "routed" {
            let (version, message) = split_single_record(&tls);
            for size in [1, 7, 300] {
                let cuts: Vec<usize> = (size..message.len()).step_by(size).collect();
                let name = format!("{} in {size}-byte records", entry.file);
                out.push((name, reframe(message, &cuts, &[version])));
            }
        }
        out.push((entry.file, tls));
    }
    out
}

#[test]
fn every_corpus_window_resumes_to_the_fresh_answer() {
    for (name, window) in windows() {
        // Byte by byte only where a fresh parse of every prefix is cheap.
        let byte_by_byte = window.len() <= 4_000;
        for limit in [usize::MAX, 1_000, window.len().saturating_sub(1)] {
            for reads in [&[1][..], &[5, 1, 300], &[4096]] {
                if reads != [1] || byte_by_byte {
                    assert_resumes_like_fresh(&name, &window, reads, limit);
                }
            }
        }
    }
}

/// The cursor starts over, rather than trusting records it framed, when
/// the window is shorter than them or the limit is another.
#[test]
fn a_shorter_window_or_another_limit_starts_over() {
    let entry = corpus()
        .into_iter()
        .find(|e| e.file == "curl_h2.bin")
        .expect("curl_h2.bin");
    let (version, message) = split_single_record(&entry.bytes);
    let cuts: Vec<usize> = (10..message.len()).step_by(10).collect();
    let window = reframe(message, &cuts, &[version]);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut cursor = FrameCursor::default();
    let half = window.len() / 2;
    let first = parse_client_hello_resuming(&window[..half], usize::MAX, &mut cursor, &mut a);
    assert!(matches!(first, Ok(Parsed::Incomplete(_))), "{first:?}");
    let shorter = &window[..40];
    assert_eq!(
        parse_client_hello_resuming(shorter, usize::MAX, &mut cursor, &mut a),
        parse_client_hello_within(shorter, usize::MAX, &mut b)
    );
    let _ = parse_client_hello_resuming(&window[..half], usize::MAX, &mut cursor, &mut a);
    assert_eq!(
        parse_client_hello_resuming(&window, 300, &mut cursor, &mut a),
        parse_client_hello_within(&window, 300, &mut b)
    );
    let whole = parse_client_hello_resuming(&window, usize::MAX, &mut cursor, &mut a);
    let Ok(Parsed::Complete(hello)) = whole else {
        panic!("{whole:?}");
    };
    assert_eq!(
        hello.server_name,
        entry.json["sni"].as_str().map(str::as_bytes)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Arbitrary bytes behind a record header, read in arbitrary sizes:
    /// the resumed answers are the fresh ones, errors included.
    #[test]
    fn arbitrary_windows_resume_to_the_fresh_answer(
        body in prop::collection::vec(any::<u8>(), 0..600),
        reads in prop::collection::vec(1usize..40, 1..8),
        limit in 5usize..700,
    ) {
        let mut window = vec![22, 3, 1, 0, 3, 1, 0, 0];
        window.extend(body);
        let mut cursor = FrameCursor::default();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut len = 0;
        for size in reads.iter().cycle() {
            len = (len + size).min(window.len());
            let got = parse_client_hello_resuming(&window[..len], limit, &mut cursor, &mut a);
            let want = parse_client_hello_within(&window[..len], limit, &mut b);
            prop_assert_eq!(got, want);
            if len == window.len() || !matches!(got, Ok(Parsed::Incomplete(_))) {
                break;
            }
        }
    }
}

/// A record framed by an earlier call is not walked again, but the next
/// one is still checked: an oversized second record is found on resuming.
#[test]
fn a_fault_in_a_later_record_is_found_after_resuming() {
    let mut window = vec![22, 3, 1, 0, 4, 1, 0, 0, 200];
    window.extend_from_slice(&[22, 3, 1, 0x40, 0x01]);
    let mut cursor = FrameCursor::default();
    let mut scratch = Vec::new();
    let first = parse_client_hello_resuming(&window[..9], usize::MAX, &mut cursor, &mut scratch);
    assert!(matches!(first, Ok(Parsed::Incomplete(_))), "{first:?}");
    let got = parse_client_hello_resuming(&window, usize::MAX, &mut cursor, &mut scratch);
    assert_eq!(
        got,
        Err(TlsError::MalformedRecord(
            preread_parser::tls::RecordFault::Oversized(0x4001)
        ))
    );
}
