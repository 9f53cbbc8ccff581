"""Engine test double: the `ktransformers` package name, so that `python -m ktransformers.server.main` runs it."""
