"""Where mpsprobe keeps what it can rebuild: one root for every cache.

platformdirs picks the platform's place (~/Library/Caches/mpsprobe on a Mac,
$XDG_CACHE_HOME or ~/.cache/mpsprobe on Linux), so environments, wheels and
the catalogue never disagree about it; MPSPROBE_CACHE overrides the root.
"""
import json
import os

import platformdirs

CACHE_ENV = "MPSPROBE_CACHE"


def root():
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.path.expanduser(os.environ[CACHE_ENV]))
    return platformdirs.user_cache_dir("mpsprobe", appauthor=False)


def folder(name):
    """A named folder under the root (not created here)."""
    return os.path.join(root(), name)


def write_json(path, data):
    """Write `data` as JSON to `path` whole or not at all (readers never see half a file);
    a cache that cannot be written only costs the next command its speed."""
    partial = f"{path}.{os.getpid()}.partial"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(partial, "w") as f:
            json.dump(data, f)
        os.replace(partial, path)
    except OSError:
        try:
            os.remove(partial)
        except OSError:
            pass
