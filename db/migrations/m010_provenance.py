"""Schema 9 -> 10: where a fleet's run came from, on `runs`.

- `runner_label`: the fleet machine that ran it (the CI runner label given with
  `run --runner-label` or MPSPROBE_RUNNER_LABEL, else the runner's name under
  GitHub Actions); null on a laptop;
- `command`: the exact command line that made the run, so anyone can repeat it.

Null for runs recorded before.
"""
RUN_COLUMNS = ("runner_label", "command")


def migrate(db):
    have = set(db["runs"].columns_dict)
    for column in RUN_COLUMNS:
        if column not in have:
            db.execute(f'ALTER TABLE runs ADD COLUMN "{column}" TEXT')
