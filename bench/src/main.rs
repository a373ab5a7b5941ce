//! `nanobot-bench`: the benchmark suite launcher (`make bench`, `make bench-smoke`).
#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() {
    let opts = nanobot_bench::opts::Options::parse();
    if let Err(e) = nanobot_bench::run(opts).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
