//! Compiles the .proto files with protox (pure Rust; no system protoc) and
//! generates prost messages plus tonic clients and servers.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let files = ["envelope.proto", "orb.proto", "node.proto", "health.proto"]
        .map(|f| root.join("ocelli/v1").join(f));
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(files, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
