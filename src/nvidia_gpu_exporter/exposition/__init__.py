"""From snapshots to Prometheus text: every family's name, type, HELP and labels (:mod:`.families`)."""
