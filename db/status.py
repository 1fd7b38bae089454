"""The status vocabulary: one word per case; roll-ups take the worst."""

# Ordered from least to most severe. A roll-up over several cases reports the
# highest-ranked status present, so `skip` only survives when nothing ran.
STATUSES = (
    "skip",         # no ground truth: reference failed, or the op is nondeterministic
    "pass",         # native on the target and within tolerance
    "fallback",     # ran, but at least one aten op fell back to the CPU
    "mismatch",     # native, but numbers/shape/dtype differ beyond tolerance
    "unsupported",  # the target refused: not implemented for the device or dtype
    "error",        # the target raised something else while the reference succeeded
    "timeout",      # exceeded its time budget; the worker was killed
    "crash",        # the worker process died on this case
)

RANK = {status: rank for rank, status in enumerate(STATUSES)}

# Statuses that mean "this works on the target" for a user's purposes.
WORKING = ("pass", "skip")


def worst(statuses):
    """The most severe status among `statuses` (None for an empty input)."""
    ranked = [RANK[s] for s in statuses]
    return STATUSES[max(ranked)] if ranked else None
