"""The schema's numbered migrations, append-only."""
