"""The schema's numbered migrations, append-only.

MIGRATIONS[i] takes a database from schema version i to i + 1. A step runs
inside the migration's one transaction (db/schema.py): it must not commit (no
`with db.conn:`); nested sqlite-utils calls use savepoints, which is fine.
A shipped step never changes: a change to the schema is a new step. Views are
not migrated: db/views.py recreates them after the last step.
"""
from . import m001_initial, m002_history, m003_search, m004_declared, m005_passes, m006_speed, m007_variants, \
    m008_aten_dtypes, m009_run_events, m010_provenance, m011_speed_spread, m012_layouts, m013_compiled

MIGRATIONS = [m001_initial.migrate, m002_history.migrate, m003_search.migrate,
              m004_declared.migrate, m005_passes.migrate, m006_speed.migrate,
              m007_variants.migrate, m008_aten_dtypes.migrate, m009_run_events.migrate,
              m010_provenance.migrate, m011_speed_spread.migrate, m012_layouts.migrate,
              m013_compiled.migrate]
