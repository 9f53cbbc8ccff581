"""Engine planners: turn a resolved context and topology into per-host services."""
