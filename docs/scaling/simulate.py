#!/usr/bin/env python3
"""Projects measured per-delivery costs to an installation's size (issue 27, item 5).

A steady-state model, not a benchmark: every input is a figure measured by kurir-bench on the
project's 2-core machine (BENCHMARKS.md and docs/scaling.md say which run) or a kurir default,
and each can be changed on the command line. It answers what an installation needs at a given
event rate: database cores, kurir processes and their cores, delivery slots, and connections,
and which of them binds first.

    python3 docs/scaling/simulate.py                       # 10,000 events/s, 5 % slow partners
    python3 docs/scaling/simulate.py --events-per-s 2000 --fan-out 3
"""
import argparse
import math


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a = p.add_argument
    a("--events-per-s", type=float, default=10_000)
    a("--fan-out", type=float, default=1.0, help="deliveries per event")
    a("--slow-share", type=float, default=0.05, help="share of deliveries to slow partners")
    a("--slow-s", type=float, default=2.0, help="a slow partner's answer time, seconds")
    a("--slow-endpoints", type=int, default=50, help="slow partners the slow share spreads over")
    a("--fast-s", type=float, default=0.02, help="a fast partner's answer time, seconds")
    # Measured (docs/scaling.md, "Measured figures"): database CPU per delivery, kurir's
    # excluded, core-ms; kurir's own CPU per delivery, core-ms; the application's insert.
    a("--db-ms", type=float, default=0.27, help="database core-ms per delivery")
    a("--kurir-ms", type=float, default=0.05, help="kurir core-ms per delivery")
    a("--app-insert-ms", type=float, default=0.12, help="database core-ms per outbox INSERT")
    # Defaults of kurir (crates/kurir/src/config.rs, store/postgres.rs).
    a("--max-in-flight", type=int, default=16, help="per endpoint per process")
    a("--max-concurrency", type=int, default=256, help="per process")
    a("--connections-per-process", type=int, default=23, help="PostgreSQL: 16 + 6 + LISTEN")
    a("--db-max-connections", type=int, default=100)
    a("--process-cores", type=float, default=1.0, help="cores one kurir process may use")
    a("--headroom", type=float, default=0.6, help="busy share a core is planned at")
    return p.parse_args()


def main():
    o = parse()
    deliveries = o.events_per_s * o.fan_out
    slow = deliveries * o.slow_share
    fast = deliveries - slow
    db_cores = (deliveries * o.db_ms + o.events_per_s * o.app_insert_ms) / 1000
    kurir_cores = deliveries * o.kurir_ms / 1000
    # Little's law: requests in flight = rate × time each takes.
    fast_slots = fast * o.fast_s
    slow_slots = slow * o.slow_s
    per_slow_endpoint = slow_slots / max(o.slow_endpoints, 1)
    # Each process gives one endpoint at most max_in_flight slots.
    for_slow_endpoint = math.ceil(per_slow_endpoint / o.max_in_flight)
    for_cpu = math.ceil(kurir_cores / (o.process_cores * o.headroom))
    for_slots = math.ceil((fast_slots + slow_slots) / o.max_concurrency)
    processes = max(for_slow_endpoint, for_cpu, for_slots, 1)
    connections = processes * o.connections_per_process
    db_cores_planned = db_cores / o.headroom
    rows = [
        ("deliveries/s", f"{deliveries:,.0f} ({fast:,.0f} fast, {slow:,.0f} slow)"),
        ("database CPU", f"{db_cores:.1f} cores busy; plan {db_cores_planned:.1f} at {o.headroom:.0%}"),
        ("kurir CPU", f"{kurir_cores:.1f} cores busy"),
        ("slots in flight", f"{fast_slots:,.0f} fast + {slow_slots:,.0f} slow"),
        ("per slow endpoint", f"{per_slow_endpoint:,.0f} in flight: {for_slow_endpoint} processes at max_in_flight {o.max_in_flight}"),
        ("processes", f"{processes} (CPU needs {for_cpu}, slots {for_slots}, slow endpoints {for_slow_endpoint})"),
        ("database connections", f"{connections} of max_connections {o.db_max_connections}"
            + (" — EXCEEDED: a pooler or a larger limit" if connections > o.db_max_connections else "")),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

if __name__ == "__main__":
    main()
