//! The checked-in header is what cbindgen generates from the crate now. Run with
//! `OCELLI_BLESS=1` to rewrite it after changing the interface.

use std::path::Path;

#[test]
fn header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let path = crate_dir.join("include/ocelli_sdk.h");
    if std::env::var_os("OCELLI_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write the header");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: run `OCELLI_BLESS=1 cargo test -p ocelli-sdk-capi --test header`",
        path.display()
    );
}
