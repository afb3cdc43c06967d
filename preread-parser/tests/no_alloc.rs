//! Proves the parser allocates nothing: a counting global allocator watches
//! every parse of every corpus file, whole and as every prefix, and of a
//! multi-record hello once its scratch buffer has grown.

mod common;

use counting_alloc::allocations_during;
use preread_parser::tls::{Parsed, parse_client_hello};

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
