//! The per-worker JA4 cache against the uncached computation: for every
//! captured hello that parses (the values `ja4.jsonl` holds), a miss then a
//! hit with the same fingerprint; the same hello with its extensions
//! shuffled and new GREASE values, as Chrome sends it on each connection,
//! hits and gives what `Ja4::of` gives for it; more distinct hellos than
//! slots evict; a hello the key cannot describe is fingerprinted uncached;
//! a change at the very end of the key (the last signature algorithm)
//! misses; a GREASE cipher moved elsewhere misses but keeps its value.

mod common;

use preread_parser::tls::{
    JA4_CACHE_ENTRIES, Ja4, Ja4Cache, Ja4Input, Ja4Lookup, Parsed, Transport, parse_client_hello,
};

/// Each captured hello that parses whole, as JA4 reads it (owned).
struct Hello {
    file: String,
    legacy_version: u16,
    ciphers: Vec<u8>,
    extensions: Vec<u8>,
}

impl Hello {
    fn input(&self) -> Ja4Input<'_> {
        Ja4Input {
            legacy_version: self.legacy_version,
            cipher_suites: &self.ciphers,
            extensions: &self.extensions,
        }
    }
}

fn hellos() -> Vec<Hello> {
    let mut scratch = Vec::new();
    let mut out = Vec::new();
    for entry in common::corpus() {
        let tls = &entry.bytes[entry.prefix_len()..];
        if let Ok(Parsed::Complete(hello)) = parse_client_hello(tls, &mut scratch) {
            out.push(Hello {
                file: entry.file.clone(),
                legacy_version: hello.legacy_version,
                ciphers: hello.cipher_suites.to_vec(),
                extensions: hello.extensions.to_vec(),
            });
        }
    }
    assert!(out.len() > 30, "only {} hellos parse", out.len());
    out
}

/// The extensions of a block, each with its header.
fn split(mut block: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while block.len() >= 4 {
        let len = 4 + usize::from(u16::from_be_bytes([block[2], block[3]]));
        let (one, rest) = block.split_at(len.min(block.len()));
        out.push(one);
        block = rest;
    }
    out
}

fn is_grease(value: u16) -> bool {
    value & 0x0f0f == 0x0a0a && value >> 8 == value & 0xff
}

/// Every GREASE value of `list` (u16s) replaced by another GREASE value.
fn regrease(list: &mut [u8]) {
    for pair in list.chunks_exact_mut(2) {
        let value = u16::from_be_bytes([pair[0], pair[1]]);
        if is_grease(value) {
            pair.copy_from_slice(&(value ^ 0x1010).to_be_bytes());
        }
    }
}

/// The hello as Chrome sends it again: the extensions in another order
/// (rotated by `turn`, then reversed), GREASE ciphers and GREASE
/// extension types drawn anew.
fn shuffled(hello: &Hello, turn: usize) -> Hello {
    let mut parts: Vec<Vec<u8>> = split(&hello.extensions)
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    if !parts.is_empty() {
        let turn = turn % parts.len();
        parts.rotate_left(turn);
    }
    parts.reverse();
    for part in &mut parts {
        regrease(&mut part[..2]);
    }
    let mut ciphers = hello.ciphers.clone();
    regrease(&mut ciphers);
    Hello {
        file: hello.file.clone(),
        legacy_version: hello.legacy_version,
        ciphers,
        extensions: parts.concat(),
    }
}

#[test]
fn a_miss_then_a_hit_with_the_uncached_value_for_every_capture() {
    let mut shared = Ja4Cache::new(1, 2);
    for hello in &hellos() {
        // Captures of one client share their key: one cache for all of
        // them must still give each its own value.
        let got = shared.ja4(hello.input(), Transport::Tcp);
        assert_eq!(
            got,
            Ja4::of(hello.input(), Transport::Tcp),
            "{}",
            hello.file
        );
        let mut cache = Ja4Cache::new(1, 2);
        let uncached = Ja4::of(hello.input(), Transport::Tcp);
        let first = cache.lookup(hello.input(), Transport::Tcp);
        assert_eq!(first, (uncached, Ja4Lookup::Miss), "{}", hello.file);
        let again = cache.lookup(hello.input(), Transport::Tcp);
        assert_eq!(again, (uncached, Ja4Lookup::Hit), "{}", hello.file);
        let quic = cache.lookup(hello.input(), Transport::Quic);
        assert_eq!(
            quic.0,
            Ja4::of(hello.input(), Transport::Quic),
            "{}",
            hello.file
        );
        assert_eq!(quic.1, Ja4Lookup::Miss, "{}: q is another key", hello.file);
    }
}

#[test]
fn shuffled_extensions_and_new_grease_hit_with_the_same_value() {
    for hello in &hellos() {
        let mut cache = Ja4Cache::new(3, 4);
        let original = cache.ja4(hello.input(), Transport::Tcp);
        for turn in 1..4 {
            let again = shuffled(hello, turn);
            assert_ne!(
                again.extensions, hello.extensions,
                "{}: not shuffled",
                hello.file
            );
            let uncached = Ja4::of(again.input(), Transport::Tcp);
            assert_eq!(uncached, original, "{}: JA4 ignores the order", hello.file);
            let cached = cache.lookup(again.input(), Transport::Tcp);
            assert_eq!(
                cached,
                (uncached, Ja4Lookup::Hit),
                "{} turn {turn}",
                hello.file
            );
        }
    }
}

#[test]
fn a_changed_list_misses_and_gets_its_own_value() {
    let hellos = hellos();
    let hello = hellos
        .iter()
        .find(|h| h.file.starts_with("chromium"))
        .expect("a chromium hello");
    let mut cache = Ja4Cache::new(5, 6);
    cache.ja4(hello.input(), Transport::Tcp);
    // The last cipher dropped: another `b` and another count.
    let fewer = Hello {
        ciphers: hello.ciphers[..hello.ciphers.len() - 2].to_vec(),
        ..shuffled(hello, 0)
    };
    let (ja4, lookup) = cache.lookup(fewer.input(), Transport::Tcp);
    assert_eq!(lookup, Ja4Lookup::Miss);
    assert_eq!(ja4, Ja4::of(fewer.input(), Transport::Tcp));
    assert_ne!(ja4, Ja4::of(hello.input(), Transport::Tcp));
    // The same ciphers in another order: one fingerprint, a second entry.
    let mut ciphers: Vec<u8> = hello
        .ciphers
        .chunks_exact(2)
        .rev()
        .flatten()
        .copied()
        .collect();
    ciphers.truncate(hello.ciphers.len());
    let reordered = Hello {
        ciphers,
        ..shuffled(hello, 0)
    };
    let (ja4, lookup) = cache.lookup(reordered.input(), Transport::Tcp);
    assert_eq!(
        (ja4, lookup),
        (Ja4::of(hello.input(), Transport::Tcp), Ja4Lookup::Miss)
    );
}

#[test]
fn more_distinct_hellos_than_slots_evict_and_stay_right() {
    let hellos = hellos();
    let base = &hellos[0];
    // Distinct cipher lists: one more cipher each time, from 0x0100 up.
    let variants: Vec<Hello> = (0..JA4_CACHE_ENTRIES as u16 + 8)
        .map(|i| {
            let mut ciphers = base.ciphers.clone();
            ciphers.extend((0x0100 + i).to_be_bytes());
            Hello {
                ciphers,
                ..shuffled(base, 0)
            }
        })
        .collect();
    let mut cache = Ja4Cache::new(7, 8);
    for variant in &variants {
        let (ja4, lookup) = cache.lookup(variant.input(), Transport::Tcp);
        assert_eq!(
            (ja4, lookup),
            (Ja4::of(variant.input(), Transport::Tcp), Ja4Lookup::Miss)
        );
    }
    let mut hits = 0;
    for variant in &variants {
        let (ja4, lookup) = cache.lookup(variant.input(), Transport::Tcp);
        assert_eq!(ja4, Ja4::of(variant.input(), Transport::Tcp));
        hits += usize::from(lookup == Ja4Lookup::Hit);
    }
    // More keys than slots: some were evicted, and no slot holds two.
    assert!(hits < variants.len(), "{hits} hits of {}", variants.len());
    assert!(hits <= JA4_CACHE_ENTRIES);
}

#[test]
fn a_hello_without_an_exact_key_is_fingerprinted_uncached() {
    // `server_name` twice (the parser refuses it; a caller may still
    // build the input by hand).
    let sni = [0u8, 0, 0, 0];
    let extensions = [sni, sni].concat();
    let input = Ja4Input {
        legacy_version: 0x0303,
        cipher_suites: &[0x13, 0x01],
        extensions: &extensions,
    };
    let mut cache = Ja4Cache::new(9, 10);
    for _ in 0..2 {
        let got = cache.lookup(input, Transport::Tcp);
        assert_eq!(got, (Ja4::of(input, Transport::Tcp), Ja4Lookup::Uncached));
    }
}

/// `hello` with the last value of its `signature_algorithms` list changed:
/// the end of the cache's key.
fn last_signature_changed(hello: &Hello) -> Hello {
    let mut extensions = hello.extensions.clone();
    let mut at = 0;
    while at + 4 <= extensions.len() {
        let ext_type = u16::from_be_bytes([extensions[at], extensions[at + 1]]);
        let len = usize::from(u16::from_be_bytes([extensions[at + 2], extensions[at + 3]]));
        if ext_type == 0x000d {
            let last = at + 4 + len - 2;
            extensions[last] ^= 0x40;
            return Hello {
                extensions,
                ..shuffled(hello, 0)
            };
        }
        at += 4 + len;
    }
    panic!("{}: no signature_algorithms", hello.file);
}

#[test]
fn a_difference_at_the_end_of_the_key_misses_and_gets_its_own_value() {
    for hello in hellos().iter().filter(|h| h.file.starts_with("chromium")) {
        let mut cache = Ja4Cache::new(11, 12);
        let original = cache.ja4(hello.input(), Transport::Tcp);
        let changed = last_signature_changed(hello);
        let uncached = Ja4::of(changed.input(), Transport::Tcp);
        assert_ne!(uncached, original, "{}: the c hash covers it", hello.file);
        let got = cache.lookup(changed.input(), Transport::Tcp);
        assert_eq!(got, (uncached, Ja4Lookup::Miss), "{}", hello.file);
    }
}

#[test]
fn a_grease_cipher_in_another_place_misses_but_gives_the_same_value() {
    let hellos = hellos();
    let hello = hellos
        .iter()
        .find(|h| h.file.starts_with("chromium"))
        .expect("a chromium hello");
    assert_eq!(
        hello.ciphers[0] & 0x0f,
        0x0a,
        "Chrome's first cipher is GREASE"
    );
    let mut cache = Ja4Cache::new(13, 14);
    let original = cache.ja4(hello.input(), Transport::Tcp);
    let mut ciphers = hello.ciphers.clone();
    ciphers.rotate_left(2);
    let moved = Hello {
        ciphers,
        ..shuffled(hello, 0)
    };
    let got = cache.lookup(moved.input(), Transport::Tcp);
    assert_eq!(got, (original, Ja4Lookup::Miss));
    let again = cache.lookup(shuffled(hello, 2).input(), Transport::Tcp);
    assert_eq!(again, (original, Ja4Lookup::Hit));
}

/// GREASE past the first word takes the comparison's other loop, and in
/// a list's padded last bytes its tail: regreased, such a list still
/// hits; a value that is not GREASE in its place misses.
#[test]
fn grease_further_on_and_in_the_last_bytes_hits_when_regreased() {
    let hellos = hellos();
    let hello = hellos
        .iter()
        .find(|h| h.file.starts_with("chromium"))
        .expect("a chromium hello");
    let mut last = hello.ciphers.clone();
    last.rotate_left(2);
    let in_tail = last[2..].to_vec();
    assert_eq!(last.len() % 8, 0, "GREASE in the last whole word");
    assert_ne!(in_tail.len() % 8, 0, "GREASE in the padded last bytes");
    for ciphers in [last, in_tail] {
        let mut cache = Ja4Cache::new(15, 16);
        let first = Hello {
            ciphers,
            ..shuffled(hello, 0)
        };
        let want = Ja4::of(first.input(), Transport::Tcp);
        assert_eq!(
            cache.lookup(first.input(), Transport::Tcp),
            (want, Ja4Lookup::Miss)
        );
        let mut again = Hello {
            ciphers: first.ciphers.clone(),
            ..shuffled(hello, 1)
        };
        regrease(&mut again.ciphers);
        assert_ne!(again.ciphers, first.ciphers);
        assert_eq!(
            cache.lookup(again.input(), Transport::Tcp),
            (want, Ja4Lookup::Hit)
        );
        let mut plain = Hello {
            ciphers: first.ciphers.clone(),
            ..shuffled(hello, 2)
        };
        let at = plain.ciphers.len() - 2;
        plain.ciphers[at..].copy_from_slice(&[0x00, 0xff]);
        let got = cache.lookup(plain.input(), Transport::Tcp);
        assert_eq!(
            got,
            (Ja4::of(plain.input(), Transport::Tcp), Ja4Lookup::Miss)
        );
        assert_ne!(got.0, want);
    }
}

/// What a `deny_ja4` list asks of the cache, for every captured hello
/// the parser returns: a hello whose `a` section no entry has is asked
/// about once per lookup and leaves only that section in the cache (no
/// hash computed); once an entry has it, the fingerprint is computed and
/// kept whole, and later lookups return it without asking. The parser's
/// key and the walk's are one: the stored input hits the same slot.
#[test]
fn a_section_no_list_wants_is_kept_alone_then_filled() {
    let mut scratch = Vec::new();
    for entry in common::corpus() {
        let tls = &entry.bytes[entry.prefix_len()..];
        let Ok(Parsed::Complete(hello)) = parse_client_hello(tls, &mut scratch) else {
            continue;
        };
        let file = &entry.file;
        let want = Ja4::of(&hello, Transport::Tcp);
        let mut cache = Ja4Cache::new(17, 18);
        let mut asked = Vec::new();
        let mut refuse = |a: &[u8; 10]| {
            asked.push(*a);
            false
        };
        let got = cache.lookup_hello(&hello, Transport::Tcp, &mut refuse);
        assert_eq!(got, (None, Ja4Lookup::Miss), "{file}");
        let got = cache.lookup_hello(&hello, Transport::Tcp, &mut refuse);
        assert_eq!(got, (None, Ja4Lookup::Hit), "{file}");
        assert_eq!(asked, [want.section_a(); 2], "{file}");
        let got = cache.lookup_hello(&hello, Transport::Tcp, |a| a == &want.section_a());
        assert_eq!(got, (Some(want), Ja4Lookup::Miss), "{file}");
        let got = cache.lookup_hello(&hello, Transport::Tcp, |_| panic!("{file}: asked"));
        assert_eq!(got, (Some(want), Ja4Lookup::Hit), "{file}");
        let input = Ja4Input::from(&hello);
        assert_eq!(
            cache.lookup(input, Transport::Tcp),
            (want, Ja4Lookup::Hit),
            "{file}"
        );
        let quic = cache.lookup_hello(&hello, Transport::Quic, |_| false);
        assert_eq!(quic, (None, Ja4Lookup::Miss), "{file}: q is another key");
    }
}
