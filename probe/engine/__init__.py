"""The probe's engine: running ops on the CPU and the target and measuring them."""
