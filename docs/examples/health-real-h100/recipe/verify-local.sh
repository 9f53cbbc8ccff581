#!/bin/bash
# On the lent H100: the branch's verify probes and checks (scripts/hwfacts --local), health checks included.
set -u
C=$(cd "$(dirname "$0")" && pwd); R=/tmp/llmb; D=/tmp/verify-health; mkdir -p $R $D
tar -xzf $C/repo.tgz -C $R && cd $R
T0=$(date +%s.%N)
python3 scripts/hwfacts --local --platform h100-x1 --write-bundle $D/bundle > $D/hwfacts-report.txt 2>&1; echo "hwfacts --local --platform h100-x1: exit $?" >> $D/hwfacts-report.txt
T1=$(date +%s.%N); echo "seconds: $(echo "$T1 - $T0" | bc)" >> $D/hwfacts-report.txt
python3 - > $D/verify-result.json 2>&1 <<'PY'
import json, sys
sys.path.insert(0, "plugins/module_utils")
from llmb import verify as V
from llmb.hw.facts import build_facts, read_bundle
profile = V.load_profile("h100-x1")
facts = build_facts(read_bundle("/tmp/verify-health/bundle"), "nvidia")
checks = V.verify(facts, profile, deepep=True)
print(json.dumps(V.summarize("h100-local", profile, checks, facts), indent=1, sort_keys=True))
PY
cd /tmp && tar -czf $OUT/verify-health-h100.tgz verify-health && cat $D/hwfacts-report.txt && ls $D/bundle
