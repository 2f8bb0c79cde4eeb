"""The plain data that crosses the layers: snapshot types, the nvidia-smi field vocabulary, uuid labels."""
