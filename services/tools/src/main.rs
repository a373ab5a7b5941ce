//! `nanobot-tools`: launches the tool executor (see the library crate).
#![forbid(unsafe_code)]

use clap::Parser;

/// Tool executor of the nanobot fleet.
#[derive(Debug, Parser)]
#[command(name = "nanobot-tools", version, about)]
struct Args {
    #[command(flatten)]
    common: nanobot_runtime::cli::CommonArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    std::process::exit(
        nanobot_runtime::cli::launch("nanobot-tools", args.common, |cfg, common| {
            nanobot_tools::run(
                cfg,
                common.health_addr,
                nanobot_runtime::shutdown::shutdown_signal(),
            )
        })
        .await,
    )
}
