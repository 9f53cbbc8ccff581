#!/bin/bash
# Install the accelerator simulator into this node for PROFILE (idempotent; rerun to change profile).
#   bash /opt/accelsim-src/install-accelsim.sh h800-hgx8
# Runs as root inside a simulated node (Debian bookworm, python3, systemd as PID 1). ACCELSIM_ROOT
# relocates everything under another directory (unit tests). See docs/simulator.md.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v python3 >/dev/null 2>&1; then
    echo "install-accelsim: python3 is required on the node" >&2
    exit 1
fi
exec python3 -S -c 'import sys; sys.path.insert(0, sys.argv[1]); from accelsim.install import main; sys.exit(main(sys.argv[2:]))' "$src" "$@"
