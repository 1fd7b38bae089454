"""The op catalogue: where ops come from and how their sample inputs are made."""
