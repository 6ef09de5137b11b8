#!/usr/bin/env bash
# One device call that measures each lever of bench/gpu_levers.py on the ModernBERT-base shape at seq 1024, each row
# against the same setup without it (same weights, same batches), plus one profiled step per setup and a micro-batch
# twice the default. Every part is bounded (timeout) and writes its JSON after each row, so a part cut short keeps
# what it measured. On a CUDA machine with the GPU wheels (.gpu/, ../shared/gpu/prepare.sh with
# EXTRA="liger-kernel==0.8.5 torchao==0.17.0"):
#     source .gpu/env.sh && OUT=bench/results bash bench/gpu_levers.sh
set -u
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
B="python3 bench/bench_gpu.py --seq-lens 1024 --no-hf --skip-check --steps 10 --warmup 3"
D=auto:auto:auto
timeout 290 $B --objectives mlm --setups $D $D+fp8 $D+liger-norm $D+liger-norm+liger-geglu \
  --profile "$OUT/gpu-levers-profile.txt" --out "$OUT/gpu-levers-1024-mlm.json"
timeout 110 $B --objectives clm --setups $D $D+fp8 --out "$OUT/gpu-levers-1024-clm.json"
timeout 110 $B --objectives mlm clm --setups $D --tokens-per-step 131072 --out "$OUT/gpu-levers-1024-batch2x.json"
echo "levers done at $SECONDS s"
