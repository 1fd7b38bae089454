"""MPS-kernel coverage by source, and what each source and layout costs a sweep.

    python benchmarks/coverage_sources.py cpu.db [more.db ...]

For each database: `mpsprobe.coverage` (the installed torch's MPS kernels,
reached by the database's sweeps of that torch) as Markdown rows, then per
run its wall time, cases, and cases and summed case time (results.duration_s)
by op source and by layout. Run the sweeps first, e.g.

    mpsprobe run --device cpu --samples 1 --no-timing --db before.db       # (on a checkout without module probes)
    mpsprobe run --device cpu --samples 1 --no-timing --layouts --db after.db
"""
import sys

import mpsprobe
from mpsprobe.db.query import rows

from _common import machine_line


def _coverage(path):
    report = mpsprobe.coverage(path)
    n = report["kernels"]
    print(f"\n{path}: torch {report['torch_version']}; {report['evidence']}\n")
    print("| kernels reached | of | share | opinfo | module | generated | recorded | structured delegate | "
          "MPS-only dispatch (public call) | left |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ev = report["by_evidence"]
    print(f"| {report['reached']} | {n} | {report['reached'] / n:.1%} | {report['by_source']['opinfo']} | "
          f"{report['by_source']['module']} | {report['by_source']['generated']} | {ev.get('recorded', 0)} | "
          f"{ev.get('structured delegate', 0)} | {ev.get('MPS-only dispatch (public call recorded)', 0)} | "
          f"{report['left']} |")
    return report


def _costs(path, run_ids):
    db = mpsprobe.open_db(path, readonly=True)
    try:
        for run_id in run_ids:
            run = rows(db.conn, "SELECT wall_s, cases_total, counts FROM runs WHERE id = ?", [run_id])[0]
            print(f"\nrun {run_id[:12]}: {run['cases_total']} cases in {run['wall_s']:.0f} s wall; {run['counts']}\n")
            print("| source | layout | cases | case time (s) | mismatch | error |")
            print("|---|---|---|---|---|---|")
            for r in rows(db.conn, """
                    SELECT coalesce(o.source, 'opinfo') AS source, coalesce(r.layout, '(as made)') AS layout,
                           count(*) AS n, round(sum(r.duration_s), 1) AS s,
                           sum(r.status = 'mismatch') AS mismatch, sum(r.status = 'error') AS error
                    FROM results r LEFT JOIN ops o ON o.id = r.op_id WHERE r.run_id = ?
                    GROUP BY 1, 2 ORDER BY 1, 2""", [run_id]):
                print(f"| {r['source']} | {r['layout']} | {r['n']} | {r['s']} | {r['mismatch']} | {r['error']} |")
    finally:
        db.conn.close()


def main(paths):
    print(machine_line())
    for path in paths:
        report = _coverage(path)
        _costs(path, [r["id"] for r in report["runs"]])


if __name__ == "__main__":
    main(sys.argv[1:] or ["mpsprobe.db"])
