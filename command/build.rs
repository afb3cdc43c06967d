//! Compiles `proto/command.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and prost, into `OUT_DIR`.

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
        .compile_fds(descriptors)?;
    Ok(())
}
