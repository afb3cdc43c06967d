//! What `preread explain CODE` prints: for each rule, what it means, what
//! is accepted, how to fix a refusal, and the section of
//! `doc/configure.md` that documents it.
//!
//! Must never: say something `doc/configure.md` does not (the
//! `explain_doc` test holds the two together).

use super::{ErrorCode, Explanation};

impl ErrorCode {
    /// The operator-facing description of the rule.
    #[must_use]
    pub fn explain(self) -> Explanation {
        let (title, meaning, accepted, fix, section) = match self {
            Self::InvalidToml => (
                "the config file is not valid TOML",
                "The config file could not be parsed as TOML, a value has the wrong type (a \
                 string where a number is expected, a table where a list is expected), or a \
                 required key is missing. The message names the key by its dotted path \
                 (clusters.www.frontends[0].alpn), the type expected (with the unit of a \
                 duration) and the value as written. `preread config check` reports every \
                 problem in one pass; a TOML syntax error is the one exception, since the \
                 file cannot be read past it, and its message says that the check stopped \
                 there.",
                "A TOML document as doc/configure.md describes it: global keys, [[listeners]] \
                 tables and [clusters.<id>] tables, each key with the type its table lists.",
                "Fix the syntax or the type at the line and column the message gives. After a \
                 syntax error, run the check again: the problems past it were not looked at.",
                "2",
            ),
            Self::UnknownKey => (
                "unknown key in the config file",
                "The config file holds a key that preread does not know, at any level. \
                 Unknown keys are refused rather than ignored so that a typo cannot silently \
                 disable a setting.",
                "Only the keys documented in doc/configure.md, spelled exactly (snake_case); \
                 the message lists the keys valid in that table.",
                "Correct the spelling of the key (the message suggests the closest valid key \
                 when one is close enough to be a typo), or remove it.",
                "2",
            ),
            Self::InvalidValue => (
                "invalid value in the config file",
                "A config value has the right type but is not one of the accepted values \
                 (an unknown load-balancing algorithm or proxy-protocol mode, a negative \
                 count, an unknown log format, a duration string that is not one or needs a \
                 unit finer than a millisecond, also over the command socket and in a saved \
                 state file).",
                "The values listed for the key in doc/configure.md, e.g. load_balancing = \
                 \"round_robin\" | \"random\" | \"least_connections\" | \"power_of_two\".",
                "Replace the value with one of the accepted ones.",
                "2",
            ),
            Self::StateFileCorrupt => (
                "the saved state file is corrupt",
                "The saved state file does not start with a preread header, or a line of it is \
                 not a valid JSON request. Its trailer matched (a mismatch is E013), so the \
                 file is as it was written: it was built or edited by another tool.",
                "A header line, one JSON request per line and the trailer, as written by \
                 `preread state save`.",
                "Restore the file from a backup, or fix the line the message names and reseal \
                 the file with `preread state seal -f FILE`, or delete it to rebuild the state \
                 from the config file.",
                "6",
            ),
            Self::StateFileVersion => (
                "the saved state file has an incompatible version",
                "The saved state file was written by a preread version whose format this one \
                 cannot read. Version 1 files, written before the integrity trailer (E013) \
                 existed, are refused too: a version 1 file cut at a line boundary cannot be \
                 told from a whole one.",
                "State files of the version this preread writes (its header line says which).",
                "For a version 1 file: check that it holds every route it should, then convert \
                 it with `preread state seal -f FILE`, which replays it and rewrites it with a \
                 trailer. For another version: run the preread version that wrote it, or delete \
                 the file to rebuild the state from the config file.",
                "6",
            ),
            Self::StateFileIo => (
                "the saved state file could not be read or written",
                "Opening, reading, writing, syncing or renaming the state file failed (missing \
                 directory, permissions, full disk), or the path names something that is not a \
                 regular file (a FIFO, a device, a directory), or a file over the 64 MiB cap. \
                 Only regular files are read, so a FIFO or a device cannot hold up the proxy.",
                "A path in a writable directory for saving, a readable regular file of at most \
                 64 MiB for loading.",
                "Check the path, its directory and its permissions, and the free space; give \
                 the path of a regular file.",
                "6",
            ),
            Self::StateFileIntegrity => (
                "the saved state file is incomplete or altered",
                "A state file ends with a trailer line that holds the number of requests before \
                 it and their CRC-32. The trailer is missing (the file was cut short, even at a \
                 line boundary), or the count or the checksum do not match (lines were lost, \
                 added or edited). Nothing of the file is applied: a partial state would boot \
                 with routes missing.",
                "A state file as `preread state save` or `automatic_state_save` writes it, \
                 trailer included: `{\"preread_state_end\":{\"requests\":N,\"crc32\":\"…\"}}`.",
                "Restore the file from a backup, or delete it to boot from the config file. If \
                 the file was edited by hand on purpose, check it and reseal it with `preread \
                 state seal -f FILE`.",
                "6",
            ),
            Self::StateFileEmpty => (
                "the saved state file is empty but the config declares routing",
                "The saved state file is valid but holds no listener, cluster, frontend or \
                 backend, while the config file declares some. Booting from it would silently \
                 drop every declaration of the config; booting from the config would silently \
                 undo the change that emptied the state. preread does neither unless \
                 `empty_saved_state` says which.",
                "empty_saved_state = \"refuse\" (the default: do not start), \"use_config\" \
                 (boot from the config's declarations) or \"keep_empty\" (boot with no \
                 routing).",
                "Set empty_saved_state to \"use_config\" or \"keep_empty\", or delete the \
                 state file to boot from the config.",
                "6",
            ),
            Self::StateJournalCorrupt => (
                "the saved state's journal is damaged",
                "With automatic_state_save, every accepted change is appended to the journal \
                 beside the state file (<saved_state>.journal) as a record with its own length \
                 and CRC-32, and the state file is a snapshot that holds the journal up to the \
                 record its header names (journal_seq). A last record cut short or damaged \
                 with nothing after it is an append a crash interrupted, never acknowledged: \
                 it is dropped with a warning. This code is for everything else: the journal \
                 has no valid header, a record before the last one fails its checks, record \
                 numbers do not follow each other, or the first record after the snapshot is \
                 missing (an older copy of the state file put back beside a newer journal). \
                 Nothing of either file is applied.",
                "A journal as preread writes it: {\"preread_journal\":1}, then records, each a \
                 head line {\"journal_record\":{\"seq\":N,\"requests\":R,\"bytes\":B,\
                 \"crc32\":\"…\"}} followed by B bytes of R request lines; seq numbers rise by \
                 one, and the first after the snapshot's journal_seq is journal_seq + 1.",
                "Put back the state file and the journal as they were saved together, or \
                 restore both from a backup. To boot from the snapshot alone, losing the \
                 changes after it, move the journal away; to boot from the config file, move \
                 both away.",
                "6",
            ),
            Self::InvalidAddress => (
                "invalid socket address",
                "A listener, frontend or `metrics_address` is not an IP address and port, or a \
                 backend is neither `ip:port` nor `name:port`, or the port is 0. A listener \
                 binds an address of this host, so it takes no name; a backend's name is \
                 resolved by the proxy (at load and every `resolve_interval`). Addresses are \
                 stored canonically, so `127.0.0.1:0080` and `127.0.0.1:80` are the same, and \
                 so are `DB.internal.:5432` and `db.internal:5432`.",
                "`127.0.0.1:8443`, `0.0.0.0:443`, `[::1]:8443`, `[::]:443`; for backends also \
                 `db.internal:5432` or `localhost:9001`; port 1 to 65535.",
                "Write the address as `ip:port` (IPv6 in brackets), or `name:port` for a \
                 backend, with a fixed, non-zero port.",
                "2.2",
            ),
            Self::PrereadMaxBytesTooSmall => (
                "sni_preread_max_bytes is too small",
                "The preread window cap must hold at least a TLS record header (5 bytes), or \
                 no ClientHello could ever be read. A real ClientHello needs far more: 512 to \
                 2048 bytes usually, more with post-quantum key shares.",
                "sni_preread_max_bytes >= 5; the default 65536 holds a ClientHello of \
                 several records (post-quantum key shares, large session tickets).",
                "Raise sni_preread_max_bytes, or remove it to use the default 65536.",
                "2.2",
            ),
            Self::InvalidTimeout => (
                "a timeout is 0",
                "sni_preread_timeout, server_first_timeout, front_timeout, back_timeout and \
                 connect_timeout must be positive: 0 would close or reroute every connection \
                 at once.",
                "A positive duration: a duration string such as \"1500ms\" or \"5s\", or a \
                 bare integer in the key's unit (milliseconds for sni_preread_timeout and \
                 server_first_timeout, seconds for front/back/connect_timeout).",
                "Set a positive value, or remove the key to use its default (5s, none, 60s, \
                 30s, 3s).",
                "2.2",
            ),
            Self::ServerFirstWithoutDefaultCluster => (
                "server_first_timeout without default_cluster",
                "server_first_timeout sends a client that stays silent to the listener's \
                 default_cluster (for server-speaks-first protocols such as SMTP); without a \
                 default_cluster there is nowhere to send it.",
                "server_first_timeout together with default_cluster on the same listener.",
                "Add default_cluster = \"<cluster id>\" to the listener, or remove \
                 server_first_timeout.",
                "2.2",
            ),
            Self::ListenerConflict => (
                "the listener already exists with other settings",
                "A listener was added at an address that already has a listener of the \
                 same protocol with different settings (or a different active flag). Adding \
                 an identical listener again is accepted and changes nothing.",
                "One listener per protocol and socket address: a TCP and a QUIC listener \
                 may share an address.",
                "Send update_tcp_listener to change its settings, or remove it first.",
                "2.2",
            ),
            Self::ListenerProtocolSetting => (
                "a setting of the other protocol's listeners",
                "A TCP listener carries a QUIC-only setting (quic_preread_timeout, \
                 quic_idle_timeout, max_flows, max_flows_per_ip, reject_with = \"drop\"), or \
                 a QUIC listener a TCP-only one (expect_proxy, server_first_timeout, \
                 max_unrouted_per_ip, reject_with = \"alert\" or \"reset\"). A datagram \
                 has no PROXY header and no stream to reset.",
                "On protocol = \"quic\": quic_preread_timeout, quic_idle_timeout, max_flows, \
                 max_flows_per_ip, default_cluster, reject_with = \"close\" | \"drop\".",
                "Remove the setting, or set the listener's protocol to the one it belongs to.",
                "8",
            ),
            Self::UnknownListener => (
                "no listener at the frontend's address",
                "A frontend names an address where no listener is declared. Frontends attach \
                 to listeners; the listener must exist first.",
                "A frontend address equal (canonically) to a listener's address.",
                "Add the listener (`[[listeners]]` or `preread listener tcp add`) before the \
                 frontend, or correct the frontend's address.",
                "2.4",
            ),
            Self::InvalidAccessPrefix => (
                "an allow or deny entry is not a CIDR prefix",
                "A listener's or a cluster's `allow` and `deny` lists hold IPv4 and IPv6 \
                 prefixes, each an address/length (a bare address is its /32 or /128). An \
                 entry with bits set past its length is refused rather than truncated: it is \
                 usually a typo, and the message names the network it would have been.",
                "10.0.0.0/8, 192.0.2.7/32, 192.0.2.7, 2001:db8::/32, ::1; lengths 0 to 32 \
                 (IPv4) or 0 to 128 (IPv6).",
                "Write the network the message suggests (10.1.2.3/8 is 10.0.0.0/8), a length \
                 within the family's range, or an address instead of a name.",
                "2.7",
            ),
            Self::InvalidConnectionRate => (
                "connection_rate_per_ip is not a rate",
                "`connection_rate_per_ip = { rate, per, burst }` is a token bucket per \
                 source: a full bucket holds `burst` connections, and `rate` come back every \
                 `per`. Each must be positive, and `per` at most a day.",
                "rate and burst from 1 to 4294967295, per from 1ms to 24h, at least 1ns per \
                 connection; burst unset is rate.",
                "Set rate and burst to at least 1 and per to a duration such as \"1s\"; for a \
                 limit over a longer span, scale rate with per.",
                "2.7",
            ),
            Self::InvalidIpv6Prefix => (
                "ipv6_prefix is past 128",
                "IPv6 sources are counted (rates, per-IP limits) per network of \
                 `ipv6_prefix` bits, since one host commonly holds a whole /64.",
                "0 to 128; unset is 64.",
                "Use a prefix length from 0 to 128, or leave ipv6_prefix unset.",
                "2.7",
            ),
            Self::InvalidJa4 => (
                "invalid deny_ja4 fingerprint",
                "deny_ja4 on a listener or a cluster refuses the clients whose JA4 TLS                  fingerprint it lists, with an access_denied alert. Each entry is a whole                  fingerprint as the access log's ja4= and `preread inspect` print it.",
                "36 characters: t, q or d; a version (13, 12, 11, 10, s3, s2, d1, d2, d3, 00);                  d or i; two two-digit counts; two letters or digits; `_`; 12 lower-case hex                  digits; `_`; 12 more. For example t13d1516h2_8daaf6152771_e5627efa2ab1.",
                "Copy the fingerprint whole from the access log or `preread inspect`; the                  message says which character is wrong.",
                "5.8",
            ),
            Self::InvalidSniPattern => (
                "invalid SNI pattern",
                "A frontend's sni is not a valid DNS name or wildcard. Patterns are \
                 normalized (lowercase, one trailing dot stripped) when added.",
                "`a.example.com` (exactly that name), `*.example.com` (exactly one label in \
                 front), `**.example.com` (one or more labels in front); labels of ASCII \
                 letters, digits and hyphens, at most 63 bytes, 253 in all; wildcards need two \
                 labels after them; internationalized names in punycode (`xn--...`).",
                "Correct the pattern as the message says; to catch connections whose name \
                 matches nothing, use the listener's default_cluster, not a broad wildcard.",
                "2.4",
            ),
            Self::InvalidAlpn => (
                "invalid ALPN list",
                "A frontend's alpn list holds an empty name, a name longer than 255 bytes, or \
                 the same name twice.",
                "A list of distinct protocol names of 1 to 255 bytes, such as \
                 [\"h2\", \"http/1.1\"]; or no list at all, which matches any offer.",
                "Remove the empty or repeated names, or the whole list to accept any ALPN.",
                "2.4",
            ),
            Self::AlpnProtocolTaken => (
                "ALPN protocol already listed by another frontend",
                "Two frontends of one (address, sni) list the same ALPN protocol, so a client \
                 offering it could go to either. Resolution must be unambiguous.",
                "Frontends of one (address, sni) with disjoint ALPN lists, plus at most one \
                 frontend without a list (the fallback for offers no list takes).",
                "Remove the protocol from one of the two frontends, or remove the existing \
                 frontend first.",
                "2.4",
            ),
            Self::FrontendConflict => (
                "frontend already exists with another cluster",
                "A frontend with the same key (address, sni, alpn) already exists and routes \
                 to another cluster, or carries other tags. Adding an identical frontend again \
                 is accepted and changes nothing.",
                "One frontend per (address, sni, alpn).",
                "Remove the existing frontend first, or give the new one another sni or alpn.",
                "2.4",
            ),
            Self::CatchAllMixedWithSni => (
                "catch-all frontend mixed with SNI frontends",
                "A frontend without sni takes every connection of its listener without \
                 reading the ClientHello, so it cannot share a listener with frontends that \
                 route by SNI.",
                "A listener with either one frontend without sni (plain TCP proxying), or \
                 only frontends with sni.",
                "To send connections that match no SNI frontend (no SNI, unknown name, not \
                 TLS) somewhere, set the listener's default_cluster instead of adding a \
                 frontend without sni; or move the catch-all to its own listener.",
                "2.4",
            ),
            Self::MultipleCatchAll => (
                "second catch-all frontend on a listener",
                "A listener already has a frontend without sni routing to another cluster; \
                 a listener has at most one catch-all.",
                "At most one frontend without sni per listener.",
                "Remove the existing catch-all frontend first, or add the new one on another \
                 listener.",
                "2.4",
            ),
            Self::AlpnWithoutSni => (
                "ALPN list on a frontend without SNI",
                "A catch-all frontend (no sni) does not read the ClientHello, so it cannot \
                 match on ALPN.",
                "A frontend without sni has no alpn list.",
                "Add an sni pattern to the frontend, or remove its alpn list.",
                "2.4",
            ),
            Self::RelayWithoutExpectProxy => (
                "relay cluster behind a listener without expect_proxy",
                "A cluster with proxy_protocol = \"relay\" forwards the client's inbound PROXY \
                 header, so every listener that reaches it (through a frontend or as its \
                 default_cluster) must expect one.",
                "proxy_protocol = \"relay\" only on clusters reached through listeners with \
                 expect_proxy = true.",
                "Set expect_proxy = true on the listener, or use proxy_protocol = \"send\" \
                 (preread writes its own header) or \"none\" on the cluster.",
                "2.3",
            ),
            Self::ProtocolMismatch => (
                "a listener and a cluster of different protocols",
                "A frontend, or a listener's default_cluster, joins a listener and a cluster \
                 that speak different protocols: a QUIC cluster's frontend at an address \
                 that has only a TCP listener, or the reverse, or a frontend request whose \
                 protocol is not its cluster's. A TCP backend cannot take a QUIC flow \
                 (UDP datagrams), nor a QUIC backend a TCP stream.",
                "protocol = \"quic\" on the cluster of every frontend (and the \
                 default_cluster) of a QUIC listener, and no protocol (or \"tcp\") on those \
                 of a TCP listener.",
                "Add the listener of the cluster's protocol at that address (a TCP and a \
                 QUIC listener may share one), point the frontend at a cluster of the \
                 listener's protocol, or name the frontend with its cluster's protocol \
                 (preread frontend quic or tcp).",
                "8",
            ),
            Self::InvalidId => (
                "invalid cluster or backend id",
                "A cluster or backend id is empty, longer than 128 bytes, or holds something \
                 other than printable ASCII (spaces and control characters are refused). Ids \
                 appear in metric names and logs.",
                "1 to 128 printable ASCII characters without spaces, e.g. `alpha`, \
                 `alpha-0`.",
                "Rename the cluster or backend.",
                "2.3",
            ),
            Self::UnknownCluster => (
                "unknown cluster",
                "A frontend, a backend or a listener's default_cluster names a cluster that \
                 does not exist.",
                "The id of a cluster that was added before.",
                "Add the cluster first (`[clusters.<id>]` or `preread cluster add`), or \
                 correct the id.",
                "2.4",
            ),
            Self::ClusterConflict => (
                "the cluster already exists with other settings",
                "A cluster was added with an id that already exists with different settings. \
                 Adding an identical cluster again is accepted and changes nothing.",
                "One cluster per id.",
                "Change its settings in place with `preread cluster update` (its frontends and \
                 backends stay), or let `preread reload` do it from the edited config file.",
                "4.5",
            ),
            Self::DuplicateBackendId => (
                "backend id already in use",
                "Backend ids are unique across all clusters, because per-backend metrics are \
                 named `backend.<id>.…`.",
                "A backend id used by one backend only, e.g. prefixed with its cluster id: \
                 `alpha-0`.",
                "Pick another backend_id, or remove the other backend first.",
                "2.5",
            ),
            Self::BackendConflict => (
                "the backend already exists with other settings",
                "A backend was added again with the same cluster and backend id but another \
                 address, weight or backup flag. Adding an identical backend again is \
                 accepted and changes nothing.",
                "One backend per (cluster_id, backend_id).",
                "Remove the backend and add it again with the new settings, or use another \
                 backend_id.",
                "2.5",
            ),
            Self::QuicClusterSetting => (
                "a QUIC cluster with a TCP-only setting",
                "A cluster with protocol = \"quic\" sets proxy_protocol or health_check. A \
                 PROXY header cannot precede a QUIC datagram, and the health checks connect \
                 over TCP.",
                "A QUIC cluster with load_balancing, max_connections_per_ip, frontends and \
                 backends (UDP addresses of QUIC servers).",
                "Remove proxy_protocol and health_check from the QUIC cluster.",
                "8",
            ),
            Self::NotFound => (
                "no such object",
                "A request removes, updates, activates or deactivates a listener, cluster, \
                 frontend or backend that does not exist (for frontends and backends, with \
                 exactly the given key, cluster and address).",
                "The key of an existing object, as listed by `preread listener list`, \
                 `cluster list` or `frontend list`.",
                "Check the address, id, sni and alpn against the list; nothing needs to be \
                 done if the object is already gone.",
                "4.5",
            ),
            Self::InUse => (
                "object still in use",
                "A cluster cannot be removed while a frontend, a backend or a listener's \
                 default_cluster references it; a listener cannot be removed while it has \
                 frontends.",
                "Removing objects in dependency order: frontends and backends, then \
                 listeners and clusters.",
                "Remove (or repoint) the objects the message names first.",
                "4.5",
            ),
            Self::UnsupportedRequest => (
                "not a state change",
                "Only requests that change the routing state (add, update, remove, activate, \
                 deactivate) are validated and applied to the state; status, list, metrics, \
                 save/load and stop requests are answered elsewhere.",
                "add/update/remove/activate/deactivate listener, add/remove cluster, \
                 add/remove frontend, add/remove backend.",
                "Send the request to the command server, which answers it directly.",
                "6",
            ),
            Self::PrereadTimeoutShort => (
                "a preread timeout under 50 ms",
                "sni_preread_timeout (or server_first_timeout) is under 50 milliseconds. A \
                 ClientHello over a slow or distant link can take longer than that to arrive \
                 whole, and such clients would be refused (silent_timeout, or an incomplete \
                 ClientHello) or sent to the default cluster. A bare integer here is \
                 milliseconds, so sni_preread_timeout = 5 is 5 ms, not 5 s. This is a \
                 warning: the value is used as written.",
                "A duration of 50 ms or more; the default sni_preread_timeout is 5s. Writing \
                 the unit (\"5s\", \"300ms\") says what is meant.",
                "Write the duration with its unit, such as sni_preread_timeout = \"5s\"; keep \
                 a value under 50 ms only for tests on one machine.",
                "3.3",
            ),
            Self::InactivityTimeoutLong => (
                "a front or back timeout over a day",
                "front_timeout or back_timeout is over 24 hours. Idle sessions hold a socket \
                 (and, while they are not spliced, buffers) for that long, so a pile of \
                 abandoned clients can exhaust max_connections. A bare integer here is \
                 seconds. This is a warning: the value is used as written.",
                "A duration of at most a day, such as \"60s\" or \"1h\"; the defaults are 60s \
                 and 30s.",
                "Lower the timeout, or write it with its unit (\"36h\") if a day or more is \
                 meant; the warning stays as a reminder.",
                "3.3",
            ),
            Self::ConnectTimeoutLong => (
                "a connect timeout over a minute",
                "connect_timeout is over 60 seconds. A backend that does not answer a connect \
                 within seconds is down or unreachable, and each client waits this long per \
                 attempt (max_connection_attempts) before it is refused. A bare integer here \
                 is seconds. This is a warning: the value is used as written.",
                "A duration of at most a minute, such as \"3s\" (the default) or \"500ms\".",
                "Lower connect_timeout to a few seconds.",
                "3.3",
            ),
            Self::SecondsLikeMilliseconds => (
                "a number of seconds that reads like milliseconds",
                "A key whose bare integers are seconds (front_timeout, back_timeout, \
                 connect_timeout, soft_stop_grace, command_client_timeout) holds a multiple \
                 of 1000 of at least 1000, such as front_timeout = 60000: 60000 seconds is \
                 16 hours 40 minutes, while 60000 milliseconds is the 1 minute that was \
                 probably meant. This is a warning: the value is used as written, in \
                 seconds.",
                "A bare integer of seconds (front_timeout = 60), or a duration string with its \
                 unit (front_timeout = \"60s\", \"1500ms\", \"16h 40m\").",
                "Write the duration with its unit: \"60s\" if milliseconds were meant, or a \
                 string such as \"16h 40m\" if the long value is intended (a string never \
                 gets this warning).",
                "3.3",
            ),
            Self::PrereadCapSmall => (
                "sni_preread_max_bytes too small for today's ClientHellos",
                "sni_preread_max_bytes is under 2048 bytes. Browsers that offer a post-quantum \
                 key share (X25519MLKEM768) send ClientHellos of about 1,800 bytes or more, \
                 which a smaller cap refuses as too_large. This is a warning: the value is \
                 used as written.",
                "sni_preread_max_bytes of 2048 or more; the default 65536 holds any \
                 ClientHello in one record.",
                "Raise sni_preread_max_bytes, or remove it to use the default.",
                "3.3",
            ),
            Self::NoBackendCanServe => (
                "no backend of the cluster can be picked",
                "Every backend of a cluster has weight = 0, and a backend of weight 0 is \
                 never picked (it drains), so every connection routed to the cluster is \
                 refused as backend_unavailable. This is a warning: draining every backend \
                 can be meant during maintenance.",
                "At least one backend of the cluster with a positive weight (the default is \
                 100).",
                "Give one backend a positive weight, or remove weight = 0 from it.",
                "3.3",
            ),
            Self::ClusterDeclaredElsewhere => (
                "cluster already declared by another source",
                "A route source (Docker labels, a file of the watched directory) declares a \
                 cluster whose id the config file or another fragment already declares. A \
                 cluster belongs to one place, so that no source can add backends to, or \
                 change the settings of, a cluster it does not own. The fragment is left out \
                 of the running state (`preread sources` lists it) and retried whenever any \
                 source changes; the fragment that had the cluster first keeps it.",
                "Cluster ids that are unique across the config file, every file of the \
                 directory and every Docker label name.",
                "Rename the cluster (the `[clusters.<id>]` table, or the `<name>` of \
                 `preread.tcp.<name>.*`), or remove the other declaration.",
                "7",
            ),
            Self::InvalidLabel => (
                "invalid Docker label",
                "A container label under `preread.` does not parse: an unknown key, a \
                 missing `listener` or `port`, a port that is not 1 to 65535, an address \
                 that is not an IP, a weight that is not an integer, an unknown \
                 proxy_protocol, or a container with no address on its network and no \
                 `.address` label. That container is left out of its cluster; the other \
                 containers of the same name still serve.",
                "`preread.tcp.<name>.listener` = ip:port or *:port (required), `.sni` or \
                 `.sni.0`, `.sni.1`… = SNI patterns, `.alpn` = h2,http/1.1, `.port` = \
                 1-65535 (required), `.address` = an IP, `.proxy_protocol` = none | send | \
                 relay, `.weight` = an integer; `<name>` has no dot.",
                "Fix the label on the container (labels change only when the container is \
                 created again: `docker run` it anew, or `docker compose up`).",
                "7",
            ),
            Self::LabelsDisagree => (
                "containers of one name disagree",
                "All running containers whose labels share one `<name>` form one cluster, \
                 with one backend per container, so the cluster settings they carry \
                 (`proxy_protocol`) must agree. Their routes (listener, sni, alpn) are \
                 merged. When they disagree, the whole name is left out of the running \
                 state until they agree again.",
                "The same `preread.tcp.<name>.proxy_protocol` on every container of the name \
                 (or on none).",
                "Give every container of the name the same proxy_protocol, or use another \
                 `<name>` for the containers that need another one.",
                "7",
            ),
            Self::AmbiguousListenerPort => (
                "listener port matches several listeners",
                "In a route source, a frontend's listener may be written `*:PORT`: the one \
                 listener of this proxy on PORT, whatever its IP, so replicas that each \
                 listen on their own address can share one directory or one set of labels. \
                 This proxy has several listeners on that port, so the choice is ambiguous.",
                "`*:PORT` where exactly one listener of the config file listens on PORT, or \
                 the listener's full address.",
                "Write the listener's full ip:port in the fragment, or give each listener \
                 its own port.",
                "7",
            ),
            Self::EtcdTlsFile => (
                "etcd TLS file unreadable",
                "`[sources.etcd]` names a `ca_file`, `cert_file` or `key_file` that the \
                 proxy cannot read, or that holds no PEM certificate (`ca_file`, \
                 `cert_file`) or PEM private key (`key_file`). Without it the proxy cannot \
                 talk TLS to etcd's members, and the source stays disconnected.",
                "A readable PEM file: the CA certificate(s) that sign the members' \
                 certificates, the client certificate, and its private key; a relative path \
                 is read beside the config file.",
                "Correct the path or the file's permissions, or give the PEM file itself \
                 (not a DER or PKCS#12 one: convert it with `openssl x509 -inform der` or \
                 `openssl pkcs12 -nodes`).",
                "7",
            ),
        };
        Explanation {
            title,
            meaning,
            accepted,
            fix,
            section,
        }
    }
}
