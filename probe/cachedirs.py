"""Where mpsprobe keeps what it can rebuild: one root for every cache.

platformdirs picks the platform's place (~/Library/Caches/mpsprobe on a Mac,
$XDG_CACHE_HOME or ~/.cache/mpsprobe on Linux), so environments, wheels and
the catalogue never disagree about it; MPSPROBE_CACHE overrides the root.
"""
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
