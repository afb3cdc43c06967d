//! Compiles `proto/command.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and prost, into `OUT_DIR`.

const SKIP_EMPTY: &str = "#[serde(default, skip_serializing_if = \"Vec::is_empty\")]";
const SKIP_NONE: &str = "#[serde(default, skip_serializing_if = \"Option::is_none\")]";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/command.proto");
    let descriptors = protox::compile(["command.proto"], ["proto"])?;
    prost_build::Config::new()
        .btree_map(["."])
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .type_attribute(".", "#[serde(deny_unknown_fields)]")
        .type_attribute(
            ".preread.command.Request.request_type",
            "#[serde(rename_all = \"snake_case\")]",
        )
        .type_attribute(
            ".preread.command.ResponseContent.content_type",
            "#[serde(rename_all = \"snake_case\")]",
        )
        // The access fields are left out of a state line when unset, so
        // the lines of a state without them read as before, and an older
        // preread reads them.
        .field_attribute(".preread.command.TcpListenerConfig.allow", SKIP_EMPTY)
        .field_attribute(".preread.command.TcpListenerConfig.deny", SKIP_EMPTY)
        .field_attribute(
            ".preread.command.TcpListenerConfig.connection_rate_per_ip",
            SKIP_NONE,
        )
        .field_attribute(".preread.command.TcpListenerConfig.ipv6_prefix", SKIP_NONE)
        .field_attribute(".preread.command.Cluster.allow", SKIP_EMPTY)
        .field_attribute(".preread.command.Cluster.deny", SKIP_EMPTY)
        .field_attribute(".preread.command.Cluster.connection_rate_per_ip", SKIP_NONE)
        .field_attribute(".preread.command.Cluster.ipv6_prefix", SKIP_NONE)
        .field_attribute(".preread.command.TcpListenerConfig.deny_ja4", SKIP_EMPTY)
        .field_attribute(".preread.command.Cluster.deny_ja4", SKIP_EMPTY)
        // So are the QUIC fields: a TCP listener's or cluster's line is
        // the one it was before QUIC listeners existed.
        .field_attribute(".preread.command.TcpListenerConfig.protocol", SKIP_NONE)
        .field_attribute(
            ".preread.command.TcpListenerConfig.quic_preread_timeout_ms",
            SKIP_NONE,
        )
        .field_attribute(
            ".preread.command.TcpListenerConfig.quic_idle_timeout_ms",
            SKIP_NONE,
        )
        .field_attribute(".preread.command.TcpListenerConfig.max_flows", SKIP_NONE)
        .field_attribute(
            ".preread.command.TcpListenerConfig.max_flows_per_ip",
            SKIP_NONE,
        )
        .field_attribute(".preread.command.Cluster.protocol", SKIP_NONE)
        .field_attribute(".preread.command.ListenerAddress.protocol", SKIP_NONE)
        .field_attribute(".preread.command.TcpFrontend.protocol", SKIP_NONE)
        .compile_fds(descriptors)?;
    Ok(())
}
