"""The ``exec`` backend: run nvidia-smi (or a wrapper such as ``ssh host nvidia-smi``) and parse its CSV."""
