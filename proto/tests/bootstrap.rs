//! Regenerates `src/gen` from the `.proto` sources and fails when the committed code is stale.
//! Uses `protox` (a pure-Rust protobuf compiler), so no `protoc` is needed anywhere.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn generated_code_is_up_to_date() {
    let root = PathBuf::from(manifest_dir());
    let protos =
        ["bus", "tools", "jobs", "fleet"].map(|name| root.join(format!("nanobot/v1/{name}.proto")));
    let fds = protox::compile(&protos, [root.clone()]).expect("compile .proto files");
    let out = root.join("src/gen");
    prost_build::Config::new()
        .out_dir(&out)
        .compile_fds(fds)
        .expect("generate rust code");
    let status = Command::new("git")
        .args(["diff", "--exit-code", "--stat", "--"])
        .arg(&out)
        .current_dir(&root)
        .status()
        .expect("run git diff");
    assert!(
        status.success(),
        "generated code in proto/src/gen was stale and has been regenerated: commit it"
    );
}

/// The package directory of the checkout the tests run from (read when they run: build
/// artifacts are shared between checkouts through the target dir, so the compile-time path may
/// name another, or a deleted, checkout).
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests")
}
