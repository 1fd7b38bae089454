"""Model check: load a model, capture its aten calls, replay them, report per op."""
