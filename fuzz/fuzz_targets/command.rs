//! Fuzz target: see `preread_fuzz::check_command` for the invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    preread_fuzz::check_command(data);
});
