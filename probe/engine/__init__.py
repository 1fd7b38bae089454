"""The engine: plan cases, run them in isolated workers, judge and time them; speed ladders."""
