//! `preread inspect --pcap` run as the real binary on the captures of
//! `testdata/pcap` (made by its `make.sh`): one JSON line per first
//! flight, the config's listener per flow, and what a damaged or foreign
//! file gives on stderr and in the exit status.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(name)
}

fn preread(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(args)
        .output()
        .expect("run preread")
}

fn reports(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// Ports the captures' servers used, as `make.sh` drew them.
fn server_ports(capture: &str) -> Vec<u16> {
    let out = preread(&["inspect", "--pcap", data(capture).to_str().expect("utf-8")]);
    reports(&out)
        .iter()
        .map(|r| {
            let server: std::net::SocketAddr = r["flow"]["server"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("an address");
            server.port()
        })
        .collect()
}

#[test]
fn every_flight_of_every_capture_is_one_line_with_its_flow() {
    let files: Vec<String> = ["pcap/lo.pcap", "pcap/any.pcapng", "pcap/split.pcap"]
        .iter()
        .map(|f| data(f).display().to_string())
        .collect();
    let mut args = vec!["inspect", "--pcap"];
    args.extend(files.iter().map(String::as_str));
    let out = preread(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snis: Vec<(String, String)> = reports(&out)
        .iter()
        .map(|r| (r["protocol"].to_string(), r["sni"].to_string()))
        .collect();
    let expected = [
        ("tcp", "a.example.com"),
        ("quic", "localhost"),
        ("quic", "localhost"),
        ("tcp", "c.example.com"),
        ("quic", "localhost"),
        ("quic", "localhost"),
        ("tcp", "e.example.com"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(p, s)| (format!("{p:?}"), format!("{s:?}")))
        .collect();
    assert_eq!(snis, expected);
    assert!(reports(&out).iter().all(|r| r["parse"] == "complete"));
}

#[test]
fn with_a_config_each_flow_is_decided_by_the_listener_at_its_server_address() {
    let ports = server_ports("pcap/lo.pcap");
    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("pcap.toml");
    let text = format!(
        r#"
[[listeners]]
address = "127.0.0.1:1"

[[listeners]]
address = "0.0.0.0:{tcp}"

[[listeners]]
protocol = "quic"
address = "127.0.0.1:{quic}"
reject_with = "drop"

[clusters.alpha]
frontends = [ {{ address = "0.0.0.0:{tcp}", sni = "a.example.com" }} ]
backends = [ {{ address = "127.0.0.1:9001", backend_id = "alpha-0" }} ]
"#,
        tcp = ports[0],
        quic = ports[1]
    );
    std::fs::write(&config, text).expect("the config");
    let capture = data("pcap/lo.pcap").display().to_string();
    let config = config.display().to_string();
    let out = preread(&["-c", &config, "inspect", "--pcap", &capture]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flows = reports(&out);
    assert_eq!(flows[0]["decision"]["cluster"], "alpha");
    assert_eq!(
        flows[0]["decision"]["listener"],
        format!("0.0.0.0:{}", ports[0])
    );
    for quic in &flows[1..] {
        assert_eq!(
            quic["decision"]["listener"],
            format!("127.0.0.1:{}", ports[1])
        );
        assert_eq!(quic["decision"]["reason"], "sni_unmatched");
        // reject_with = "drop": nothing is sent.
        assert_eq!(quic["decision"]["reply"], Value::Null);
    }
    let out = preread(&[
        "-c",
        &config,
        "inspect",
        "--pcap",
        "--listener",
        "127.0.0.1:1",
        &capture,
    ]);
    assert!(
        reports(&out)
            .iter()
            .all(|r| r["decision"]["listener"] == "127.0.0.1:1")
    );
}

#[test]
fn a_cut_capture_reports_what_it_holds_and_a_foreign_file_exits_2() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let whole = std::fs::read(data("pcap/lo.pcap")).expect("lo.pcap");
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &whole[..whole.len() / 2]).expect("cut.pcap");
    let cut = cut.display().to_string();
    let out = preread(&["inspect", "--pcap", &cut]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("runs past the end of the file"), "{stderr}");
    let held = reports(&out);
    assert_eq!(held[0]["sni"], "a.example.com");

    let foreign = data("clienthellos/curl_h2.bin").display().to_string();
    let out = preread(&["inspect", "--pcap", &foreign, &cut]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a pcap or pcapng capture"), "{stderr}");
    assert_eq!(reports(&out), held, "the cut capture is still read");

    let out = preread(&["inspect", "--pcap", "--quic", &cut]);
    assert_eq!(out.status.code(), Some(2), "--pcap and --quic conflict");
}
