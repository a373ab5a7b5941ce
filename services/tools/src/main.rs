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
    hide_from_own_commands();
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

/// Makes this process non-dumpable. `exec` commands, MCP servers and `read_file` run as this
/// process's user, so they could read its `/proc/<pid>/environ` and `/proc/<pid>/mem`, which
/// hold the NATS login it was started with; a non-dumpable process's entries belong to root
/// (the kernel resets the flag for a child when it executes a program, so commands are
/// unaffected). Without bubblewrap (a Kubernetes pod cannot create its namespaces), this keeps
/// a model-chosen command from logging into NATS as the executor.
fn hide_from_own_commands() {
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        eprintln!("nanobot-tools: cannot make the process non-dumpable: {e}");
        std::process::exit(1);
    }
}
