//! Property tests of the route table: insert and remove are exact inverses,
//! a snapshot (clone) does not see later changes and a change that changes
//! nothing copies nothing, a frontend's SNI change is reversible, and
//! lookups agree with a linear reference model that applies the precedence
//! rules naively. A counting allocator proves that lookups never allocate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use preread_core::pattern::{SniPattern, validate_sni_pattern};
use preread_core::routes::{AlpnSet, ClusterId, Lookup, RouteTable};
use preread_core::sni::HostName;
use proptest::prelude::*;
use proptest::sample::{Index, select, subsequence};

/// Counts this thread's allocations, so parallel tests do not disturb it.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a const thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Ignored during thread teardown, when the counter is gone.
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCATIONS.with(Cell::get);
    let result = f();
    (result, ALLOCATIONS.with(Cell::get) - before)
}

type Route = (SniPattern, AlpnSet, ClusterId);

/// Few labels, so that generated patterns and names collide often.
const LABELS: &[&str] = &["a", "b", "c", "example", "com"];
/// Short lists over several names, so one pattern often has three or more
/// frontends listing protocols.
const PROTOCOLS: &[&str] = &["h2", "http/1.1", "x", "y", "z"];

fn pattern() -> impl Strategy<Value = SniPattern> {
    (
        select(&["", "*.", "**."][..]),
        prop::collection::vec(select(LABELS), 1..4),
    )
        .prop_filter_map("wildcards need two labels", |(wildcard, labels)| {
            validate_sni_pattern(&format!("{wildcard}{}", labels.join("."))).ok()
        })
}

fn alpn() -> impl Strategy<Value = AlpnSet> {
    subsequence(PROTOCOLS, 0..=2).prop_map(|names| {
        if names.is_empty() {
            AlpnSet::Any
        } else {
            AlpnSet::protocols(names).unwrap_or(AlpnSet::Any)
        }
    })
}

fn route() -> impl Strategy<Value = Route> {
    (
        pattern(),
        alpn(),
        select(&["c0", "c1", "c2"][..]).prop_map(ClusterId::from),
    )
}

/// Raw SNI as a client might send it: mixed case, empty labels, a trailing
/// dot, labels no pattern uses.
fn raw_name() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(
            select(&["a", "b", "c", "example", "com", "A", "COM", "", "z"][..]),
            1..6,
        ),
        any::<bool>(),
    )
        .prop_map(|(labels, dot)| format!("{}{}", labels.join("."), if dot { "." } else { "" }))
}

fn offer() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(select(&["h2", "http/1.1", "x", "z", "unknown"][..]), 0..4)
}

/// The routes the table holds, as a plain list with the rules applied
/// naively.
#[derive(Default)]
struct Model {
    routes: Vec<Route>,
}

impl Model {
    /// `Ok(true)` when added, `Ok(false)` when already there, `Err` on a
    /// conflict.
    fn insert(&mut self, (pattern, alpn, cluster): Route) -> Result<bool, ()> {
        for (p, a, c) in &self.routes {
            if *p != pattern {
                continue;
            }
            if *a == alpn {
                return if *c == cluster { Ok(false) } else { Err(()) };
            }
            if let (AlpnSet::Protocols(mine), AlpnSet::Protocols(theirs)) = (&alpn, a)
                && mine.iter().any(|m| theirs.iter().any(|t| t == m))
            {
                return Err(());
            }
        }
        self.routes.push((pattern, alpn, cluster));
        Ok(true)
    }

    /// How specifically `pattern` matches `name`, higher is better.
    fn specificity(pattern: &SniPattern, name: &str) -> Option<(u8, usize)> {
        let prefix = |suffix: &str| {
            name.strip_suffix(suffix)
                .and_then(|rest| rest.strip_suffix('.'))
                .filter(|prefix| !prefix.is_empty())
        };
        match pattern {
            SniPattern::Exact(n) => (n.as_str() == name).then_some((2, 0)),
            SniPattern::OneLabel(s) => prefix(s.as_str())
                .filter(|p| !p.contains('.'))
                .map(|_| (1, 0)),
            SniPattern::AnyDepth(s) => prefix(s.as_str())
                .filter(|p| p.split('.').all(|label| !label.is_empty()))
                .map(|_| (0, s.as_str().len())),
        }
    }

    fn lookup(&self, name: &str, offer: &[&str]) -> Outcome {
        let Some(best) = self
            .routes
            .iter()
            .filter_map(|(p, _, _)| Some((Self::specificity(p, name)?, p)))
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, p)| p)
        else {
            return Outcome::SniUnmatched;
        };
        let frontends: Vec<&Route> = self.routes.iter().filter(|(p, _, _)| p == best).collect();
        for offered in offer {
            for (_, alpn, cluster) in &frontends {
                if let AlpnSet::Protocols(list) = alpn
                    && list.iter().any(|p| p == offered.as_bytes())
                {
                    return Outcome::Matched {
                        cluster: cluster.to_string(),
                        pattern: best.clone(),
                        protocol: Some(offered.as_bytes().to_vec()),
                    };
                }
            }
        }
        match frontends.iter().find(|(_, a, _)| *a == AlpnSet::Any) {
            Some((_, _, cluster)) => Outcome::Matched {
                cluster: cluster.to_string(),
                pattern: best.clone(),
                protocol: None,
            },
            None => Outcome::AlpnUnmatched(best.clone()),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Matched {
        cluster: String,
        pattern: SniPattern,
        protocol: Option<Vec<u8>>,
    },
    SniUnmatched,
    AlpnUnmatched(SniPattern),
}

impl From<Lookup<'_>> for Outcome {
    fn from(lookup: Lookup<'_>) -> Self {
        match lookup {
            Lookup::Matched {
                cluster,
                pattern,
                protocol,
            } => Self::Matched {
                cluster: cluster.to_string(),
                pattern: pattern.clone(),
                protocol: protocol.map(<[u8]>::to_vec),
            },
            Lookup::SniUnmatched => Self::SniUnmatched,
            Lookup::AlpnUnmatched { pattern } => Self::AlpnUnmatched(pattern.clone()),
        }
    }
}

/// Builds the table and the model side by side, checking that both accept
/// and refuse the same routes and that a refusal changes nothing. Returns
/// the routes that were added.
fn build(
    table: &mut RouteTable,
    model: &mut Model,
    routes: Vec<Route>,
) -> Result<Vec<Route>, TestCaseError> {
    let mut added = Vec::new();
    for route in routes {
        let before = table.clone();
        let expected = model.insert(route.clone());
        let (pattern, alpn, cluster) = route.clone();
        match table.insert(pattern, alpn, cluster) {
            Ok(()) => {
                prop_assert!(expected.is_ok(), "table accepted {route:?}, model refused");
                if expected == Ok(true) {
                    prop_assert_eq!(table.len(), before.len() + 1);
                    added.push(route);
                } else {
                    prop_assert!(table.same_storage(&before), "a repeat copied {route:?}");
                }
            }
            Err(conflict) => {
                prop_assert!(expected.is_err(), "table refused {route:?}: {conflict}");
                prop_assert!(table.same_storage(&before), "a refusal copied {route:?}");
            }
        }
        table.check_invariants();
        prop_assert_eq!(table.len(), model.routes.len());
    }
    Ok(added)
}

proptest! {
    #[test]
    fn removing_an_inserted_batch_restores_the_table(
        base in prop::collection::vec(route(), 0..20),
        batch in prop::collection::vec(route(), 0..20),
        order in prop::collection::vec(any::<u32>(), 20),
    ) {
        let mut table = RouteTable::new();
        let mut model = Model::default();
        build(&mut table, &mut model, base.clone())?;
        let snapshot = table.clone();

        let added = build(&mut table, &mut model, batch)?;
        // The snapshot did not see the batch: it is the base, built alone.
        let mut alone = RouteTable::new();
        build(&mut alone, &mut Model::default(), base)?;
        prop_assert_eq!(&snapshot, &alone);
        let mut removals: Vec<(u32, Route)> = order.into_iter().zip(added).collect();
        removals.sort_by_key(|(key, _)| *key);
        for (_, (pattern, alpn, cluster)) in removals {
            prop_assert_eq!(table.remove(&pattern, &alpn), Some(cluster));
            table.check_invariants();
        }
        prop_assert_eq!(&table, &snapshot);
    }

    #[test]
    fn changing_a_frontends_sni_is_reversible(
        base in prop::collection::vec(route(), 1..20),
        which in any::<Index>(),
        new_pattern in pattern(),
    ) {
        let mut table = RouteTable::new();
        let mut model = Model::default();
        let added = build(&mut table, &mut model, base)?;
        let snapshot = table.clone();
        let (old_pattern, alpn, cluster) = which.get(&added).clone();

        prop_assert_eq!(table.remove(&old_pattern, &alpn), Some(cluster.clone()));
        let removed = table.clone();
        let len = table.len();
        match table.insert(new_pattern.clone(), alpn.clone(), cluster.clone()) {
            Ok(()) if table.len() > len => {
                table.check_invariants();
                prop_assert_eq!(table.remove(&new_pattern, &alpn), Some(cluster.clone()));
            }
            // Already there with that cluster, or refused: nothing changed.
            Ok(()) | Err(_) => prop_assert_eq!(&table, &removed),
        }
        prop_assert_eq!(table.insert(old_pattern, alpn, cluster), Ok(()));
        table.check_invariants();
        prop_assert_eq!(&table, &snapshot);
    }

    #[test]
    fn lookup_agrees_with_the_linear_reference(
        routes in prop::collection::vec(route(), 0..30),
        queries in prop::collection::vec((raw_name(), offer()), 1..20),
    ) {
        let mut table = RouteTable::new();
        let mut model = Model::default();
        build(&mut table, &mut model, routes)?;
        for (raw, offer) in queries {
            let Some(name) = HostName::normalize(raw.as_bytes()) else {
                continue;
            };
            let (found, allocations) = allocations_during(|| {
                table.lookup(name.as_bytes(), offer.iter().map(|p| p.as_bytes()))
            });
            prop_assert_eq!(allocations, 0, "lookup of {} allocated", name);
            prop_assert_eq!(Outcome::from(found), model.lookup(name.as_str(), &offer), "{} {:?}", name, offer);
        }
    }
}
