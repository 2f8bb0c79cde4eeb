"""Recorded nvidia-smi outputs and the engine that answers nvidia-smi command lines from them."""
