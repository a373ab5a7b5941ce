//! `nanobot-agent`: the agent runner launcher.
use clap::Parser;

/// Agent runner: turns from JetStream, LLM calls, tool loop, sessions in Redis.
#[derive(Parser)]
#[command(name = "nanobot-agent", version)]
struct Args {
    #[command(flatten)]
    common: nanobot_runtime::cli::CommonArgs,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let code = nanobot_runtime::cli::launch("nanobot-agent", args.common, |cfg, common| {
        nanobot_agent::run(cfg, common.health_addr, async {
            tokio::select! {
                () = nanobot_runtime::shutdown::shutdown_signal() => {}
                () = nanobot_agent::restart::wanted() => {}
            }
        })
    })
    .await;
    if code == 0 && nanobot_agent::restart::requested() {
        // `/restart`: the same executable and arguments, in this process (upstream's exec mode).
        use std::os::unix::process::CommandExt as _;
        let exe = std::env::current_exe().unwrap_or_else(|_| "nanobot-agent".into());
        let err = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .exec();
        eprintln!("nanobot-agent: restart failed: {err}");
        std::process::exit(1);
    }
    std::process::exit(code);
}
