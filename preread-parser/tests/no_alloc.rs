//! Proves the parser allocates nothing: a counting global allocator watches
//! every parse of every corpus file, whole and as every prefix, of a
//! multi-record hello once its scratch buffer has grown, and the JA4 of
//! every parsed corpus hello.

mod common;

use counting_alloc::allocations_during;
use preread_parser::tls::{Ja4, Parsed, Transport, parse_client_hello};

mod counting_alloc;

#[test]
fn parsing_allocates_nothing() {
    let corpus = common::corpus();
    let mut scratch = Vec::new();
    let mut complete = 0;
    for entry in &corpus {
        let tls = &entry.bytes[entry.prefix_len()..];
        let n = allocations_during(|| {
            for cut in 0..=tls.len() {
                if let Ok(Parsed::Complete(hello)) = parse_client_hello(&tls[..cut], &mut scratch) {
                    std::hint::black_box(hello.server_name);
                    complete += 1;
                }
            }
        });
        assert_eq!(n, 0, "{} allocated {n} times", entry.file);
    }
    assert!(
        complete > 30,
        "only {complete} complete parses: the loop did not exercise the parser"
    );

    let (version, message) = common::split_single_record(&corpus[0].bytes);
    let framed = common::reframe(message, &[1, 100, 900], &[version]);
    scratch.reserve(message.len());
    let n = allocations_during(|| {
        let result = parse_client_hello(&framed, &mut scratch);
        assert!(matches!(result, Ok(Parsed::Complete(h)) if h.records == 4));
    });
    assert_eq!(
        n, 0,
        "a multi-record parse with a grown scratch allocated {n} times"
    );
}

#[test]
fn fingerprinting_allocates_nothing() {
    let mut scratch = Vec::new();
    let mut fingerprinted = 0;
    for entry in &common::corpus() {
        let tls = &entry.bytes[entry.prefix_len()..];
        let Ok(Parsed::Complete(hello)) = parse_client_hello(tls, &mut scratch) else {
            continue;
        };
        let n = allocations_during(|| {
            std::hint::black_box(Ja4::of(&hello, Transport::Tcp));
        });
        assert_eq!(n, 0, "the JA4 of {} allocated {n} times", entry.file);
        fingerprinted += 1;
    }
    assert!(
        fingerprinted > 30,
        "only {fingerprinted} hellos fingerprinted"
    );
}
