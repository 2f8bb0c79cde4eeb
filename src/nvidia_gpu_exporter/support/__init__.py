"""Small helpers below every layer but ``_go``."""
