//! Turns a parsed command line into the protobuf request the proxy answers.
//!
//! Owns: the mapping from CLI arguments to `command::proto::Request`. Must
//! never: validate what the server validates (the server's `ConfigState`
//! is the one judge, so a CLI cannot drift from it) or touch a socket.

use command::proto::{self, request::RequestType};

use super::args::{
    AccessArgs, BackendAction, BackendArgs, ClusterAction, ClusterArgs, Command, FrontendAction,
    FrontendArgs, ListenerAction, MetricsAction, QuicListenerAction, QuicListenerArgs, StateAction,
    TcpFrontendAction, TcpListenerAction, TcpListenerArgs,
};

fn request(request_type: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(request_type),
    }
}

fn listener_config(args: &TcpListenerArgs) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        address: args.address.clone(),
        expect_proxy: args.expect_proxy,
        sni_preread_timeout: args.sni_preread_timeout,
        sni_preread_max_bytes: args.sni_preread_max_bytes,
        default_cluster: args.default_cluster.clone(),
        server_first_timeout: args.server_first_timeout,
        front_timeout: None,
        back_timeout: None,
        connect_timeout: None,
        active: None,
        reject_with: args.reject_with.map(|with| with as i32),
        max_unrouted_per_ip: args.max_unrouted_per_ip,
        front_timeout_ms: args.front_timeout,
        back_timeout_ms: args.back_timeout,
        connect_timeout_ms: args.connect_timeout,
        allow: args.access.allow.clone(),
        deny: args.access.deny.clone(),
        connection_rate_per_ip: connection_rate(&args.access),
        ipv6_prefix: args.access.ipv6_prefix,
        protocol: None,
        quic_preread_timeout_ms: None,
        quic_idle_timeout_ms: None,
        max_flows: None,
        max_flows_per_ip: None,
        deny_ja4: args.access.deny_ja4.clone(),
    }
}

fn quic_listener_config(args: &QuicListenerArgs) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        address: args.address.clone(),
        default_cluster: args.default_cluster.clone(),
        reject_with: args.reject_with.map(|with| with as i32),
        protocol: Some(proto::ListenerProtocol::Quic as i32),
        quic_preread_timeout_ms: args.quic_preread_timeout,
        quic_idle_timeout_ms: args.quic_idle_timeout,
        max_flows: args.max_flows,
        max_flows_per_ip: args.max_flows_per_ip,
        allow: args.access.allow.clone(),
        deny: args.access.deny.clone(),
        connection_rate_per_ip: connection_rate(&args.access),
        ipv6_prefix: args.access.ipv6_prefix,
        deny_ja4: args.access.deny_ja4.clone(),
        ..Default::default()
    }
}

/// `--rate RATE/PER` with `--burst`.
fn connection_rate(access: &AccessArgs) -> Option<proto::ConnectionRate> {
    access.rate.map(|(rate, per_ms)| proto::ConnectionRate {
        rate,
        per_ms,
        burst: access.burst,
    })
}

fn cluster(args: &ClusterArgs) -> proto::Cluster {
    proto::Cluster {
        cluster_id: args.id.clone(),
        load_balancing: args.load_balancing.into(),
        proxy_protocol: args.proxy_protocol.into(),
        max_connections_per_ip: args.max_connections_per_ip,
        health_check: args.health_check.map(|kind| proto::HealthCheck {
            kind: kind.into(),
            interval_ms: args.health_check_interval,
            timeout_ms: args.health_check_timeout,
            rise: args.health_check_rise,
            fall: args.health_check_fall,
        }),
        protocol: match args.protocol {
            Some(proto::ListenerProtocol::Quic) => Some(proto::ListenerProtocol::Quic as i32),
            Some(proto::ListenerProtocol::Tcp) | None => None,
        },
        allow: args.access.allow.clone(),
        deny: args.access.deny.clone(),
        connection_rate_per_ip: connection_rate(&args.access),
        ipv6_prefix: args.access.ipv6_prefix,
        deny_ja4: args.access.deny_ja4.clone(),
    }
}

fn backend(args: &BackendArgs) -> proto::Backend {
    proto::Backend {
        cluster_id: args.cluster.clone(),
        backend_id: args.backend_id.clone(),
        address: args.address.clone(),
        weight: args.weight,
        backup: args.backup,
        max_connections: args.max_connections,
    }
}

/// The `protocol` of a request about a QUIC (`quic`) or a TCP listener or
/// frontend: unset for TCP, as before QUIC existed.
fn protocol(quic: bool) -> Option<i32> {
    quic.then_some(proto::ListenerProtocol::Quic as i32)
}

fn frontend(args: &FrontendArgs, quic: bool) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: args.cluster.clone(),
        address: args.address.clone(),
        sni: args.sni.clone(),
        alpn: args.alpn.clone(),
        tags: Default::default(),
        protocol: protocol(quic),
    }
}

/// The TCP (`quic` false) or QUIC listener at `address`.
fn address(address: &str, quic: bool) -> proto::ListenerAddress {
    proto::ListenerAddress {
        address: address.to_owned(),
        protocol: protocol(quic),
    }
}

/// `frontend tcp|quic add|remove`: a QUIC frontend routes on the QUIC
/// listener of its address, and its cluster must be a QUIC one.
fn frontend_request(action: &TcpFrontendAction, quic: bool) -> RequestType {
    match action {
        TcpFrontendAction::Add(args) => RequestType::AddTcpFrontend(frontend(args, quic)),
        TcpFrontendAction::Remove(args) => RequestType::RemoveTcpFrontend(frontend(args, quic)),
    }
}

/// The request a socket subcommand sends; `None` for the offline ones
/// (`config`, `explain`, `inspect`, `state seal`) and for `reload`, which
/// sends a diff.
pub fn for_command(command: &Command) -> Option<proto::Request> {
    let request_type = match command {
        Command::Config { .. }
        | Command::Fleet { .. }
        | Command::Explain { .. }
        | Command::Inspect { .. }
        | Command::State {
            action: StateAction::Seal { .. },
        }
        | Command::Reload
        | Command::Start => {
            return None;
        }
        Command::Status => RequestType::Status(proto::Status {}),
        Command::Sources => RequestType::ListSources(proto::ListSources {}),
        Command::Upgrade { binary, within } => RequestType::Upgrade(proto::Upgrade {
            binary: binary
                .as_ref()
                .map(|b| b.display().to_string())
                .unwrap_or_default(),
            timeout: *within,
        }),
        Command::Shutdown { hard: false } => RequestType::SoftStop(proto::SoftStop {}),
        Command::Shutdown { hard: true } => RequestType::HardStop(proto::HardStop {}),
        Command::Listener { action } => match action {
            ListenerAction::List => RequestType::ListListeners(proto::ListListeners {}),
            ListenerAction::Tcp { action } => match action {
                TcpListenerAction::Add(args) => RequestType::AddTcpListener(listener_config(args)),
                TcpListenerAction::Update(args) => {
                    RequestType::UpdateTcpListener(listener_config(args))
                }
                TcpListenerAction::Remove(a) => {
                    RequestType::RemoveListener(address(&a.address, false))
                }
                TcpListenerAction::Activate(a) => {
                    RequestType::ActivateListener(address(&a.address, false))
                }
                TcpListenerAction::Deactivate(a) => {
                    RequestType::DeactivateListener(address(&a.address, false))
                }
            },
            ListenerAction::Quic { action } => match action {
                QuicListenerAction::Add(args) => {
                    RequestType::AddTcpListener(quic_listener_config(args))
                }
                QuicListenerAction::Update(args) => {
                    RequestType::UpdateTcpListener(quic_listener_config(args))
                }
                QuicListenerAction::Remove(a) => {
                    RequestType::RemoveListener(address(&a.address, true))
                }
                QuicListenerAction::Activate(a) => {
                    RequestType::ActivateListener(address(&a.address, true))
                }
                QuicListenerAction::Deactivate(a) => {
                    RequestType::DeactivateListener(address(&a.address, true))
                }
            },
        },
        Command::Cluster { action } => match action {
            ClusterAction::Add(args) => RequestType::AddCluster(cluster(args)),
            ClusterAction::Update(args) => RequestType::UpdateCluster(cluster(args)),
            ClusterAction::Remove { id } => RequestType::RemoveCluster(proto::ClusterRef {
                cluster_id: id.clone(),
            }),
            ClusterAction::List => RequestType::ListClusters(proto::ListClusters::default()),
        },
        Command::Frontend { action } => match action {
            FrontendAction::List => RequestType::ListFrontends(proto::ListFrontends::default()),
            FrontendAction::Tcp { action } => frontend_request(action, false),
            FrontendAction::Quic { action } => frontend_request(action, true),
        },
        Command::Backend { action } => match action {
            BackendAction::Add(args) => RequestType::AddBackend(backend(args)),
            BackendAction::Update(args) => RequestType::UpdateBackend(backend(args)),
            BackendAction::Remove {
                cluster,
                backend_id,
                address,
            } => RequestType::RemoveBackend(proto::BackendRef {
                cluster_id: cluster.clone(),
                backend_id: backend_id.clone(),
                address: address.clone(),
            }),
            BackendAction::List => RequestType::ListBackends(proto::ListBackends::default()),
        },
        Command::State { action } => match action {
            StateAction::Save { file } => RequestType::SaveState(proto::SaveState {
                path: file.display().to_string(),
            }),
            StateAction::Load { file } => RequestType::LoadState(proto::LoadState {
                path: file.display().to_string(),
            }),
            StateAction::Seal { .. } => return None,
        },
        Command::Metrics {
            action: MetricsAction::Get(_),
        } => RequestType::QueryMetrics(proto::QueryMetrics::default()),
        Command::Rejects {
            reason, listener, ..
        } => RequestType::QueryRejects(proto::QueryRejects {
            reason: reason.clone(),
            listener: listener.map(|a| a.to_string()),
        }),
    };
    Some(request(request_type))
}

#[cfg(test)]
mod tests {
    use command::proto::request::RequestType;

    use super::for_command;
    use crate::cli::args::Cli;

    fn build(line: &str) -> Option<RequestType> {
        let cli = Cli::try_parse_args(line.split_whitespace()).expect("valid command line");
        for_command(&cli.command).and_then(|r| r.request_type)
    }

    #[test]
    fn every_socket_subcommand_builds_its_request() {
        type Check = fn(&RequestType) -> bool;
        let cases: &[(&str, Check)] = &[
            ("preread status", |r| matches!(r, RequestType::Status(_))),
            ("preread shutdown", |r| {
                matches!(r, RequestType::SoftStop(_))
            }),
            ("preread shutdown --hard", |r| {
                matches!(r, RequestType::HardStop(_))
            }),
            ("preread listener list", |r| {
                matches!(r, RequestType::ListListeners(_))
            }),
            (
                "preread listener tcp remove -a 127.0.0.1:1",
                |r| matches!(r, RequestType::RemoveListener(a) if a.address == "127.0.0.1:1"),
            ),
            ("preread listener tcp activate -a 127.0.0.1:1", |r| {
                matches!(r, RequestType::ActivateListener(_))
            }),
            ("preread listener tcp deactivate -a 127.0.0.1:1", |r| {
                matches!(r, RequestType::DeactivateListener(_))
            }),
            ("preread cluster list", |r| {
                matches!(r, RequestType::ListClusters(_))
            }),
            (
                "preread listener quic add -a 127.0.0.1:1 --max-flows 7 --quic-idle-timeout 5 --reject-with drop",
                |r| {
                    matches!(r, RequestType::AddTcpListener(l)
                        if l.protocol == Some(command::proto::ListenerProtocol::Quic as i32)
                            && l.max_flows == Some(7)
                            && l.quic_idle_timeout_ms == Some(5_000)
                            && l.reject_with == Some(command::proto::RejectWith::Drop as i32))
                },
            ),
            ("preread listener quic remove -a 127.0.0.1:1", |r| {
                matches!(r, RequestType::RemoveListener(_))
            }),
            (
                "preread cluster add -i q --protocol quic",
                |r| matches!(r, RequestType::AddCluster(c) if c.protocol == Some(command::proto::ListenerProtocol::Quic as i32)),
            ),
            (
                "preread frontend quic add -i q -a 127.0.0.1:1 --sni a.example.com --alpn h3",
                |r| matches!(r, RequestType::AddTcpFrontend(f) if f.alpn == ["h3"]),
            ),
            (
                "preread cluster remove -i a",
                |r| matches!(r, RequestType::RemoveCluster(c) if c.cluster_id == "a"),
            ),
            ("preread frontend list", |r| {
                matches!(r, RequestType::ListFrontends(_))
            }),
            (
                "preread backend remove -i a --backend-id b -a 127.0.0.1:2",
                |r| matches!(r, RequestType::RemoveBackend(b) if b.backend_id == "b"),
            ),
            (
                "preread state save -f /tmp/s.json",
                |r| matches!(r, RequestType::SaveState(s) if s.path == "/tmp/s.json"),
            ),
            ("preread state load -f /tmp/s.json", |r| {
                matches!(r, RequestType::LoadState(_))
            }),
            ("preread metrics get", |r| {
                matches!(r, RequestType::QueryMetrics(_))
            }),
            ("preread sources", |r| {
                matches!(r, RequestType::ListSources(_))
            }),
            (
                "preread rejects",
                |r| matches!(r, RequestType::QueryRejects(q) if q.reason.is_none() && q.listener.is_none()),
            ),
            (
                "preread rejects --reason not_tls --listener 127.0.0.1:8443 --dump /tmp/d",
                |r| {
                    matches!(r, RequestType::QueryRejects(q)
                        if q.reason.as_deref() == Some("not_tls")
                            && q.listener.as_deref() == Some("127.0.0.1:8443"))
                },
            ),
        ];
        for (line, check) in cases {
            let built = build(line);
            assert!(built.as_ref().is_some_and(check), "{line}: {built:?}");
        }
    }

    #[test]
    fn listener_add_carries_every_flag() {
        let line = "preread listener tcp add -a 127.0.0.1:8443 --expect-proxy --sni-preread-timeout 300 \
                    --sni-preread-max-bytes 4096 --default-cluster d --server-first-timeout 200 \
                    --front-timeout 9 --back-timeout 8 --connect-timeout 2";
        let Some(RequestType::AddTcpListener(l)) = build(line) else {
            panic!("not a listener add")
        };
        assert_eq!(l.address, "127.0.0.1:8443");
        assert!(l.expect_proxy);
        assert_eq!(
            (
                l.sni_preread_timeout,
                l.sni_preread_max_bytes,
                l.server_first_timeout
            ),
            (Some(300), Some(4096), Some(200))
        );
        assert_eq!(l.default_cluster.as_deref(), Some("d"));
        assert_eq!(
            (l.front_timeout_ms, l.back_timeout_ms, l.connect_timeout_ms),
            (Some(9_000), Some(8_000), Some(2_000))
        );
    }

    #[test]
    fn deny_ja4_flags_on_listeners_and_clusters() {
        let one = "t13d3112h2_e8f1e7e78f70_b26ce05bbdd6";
        let two = "t12d2808h1_d943125447b4_e7e480e5a997";
        let Some(RequestType::AddTcpListener(l)) = build(&format!(
            "preread listener tcp add -a 127.0.0.1:8443 --deny-ja4 {one},{two} --deny-ja4 {one}"
        )) else {
            panic!("not a listener add")
        };
        assert_eq!(l.deny_ja4, [one, two, one]);
        let Some(RequestType::UpdateCluster(c)) =
            build(&format!("preread cluster update -i web --deny-ja4 {two}"))
        else {
            panic!("not a cluster update")
        };
        assert_eq!(c.deny_ja4, [two]);
    }

    #[test]
    fn access_flags_on_quic_listeners() {
        let ja4 = "q13d0312h3_55b375c5d22e_06cda9e17597";
        let Some(RequestType::UpdateTcpListener(l)) = build(&format!(
            "preread listener quic update -a 127.0.0.1:8443 --allow 10.0.0.0/8 \
             --deny 10.9.0.0/16 --rate 5/1s --ipv6-prefix 48 --deny-ja4 {ja4}"
        )) else {
            panic!("not a listener update")
        };
        assert_eq!(
            l.protocol,
            Some(super::proto::ListenerProtocol::Quic as i32)
        );
        assert_eq!(
            (l.allow, l.deny),
            (
                vec!["10.0.0.0/8".to_owned()],
                vec!["10.9.0.0/16".to_owned()]
            )
        );
        let rate = l.connection_rate_per_ip.map(|r| (r.rate, r.per_ms));
        assert_eq!(rate, Some((5, 1_000)));
        assert_eq!(l.ipv6_prefix, Some(48));
        assert_eq!(l.deny_ja4, [ja4]);
    }

    #[test]
    fn access_flags_on_listeners_and_clusters() {
        let Some(RequestType::UpdateTcpListener(l)) = build(
            "preread listener tcp update -a 127.0.0.1:8443 --allow 10.0.0.0/8,192.0.2.7 \
             --allow 2001:db8::/32 --deny 10.9.0.0/16 --rate 50/1s --burst 100 --ipv6-prefix 56",
        ) else {
            panic!("not a listener update")
        };
        assert_eq!(l.allow, ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"]);
        assert_eq!(l.deny, ["10.9.0.0/16"]);
        let rate = l
            .connection_rate_per_ip
            .map(|r| (r.rate, r.per_ms, r.burst));
        assert_eq!(rate, Some((50, 1_000, Some(100))));
        assert_eq!(l.ipv6_prefix, Some(56));
        let Some(RequestType::UpdateCluster(c)) =
            build("preread cluster update -i web --deny 192.0.2.0/24 --rate 600/1m")
        else {
            panic!("not a cluster update")
        };
        assert_eq!(c.deny, ["192.0.2.0/24"]);
        let rate = c
            .connection_rate_per_ip
            .map(|r| (r.rate, r.per_ms, r.burst));
        assert_eq!(rate, Some((600, 60_000, None)));
        assert!(c.allow.is_empty() && c.ipv6_prefix.is_none());
    }

    #[test]
    fn frontend_cluster_and_backend_flags() {
        let Some(RequestType::AddTcpFrontend(f)) = build(
            "preread frontend tcp add -i web -a 127.0.0.1:8443 --sni *.example.com --alpn h2,http/1.1",
        ) else {
            panic!("not a frontend add")
        };
        assert_eq!(
            (f.cluster_id.as_str(), f.sni.as_deref()),
            ("web", Some("*.example.com"))
        );
        assert_eq!(f.alpn, ["h2", "http/1.1"]);
        let Some(RequestType::AddCluster(c)) = build(
            "preread cluster add -i web --load-balancing power-of-two --proxy-protocol relay --max-connections-per-ip 7",
        ) else {
            panic!("not a cluster add")
        };
        assert_eq!(
            c.load_balancing,
            command::proto::LoadBalancing::PowerOfTwo as i32
        );
        assert_eq!(
            c.proxy_protocol,
            command::proto::ProxyProtocol::Relay as i32
        );
        assert_eq!(c.max_connections_per_ip, 7);
        let Some(RequestType::AddBackend(b)) = build(
            "preread backend add -i web --backend-id web-0 -a 127.0.0.1:9001 --weight 5 --backup",
        ) else {
            panic!("not a backend add")
        };
        assert_eq!(
            (b.weight, b.backup, b.address.as_str()),
            (Some(5), true, "127.0.0.1:9001")
        );
    }

    /// Durations take the config's forms: a bare integer in the key's
    /// unit, or a string with its unit.
    #[test]
    fn listener_durations_take_the_configs_forms() -> Result<(), String> {
        let line = "preread listener tcp add -a 127.0.0.1:8443 --sni-preread-timeout 5s \
                    --server-first-timeout 250 --default-cluster d --front-timeout 1500ms \
                    --back-timeout 2m --connect-timeout 2";
        let Some(RequestType::AddTcpListener(l)) = build(line) else {
            return Err(format!("{line}: not a listener add"));
        };
        assert_eq!(
            (l.sni_preread_timeout, l.server_first_timeout),
            (Some(5_000), Some(250))
        );
        assert_eq!(
            (l.front_timeout_ms, l.back_timeout_ms, l.connect_timeout_ms),
            (Some(1_500), Some(120_000), Some(2_000))
        );
        assert_eq!(
            (l.front_timeout, l.back_timeout, l.connect_timeout),
            (None, None, None)
        );
        for bad in [
            "--front-timeout 5parsecs",
            "--sni-preread-timeout 60d",
            "--back-timeout 1500us",
        ] {
            let line = format!("preread listener tcp add -a 127.0.0.1:1 {bad}");
            assert!(
                Cli::try_parse_args(line.split_whitespace()).is_err(),
                "{line}"
            );
        }
        Ok(())
    }

    /// Every spelling the config file accepts is accepted here, with the
    /// same meaning, and `--help` shows the config's own.
    #[test]
    fn enumerations_take_every_spelling_of_the_config() -> Result<(), String> {
        use command::spelling::{HEALTH_CHECK_KIND, LOAD_BALANCING, PROXY_PROTOCOL, REJECT_WITH};
        for spelling in LOAD_BALANCING {
            for text in std::iter::once(&spelling.name).chain(spelling.aliases) {
                let line = format!("preread cluster add -i web --load-balancing {text}");
                let Some(RequestType::AddCluster(c)) = build(&line) else {
                    return Err(format!("{line}: not a cluster add"));
                };
                assert_eq!(c.load_balancing, spelling.value as i32, "{line}");
            }
        }
        for spelling in PROXY_PROTOCOL {
            let line = format!(
                "preread cluster add -i web --proxy-protocol {}",
                spelling.name
            );
            let Some(RequestType::AddCluster(c)) = build(&line) else {
                return Err(format!("{line}: not a cluster add"));
            };
            assert_eq!(c.proxy_protocol, spelling.value as i32, "{line}");
        }
        for spelling in HEALTH_CHECK_KIND {
            let line = format!(
                "preread cluster add -i web --health-check {}",
                spelling.name
            );
            let Some(RequestType::AddCluster(c)) = build(&line) else {
                return Err(format!("{line}: not a cluster add"));
            };
            assert_eq!(
                c.health_check.map(|h| h.kind),
                Some(spelling.value as i32),
                "{line}"
            );
        }
        for spelling in REJECT_WITH {
            let line = format!(
                "preread listener tcp add -a 127.0.0.1:1 --reject-with {}",
                spelling.name
            );
            let Some(RequestType::AddTcpListener(l)) = build(&line) else {
                return Err(format!("{line}: not a listener add"));
            };
            assert_eq!(l.reject_with, Some(spelling.value as i32), "{line}");
        }
        let Some(RequestType::AddCluster(c)) = build("preread cluster add -i web") else {
            return Err("cluster add: not built".to_owned());
        };
        assert_eq!(
            c.load_balancing,
            command::proto::LoadBalancing::RoundRobin as i32
        );
        let help = match Cli::try_parse_args(["preread", "cluster", "add", "--help"]) {
            Err(help) => help.to_string(),
            Ok(_) => return Err("--help parsed as a command".to_owned()),
        };
        assert!(
            help.contains("round_robin, random, least_connections, power_of_two"),
            "{help}"
        );
        assert!(!help.contains("round-robin"), "{help}");
        Ok(())
    }

    /// `--watch` takes a bare number of seconds or a duration string, at
    /// least 100ms; `--filter` and `--hide-zero` only go with it.
    #[test]
    fn metrics_watch_takes_a_positive_interval() -> Result<(), String> {
        use crate::cli::args::{Command, MetricsAction};
        let watch = |line: &str| match Cli::try_parse_args(line.split_whitespace()) {
            Ok(Cli {
                command:
                    Command::Metrics {
                        action: MetricsAction::Get(args),
                    },
                ..
            }) => Ok(args),
            Ok(other) => Err(format!("{line}: parsed as {other:?}")),
            Err(error) => Err(error.to_string()),
        };
        for (flag, millis) in [("2", 2_000), ("2s", 2_000), ("500ms", 500), ("100ms", 100)] {
            let line = format!("preread metrics get --watch {flag}");
            assert_eq!(watch(&line)?.watch, Some(millis), "{line}");
            assert!(
                matches!(build(&line), Some(RequestType::QueryMetrics(_))),
                "{line}"
            );
        }
        let args = watch("preread metrics get --watch 1 --filter rejected --hide-zero")?;
        assert_eq!(
            (args.filter.as_deref(), args.hide_zero),
            (Some("rejected"), true)
        );
        assert_eq!(watch("preread metrics get")?.watch, None);
        for (bad, says) in [
            ("--watch 0", "too short an interval"),
            ("--watch 0s", "too short an interval"),
            ("--watch 50ms", "at least 100ms"),
            ("--watch soon", "not a duration"),
            ("--watch -1", "unexpected argument"),
            ("--filter rejected", "--watch"),
            ("--hide-zero", "--watch"),
        ] {
            let line = format!("preread metrics get {bad}");
            let refused = watch(&line);
            assert!(
                refused.as_ref().is_err_and(|e| e.contains(says)),
                "{line}: {refused:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn offline_subcommands_send_nothing() {
        for line in [
            "preread config check",
            "preread explain E101",
            "preread inspect x.bin",
            "preread reload",
        ] {
            assert_eq!(build(line), None, "{line}");
        }
    }
}
