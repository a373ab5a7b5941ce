//! `nanobot`: the command-line launcher.
use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = nanobot::commands::Cli::parse();
    let code = match nanobot::commands::dispatch(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}
