"""What upstream PyTorch declares: wheels, native_functions.yaml, common_mps.py."""
