"""Go's behaviour where byte-for-byte parity needs it: durations, float formatting, text, strconv.

Imports nothing of ours, so every layer may use it.
"""
