//! Fuzz target: see `preread_fuzz::check_config` for the invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = preread_fuzz::check_config(data);
});
