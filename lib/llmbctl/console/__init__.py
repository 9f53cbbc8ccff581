"""`llmb`, the operator's console: stage playbooks run through ansible-runner with live progress
per stage x host (progress.py, stdlib: runner events -> state), the report at the end (cli.py:
the command line, rich and ansible-runner). Controller side only; never shipped to nodes."""
