//! Cost of the access policy: one check of a source against `allow` and
//! `deny` lists, and one take from the rate table.
//!
//! - `access_lists/<N>_prefixes/<case>`: a deny list of 10 or 100,000
//!   prefixes (IPv4 of lengths 12 to 32, as a country blocklist; and as
//!   many IPv6 /32 to /64), checked for a source it denies (`hit`), one
//!   it does not (`miss`), and a rotating set of 4,096 sources (half
//!   listed) so the trie is searched beyond the cache (`rotating`). The
//!   goal: ≤ 100 ns per check at 100,000 prefixes. The bytes per prefix
//!   (the trie's own `mem_size`) are printed once per size.
//! - `rate_table/take/<case>`: a take from a table of a known source
//!   (`known`) and a spray of distinct sources at the table's cap
//!   (`spray`). Before the group, 10 million distinct sources are sprayed
//!   into a table of 65,536 and its length and allocation are printed:
//!   neither passes the cap.
//!
//! Run: `cargo bench -p preread-core --bench access` (results in
//! `doc/performance.md`).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use preread_core::access::{AccessLists, Prefixes, Rate, RateTable};
use preread_core::rng::Rng;

fn v4_prefix(rng: &mut Rng) -> IpNet {
    let len = rng.range(12, 33) as u8;
    let address = Ipv4Addr::from(rng.next_u64() as u32);
    Ipv4Net::new(address, len).map_or(IpNet::V4(Ipv4Net::default()), |n| IpNet::V4(n.trunc()))
}

fn v6_prefix(rng: &mut Rng) -> IpNet {
    let len = rng.range(32, 65) as u8;
    let high = u128::from(0x2000_0000_0000_0000 | (rng.next_u64() >> 3)) << 64;
    let address = Ipv6Addr::from(high);
    Ipv6Net::new(address, len).map_or(IpNet::V6(Ipv6Net::default()), |n| IpNet::V6(n.trunc()))
}

/// `n` prefixes, half of each family, from a fixed seed.
fn prefixes(n: usize) -> Vec<IpNet> {
    let mut rng = Rng::new(0x5eed);
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                v4_prefix(&mut rng)
            } else {
                v6_prefix(&mut rng)
            }
        })
        .collect()
}

/// The first address of a prefix, and one just past a prefix's end that
/// the list does not hold.
fn inside(net: &IpNet) -> IpAddr {
    net.network()
}

fn lists(c: &mut Criterion) {
    let mut group = c.benchmark_group("access_lists");
    for size in [10, 100_000] {
        let listed = prefixes(size);
        let deny: Prefixes = listed.iter().copied().collect();
        println!(
            "access_lists/{size}_prefixes: {} prefixes, {} bytes, {:.1} bytes per prefix",
            deny.len(),
            deny.mem_size(),
            deny.mem_size() as f64 / deny.len().max(1) as f64
        );
        let policy = AccessLists::new(Prefixes::default(), deny);
        let hit = inside(&listed[0]);
        let miss = IpAddr::from([127, 0, 0, 1]);
        assert!(policy.check(hit).is_err() && policy.check(miss).is_ok());
        let mut rng = Rng::new(7);
        let rotating: Vec<IpAddr> = (0..4096)
            .map(|i| {
                if i % 2 == 0 {
                    inside(rng.pick(&listed))
                } else {
                    IpAddr::from(Ipv4Addr::from(rng.next_u64() as u32))
                }
            })
            .collect();
        group.bench_function(format!("{size}_prefixes/hit"), |b| {
            b.iter(|| black_box(policy.check(black_box(hit))))
        });
        group.bench_function(format!("{size}_prefixes/miss"), |b| {
            b.iter(|| black_box(policy.check(black_box(miss))))
        });
        let mut next = 0;
        group.bench_function(format!("{size}_prefixes/rotating"), |b| {
            b.iter(|| {
                next = (next + 1) % rotating.len();
                black_box(policy.check(black_box(rotating[next])))
            })
        });
    }
    group.finish();
}

fn rate_table(c: &mut Criterion) {
    let limit = Rate::new(50, Duration::from_secs(1), 50).unwrap_or_else(|e| panic!("{e}"));
    let cap = 65_536;
    let start = Instant::now();
    let mut sprayed = RateTable::new(cap);
    let (mut most, mut allocated) = (0, 0);
    let began = Instant::now();
    for n in 0..10_000_000u32 {
        let now = start + Duration::from_micros(u64::from(n));
        sprayed.take(IpAddr::from(Ipv4Addr::from(n)), &limit, now);
        most = most.max(sprayed.len());
        allocated = allocated.max(sprayed.capacity());
    }
    println!(
        "rate_table spray: 10,000,000 sources into a cap of {cap}: at most {most} buckets, \
         room for {allocated} ({} bytes per slot), {:.0} ns per take",
        std::mem::size_of::<(IpAddr, Instant)>() + 1,
        began.elapsed().as_nanos() as f64 / 1e7
    );
    assert!(most <= cap && allocated <= 4 * cap);

    let mut group = c.benchmark_group("rate_table/take");
    let mut table = RateTable::new(cap);
    let known = IpAddr::from([10, 0, 0, 1]);
    let mut tick = 0u64;
    group.bench_function("known", |b| {
        b.iter(|| {
            tick += 1;
            let now = start + Duration::from_millis(tick * 20);
            black_box(table.take(black_box(known), &limit, now))
        })
    });
    let mut n = 0u32;
    group.bench_function("spray", |b| {
        b.iter(|| {
            n = n.wrapping_add(1);
            let now = start + Duration::from_micros(u64::from(n));
            black_box(sprayed.take(IpAddr::from(Ipv4Addr::from(n)), &limit, now))
        })
    });
    group.finish();
}

criterion_group!(benches, lists, rate_table);
criterion_main!(benches);
