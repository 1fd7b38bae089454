"""The Datasette face of an mpsprobe database.

site/ holds every file Datasette needs: metadata.json (titles, descriptions,
licence), templates/, plugins/ (pages, status colours, canned queries) and
static/ (CSS). `make_datasette` assembles them for `mpsprobe serve` and the
tests; `datasette_args` gives the same files to `datasette publish`.
"""
import copy
import json
import os
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent
TEMPLATES_DIR = SITE_DIR / "templates"
PLUGINS_DIR = SITE_DIR / "plugins"
STATIC_DIR = SITE_DIR / "static"
STATIC_MOUNT = "mpsprobe-static"
# The metadata file describes the database under this name; it is renamed to
# whatever the served file is called.
METADATA_DB_NAME = "mpsprobe"
DEFAULT_TIME_LIMIT_MS = 2000
# A query's rows on one page (HTML, JSON, CSV); past it the page says it stopped.
MAX_RETURNED_ROWS = 1000


def database_name(db_path):
    """The name Datasette gives a database file: its file name without the extension."""
    return Path(db_path).stem


def site_metadata(db_path):
    """metadata.json for the database at `db_path`, with the plugin's configuration."""
    from mpsprobe.vocabulary import STATUSES, WORKING

    with open(SITE_DIR / "metadata.json") as f:
        metadata = json.load(f)
    metadata = copy.deepcopy(metadata)
    name = database_name(db_path)
    metadata["databases"] = {name: metadata["databases"].pop(METADATA_DB_NAME)}
    metadata["plugins"]["mpsprobe"] = {
        "database": name, "statuses": list(STATUSES), "working": list(WORKING)}
    return metadata


def check_database(db_path):
    """Refuse, in one line (a DatabaseError), a file the site cannot show; never writes to it."""
    from mpsprobe.db.schema import DatabaseError, open_db

    if not os.path.exists(db_path):
        raise DatabaseError(f"{db_path} does not exist: record results first with "
                            f"`mpsprobe run --db {db_path}`")
    open_db(db_path, readonly=True).conn.close()


def wal_pending(db_path):
    """True while a writer may have changes in the WAL that the main file lacks."""
    from mpsprobe.db.files import wal_pending
    return wal_pending(db_path)


def _uri_safe(db_path):
    """A path Datasette can paste into a `file:` URI as it is: characters that
    mean something in a URI (`?`, `#`, `%`) are served through a symbolic link
    with a plain name, in a folder removed at exit."""
    if not any(c in os.path.abspath(db_path) for c in "?#%"):
        return db_path
    import atexit
    import re
    import shutil
    import tempfile
    folder = tempfile.mkdtemp(prefix="mpsprobe-serve-")
    atexit.register(shutil.rmtree, folder, True)
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(db_path).stem) or "mpsprobe"
    link = os.path.join(folder, stem + ".db")
    os.symlink(os.path.abspath(db_path), link)
    return link


def site_settings(time_limit_ms=DEFAULT_TIME_LIMIT_MS):
    # No facet suggestions: on a table as wide as results they are ~90 queries, each
    # allowed its 50 ms, so /db/results took seconds; facets asked for (?_facet=) still work.
    return {"sql_time_limit_ms": int(time_limit_ms), "allow_download": True,
            "default_page_size": 100, "max_returned_rows": MAX_RETURNED_ROWS, "suggest_facets": False}


def make_datasette(db_path, live=None, time_limit_ms=DEFAULT_TIME_LIMIT_MS):
    """A Datasette instance serving `db_path` read-only with the mpsprobe site.

    The file is opened immutable (never written, fastest) unless `live` is
    true, or unset while a run still has changes in the WAL: then it is
    opened read-only so that the newest results show.
    """
    from datasette.app import Datasette

    db_path = str(db_path)
    if live is None:
        live = wal_pending(db_path)
    db_path = _uri_safe(db_path)
    return Datasette(
        files=[db_path] if live else [],
        immutables=[] if live else [db_path],
        metadata=site_metadata(db_path),
        template_dir=str(TEMPLATES_DIR),
        plugins_dir=str(PLUGINS_DIR),
        static_mounts=[(STATIC_MOUNT, str(STATIC_DIR))],
        settings=site_settings(time_limit_ms),
    )


def datasette_args(metadata_path, time_limit_ms=DEFAULT_TIME_LIMIT_MS):
    """The `datasette publish`/`package` options that carry the site's files. The
    settings are options of the deployed `datasette serve` (publish has no
    --setting of its own), so they travel in --extra-options."""
    args = ["--metadata", str(metadata_path), "--template-dir", str(TEMPLATES_DIR),
            "--plugins-dir", str(PLUGINS_DIR), "--static", f"{STATIC_MOUNT}:{STATIC_DIR}"]
    settings = []
    for key, value in site_settings(time_limit_ms).items():
        settings += ["--setting", key, str(value).lower() if isinstance(value, bool) else str(value)]
    return args + ["--extra-options", " ".join(settings)]
