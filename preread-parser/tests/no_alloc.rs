//! Proves the parser allocates nothing: a counting global allocator watches
//! every parse of every corpus file, whole and as every prefix, and of a
//! multi-record hello once its scratch buffer has grown.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use preread_parser::tls::{Parsed, parse_client_hello};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers every operation to `System` unchanged; it only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

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
