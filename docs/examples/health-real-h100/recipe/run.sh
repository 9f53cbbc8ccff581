#!/bin/bash
# One call on the lent H100: captures, then nccl-tests built against the nvidia-nccl wheel.
set -u
C=$(cd "$(dirname "$0")" && pwd); D=/tmp/fabric-cap; mkdir -p $D
[ "${1:-}" = build-only ] || python3 $C/capture.py $D
NCCL=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])')
NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
{ echo "NCCL_HOME=$NCCL"; ls -R $NCCL | head -40; echo "NVCC=$NVCC"; $NVCC --version; } > $D/build-env.txt 2>&1
mkdir -p /tmp/nt && tar -xzf $C/nccl-tests.tgz -C /tmp/nt
mkdir -p /tmp/ncclh/lib && ln -sfn $NCCL/include /tmp/ncclh/include && ln -sf $NCCL/lib/libnccl.so.2 /tmp/ncclh/lib/libnccl.so && ln -sf $NCCL/lib/libnccl.so.2 /tmp/ncclh/lib/libnccl.so.2
CH=$(dirname $(dirname $NVCC))
( cd /tmp/nt && time make -j16 -C src build MPI=0 CUDA_HOME=$CH NCCL_HOME=/tmp/ncclh NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR=/tmp/nt/build ) > $D/build-log.txt 2>&1
echo "build rc=$?"
export LD_LIBRARY_PATH=$NCCL/lib:${LD_LIBRARY_PATH:-}
for args in "-b 8 -e 256M -f 2 -g 1"; do
  python3 - "$D/all-reduce-perf-1gpu.txt" /tmp/nt/build/all_reduce_perf $args <<'PY'
import os, subprocess, sys, time
out, argv = sys.argv[1], sys.argv[2:]
env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_NVLS_ENABLE="0", NCCL_DEBUG_SUBSYS="INIT,NET,ENV")
t = time.monotonic()
cp = subprocess.run(argv, capture_output=True, env=env, timeout=240)
with open(out, "w") as fh:
    fh.write("# source: captured on the lent nvidia-h100-x1 (Firecracker VM), nccl-tests 2.19.6 built with nvcc against the nvidia-nccl-cu13 wheel\n")
    fh.write("# machine: one NVIDIA H100 80GB HBM3 (SXM), Firecracker VM guest, no RDMA NIC\n")
    fh.write("# command: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV NCCL_NVLS_ENABLE=0 all_reduce_perf " + " ".join(argv[1:]) + "\n")
    fh.write("# exit status: %d\n\n" % cp.returncode)
    fh.write(cp.stdout.decode("utf-8", "replace") + cp.stderr.decode("utf-8", "replace"))
print("all_reduce_perf rc", cp.returncode, round(time.monotonic() - t, 1))
PY
done
cd /tmp && tar -czf $OUT/fabric-h100.tgz fabric-cap && ls -la $D
