"""One base class for every mistake a user can make, and for files we cannot use.

The CLI turns any MpsprobeError into one line on stderr and exit status 2, in one
place; the Python API raises it as it is.
"""


class MpsprobeError(Exception):
    """Bad input or an unusable file: one line for the user, nothing written."""
