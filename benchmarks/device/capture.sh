#!/bin/bash
# What a GPU machine prints, for test fixtures (tests/fixtures/device-h200 came from this script).
# Run from anywhere on a machine with an NVIDIA GPU and torch: bash benchmarks/device/capture.sh
# It installs this checkout into /tmp/ddpd (no network, no dependencies), runs nvidia-smi, the NVML probe
# through a recorder (tests/support/nvml_tape.py), topo, check (quick and full), health, a check with more
# ranks than GPUs, and `watch` around a healthy and a crashing one-GPU DDP job (train_gpu.py), each
# under a timeout, and writes everything to $OUT/cap (default /tmp/out/cap) and $OUT/cap.tgz.
export PYTHONUNBUFFERED=1
C=${OUT:-/tmp/out}/cap; mkdir -p $C; cd "$(dirname "$0")/../.." || exit 1
PY=${PY:-python3}
# checks/ becomes ddpdoctor.checks only through the install (package-dir); no network there, no deps.
$PY -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/ddpd . || exit 1
export PYTHONPATH=/tmp/ddpd:$PWD
# run from elsewhere: python -m puts the current folder first, where ddpdoctor/ has no checks/
R=$PWD; cd /tmp
run() { local name=$1 t=$2; shift 2; echo "== $name: $*"; local s=$(date +%s%3N)
  timeout -k 5 $t "$@" > $C/$name.out 2> $C/$name.err; local rc=$?
  echo "rc=$rc wall_ms=$(( $(date +%s%3N) - s ))" | tee $C/$name.rc; tail -3 $C/$name.out; tail -3 $C/$name.err
  tar czf ${OUT:-/tmp/out}/cap.tgz -C ${OUT:-/tmp/out} cap; }
{ uname -a; nproc; free -g; $PY -c "import torch,sys;print(sys.version);print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count()); print(torch.cuda.nccl.version() if torch.cuda.is_available() else '')"; $PY -m pip list 2>/dev/null | grep -i -E "nvidia-ml|pynvml|psutil|rich|yaml|textual|torch"; } > $C/env.txt 2>&1
cat $C/env.txt
run smi_q 30 nvidia-smi -q
run smi_topo 30 nvidia-smi topo -m
run smi_csv 30 nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active --format=csv
run nvml_tape 60 $PY -m tests.support.nvml_tape $C/nvml_tape.json
run topo 60 $PY -m ddpdoctor topo
run topo_json 60 $PY -m ddpdoctor topo --json --save $C/topo_snapshot.json
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV NCCL_TOPO_DUMP_FILE=$C/nccl_topo_dump.xml run check 150 $PY -m ddpdoctor check --json $C/check_report.json --verbose
CRASH=assert run watch_assert 100 $PY -m ddpdoctor watch --dumps $C/dumps_assert --json $C/watch_assert.json -- $PY -m torch.distributed.run --nproc-per-node 1 $R/benchmarks/device/train_gpu.py
run health 60 $PY -m ddpdoctor health --no-drain --verbose --json $C/health.json
run check_2ranks_1gpu 90 $PY -m ddpdoctor check --nproc-per-node 2 --select RDZ,ENV,COL --json $C/check_2r.json
run watch_ok 90 $PY -m ddpdoctor watch --dumps $C/dumps_ok --json $C/watch_ok.json -- $PY -m torch.distributed.run --nproc-per-node 1 $R/benchmarks/device/train_gpu.py
run check_full 150 $PY -m ddpdoctor check --suite full --json $C/check_full.json
ls -la $C
tar czf ${OUT:-/tmp/out}/cap.tgz -C ${OUT:-/tmp/out} cap
