//! Rows about resources: resident memory idle and at peak, start-up times, CPU per turn.

use crate::plan::Figures;
use crate::report::{Better, NOT_MEASURED, Row, SERVICES, row};
use crate::scenarios::Suite;
use crate::system::Kind;

pub(crate) fn memory_rows(figures: &Figures, suite: &Suite, rows: &mut Vec<Row>) {
    let idle_fleet = suite.idle.get(&Kind::Fleet);
    for name in SERVICES {
        let rss = idle_fleet.and_then(|m| m.get(name)).map(|m| m.rss_mb);
        rows.push(
            row(
                "idle",
                &format!("RSS {name} (MB)"),
                Better::Lower,
                rss,
                None,
            )
            .at_most(15.0, "≤ 15"),
        );
    }
    for name in SERVICES {
        let anon = idle_fleet.and_then(|m| m.get(name)).map(|m| m.anon_mb);
        let metric = format!("RSS {name}: anonymous part, heap and stacks (MB)");
        rows.push(row("idle", &metric, Better::Lower, anon, None));
    }
    let total = |kind: Kind| {
        suite.idle.get(&kind).map(|m| {
            m.iter()
                .filter(|(n, _)| !NOT_MEASURED.contains(&n.as_str()))
                .map(|(_, mem)| mem.rss_mb)
                .sum::<f64>()
        })
    };
    rows.push(row(
        "idle",
        "RSS all processes incl. NATS, Redis (MB)",
        Better::Lower,
        total(Kind::Fleet),
        total(Kind::Upstream),
    ));
    // The worst scenario's sum over the system's processes (peaks of one scenario only).
    let peak_total = |kind: Kind| {
        let mut worst: Option<(f64, String)> = None;
        for (scenario, k, run) in figures.runs() {
            if k != kind {
                continue;
            }
            let sum: f64 = run
                .peak_mb
                .iter()
                .filter(|(n, _)| !NOT_MEASURED.contains(&n.as_str()))
                .map(|(_, mb)| mb)
                .sum();
            if worst.as_ref().is_none_or(|(w, _)| sum > *w) {
                worst = Some((sum, scenario));
            }
        }
        worst
    };
    let (fleet, upstream) = (peak_total(Kind::Fleet), peak_total(Kind::Upstream));
    let scenario_of =
        |p: &Option<(f64, String)>| p.as_ref().map_or("—".into(), |(_, s)| s.clone());
    let metric = format!(
        "VmHWM of the whole system (MB; fleet in {}, upstream in {})",
        scenario_of(&fleet),
        scenario_of(&upstream)
    );
    rows.push(row(
        "peak (worst scenario)",
        &metric,
        Better::Lower,
        fleet.map(|(mb, _)| mb),
        upstream.map(|(mb, _)| mb),
    ));
    let peak_of = |kind: Kind, name: &str| suite.peak.get(&kind).and_then(|m| m.get(name)).cloned();
    for name in SERVICES
        .iter()
        .copied()
        .chain(["nats-server", "redis-server"])
    {
        let peak = peak_of(Kind::Fleet, name);
        let metric = format!("VmHWM {name} (MB, in {})", scenario_of(&peak));
        rows.push(row(
            "peak (worst scenario)",
            &metric,
            Better::Lower,
            peak.map(|(mb, _)| mb),
            None,
        ));
    }
    let serve = peak_of(Kind::Upstream, "nanobot serve");
    let metric = format!("VmHWM nanobot serve (MB, in {})", scenario_of(&serve));
    rows.push(row(
        "peak (worst scenario)",
        &metric,
        Better::Lower,
        None,
        serve.map(|(mb, _)| mb),
    ));
}

/// Returns the worst spawn→ready and connect→ready of `name` over every start.
fn worst_start(suite: &Suite, kind: Kind, name: &str) -> (Option<f64>, Option<f64>) {
    let all = suite
        .startups
        .get(&kind)
        .into_iter()
        .flatten()
        .filter(|s| s.name == name);
    let mut spawn: Option<f64> = None;
    let mut connect: Option<f64> = None;
    for s in all {
        spawn = Some(spawn.map_or(s.spawn_to_ready_ms, |v| v.max(s.spawn_to_ready_ms)));
        if let Some(c) = s.connect_to_ready_ms {
            connect = Some(connect.map_or(c, |v| v.max(c)));
        }
    }
    (spawn, connect)
}

pub(crate) fn startup_rows(suite: &Suite, rows: &mut Vec<Row>) {
    let (gateway, _) = worst_start(suite, Kind::Fleet, "gateway");
    let (serve, _) = worst_start(suite, Kind::Upstream, "nanobot serve");
    rows.push(row(
        "start (worst of all starts)",
        "API process spawn → ready (ms)",
        Better::Lower,
        gateway,
        serve,
    ));
    for name in SERVICES {
        let (_, connect) = worst_start(suite, Kind::Fleet, name);
        rows.push(
            row(
                "start (worst of all starts)",
                &format!("{name} broker connected → ready (ms)"),
                Better::Lower,
                connect,
                None,
            )
            .at_most(100.0, "≤ 100"),
        );
    }
    for name in SERVICES
        .iter()
        .copied()
        .chain(["nats-server", "redis-server"])
    {
        let (spawn, _) = worst_start(suite, Kind::Fleet, name);
        rows.push(row(
            "start (worst of all starts)",
            &format!("{name} spawn → ready (ms)"),
            Better::Lower,
            spawn,
            None,
        ));
    }
}

pub(crate) fn cpu_rows(figures: &Figures, rows: &mut Vec<Row>) {
    let scenario = "CPU per turn at max turns/s";
    let total = |kind: Kind| {
        figures.max_throughput.get(&kind).map(|r| {
            r.cpu_ms_per_turn
                .iter()
                .filter(|(n, _)| !NOT_MEASURED.contains(&n.as_str()))
                .map(|(_, ms)| ms)
                .sum::<f64>()
        })
    };
    rows.push(row(
        scenario,
        "CPU ms per turn, whole system",
        Better::Lower,
        total(Kind::Fleet),
        total(Kind::Upstream),
    ));
    if let Some(run) = figures.max_throughput.get(&Kind::Fleet) {
        for (name, ms) in &run.cpu_ms_per_turn {
            rows.push(row(
                scenario,
                &format!("CPU ms per turn: {name}"),
                Better::Lower,
                Some(*ms),
                None,
            ));
        }
    }
}
