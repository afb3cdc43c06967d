//! `preread fleet status` and `preread fleet publish`, on etcd: the
//! replicas' status keys read and judged, and a config file's clusters
//! written as route keys in one transaction.
//!
//! Owns: the reads and the transaction. Must never: judge or plan
//! anything itself (`command::sources::etcd` does: [`judge`],
//! [`published_keys`]), or write outside `<prefix>routes/`.
//!
//! [`judge`]: command::sources::etcd::judge
//! [`published_keys`]: command::sources::etcd::published_keys

use std::collections::BTreeMap;

use command::config::EtcdSettings;
use command::sources::etcd::{FleetReport, judge, route_name};
use etcdv3client::pb;

use super::{Connection, EtcdError};

/// Reads every replica's status key and judges it against the route
/// keys' last change, `expect` replicas expected.
///
/// # Errors
///
/// No member answered, or a read failed.
pub async fn status(
    settings: &EtcdSettings,
    expect: Option<usize>,
) -> Result<FleetReport, EtcdError> {
    let (mut connection, _) = Connection::any(settings, 0).await?;
    let routes_prefix = settings.routes_prefix();
    let (_, routes) = connection.read_prefix(routes_prefix.as_bytes()).await?;
    let status_prefix = settings.status_prefix();
    let (_, statuses) = connection.read_prefix(status_prefix.as_bytes()).await?;
    let statuses: Vec<(String, Vec<u8>)> = statuses
        .into_iter()
        .filter_map(|kv| {
            let name = kv.key.strip_prefix(status_prefix.as_bytes())?;
            Some((String::from_utf8_lossy(name).into_owned(), kv.value))
        })
        .collect();
    // A replica serves the revision of the last change it applied: the
    // route keys' newest one, or a newer one a replica saw (a deletion).
    let newest_key = routes.iter().map(|kv| kv.mod_revision).max().unwrap_or(0);
    let mut report = judge(newest_key, &statuses, expect);
    let newest = report
        .replicas
        .iter()
        .filter_map(|r| r.status.as_ref().ok().map(|s| s.revision))
        .chain([newest_key])
        .max()
        .unwrap_or(0);
    if newest > newest_key {
        report = judge(newest, &statuses, expect);
    }
    Ok(report)
}

/// What a publish does (or would do, dry).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Publication {
    /// Route names written (new or changed).
    pub written: Vec<String>,
    /// Route names the file no longer has, deleted.
    pub deleted: Vec<String>,
    /// Route names already holding the file's text.
    pub unchanged: usize,
    /// The store revision of the transaction (0 when dry or nothing to do).
    pub revision: i64,
}

/// Writes `keys` (name, TOML) as the route keys and deletes the route
/// keys not among them, in one transaction; `dry` only says what it
/// would do.
///
/// # Errors
///
/// No member answered, or the transaction failed (etcd refuses one of
/// more operations than its `--max-txn-ops`, 128 by default).
pub async fn publish(
    settings: &EtcdSettings,
    keys: &[(String, String)],
    dry: bool,
) -> Result<Publication, EtcdError> {
    let (mut connection, _) = Connection::any(settings, 0).await?;
    let routes_prefix = settings.routes_prefix();
    let (_, existing) = connection.read_prefix(routes_prefix.as_bytes()).await?;
    let existing: BTreeMap<String, Vec<u8>> = existing
        .into_iter()
        .filter_map(|kv| Some((route_name(&kv.key, &routes_prefix)?.to_owned(), kv.value)))
        .collect();
    let wanted: BTreeMap<&str, &str> = keys.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let mut publication = Publication::default();
    let mut ops = Vec::new();
    for (name, value) in &wanted {
        if existing.get(*name).is_some_and(|v| v == value.as_bytes()) {
            publication.unchanged += 1;
            continue;
        }
        publication.written.push((*name).to_owned());
        ops.push(pb::RequestOp {
            request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                key: format!("{routes_prefix}{name}").into_bytes(),
                value: value.as_bytes().to_vec(),
                ..Default::default()
            })),
        });
    }
    for name in existing.keys().filter(|n| !wanted.contains_key(n.as_str())) {
        publication.deleted.push(name.clone());
        ops.push(pb::RequestOp {
            request: Some(pb::request_op::Request::RequestDeleteRange(
                pb::DeleteRangeRequest {
                    key: format!("{routes_prefix}{name}").into_bytes(),
                    ..Default::default()
                },
            )),
        });
    }
    if dry || ops.is_empty() {
        return Ok(publication);
    }
    let txn = pb::TxnRequest {
        success: ops,
        ..Default::default()
    };
    let endpoint = connection.endpoint().to_owned();
    let done = super::bounded(&endpoint, "txn", connection.client.kv.txn(txn)).await?;
    publication.revision = done.header.map_or(0, |h| h.revision);
    Ok(publication)
}
