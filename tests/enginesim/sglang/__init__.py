"""Stand-in `sglang` package so that `python -m sglang.launch_server` runs the engine test double."""
