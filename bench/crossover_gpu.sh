#!/usr/bin/env bash
# The detour study's crossover on one CUDA GPU (bf16, the bundled base), budgets 1e6 1e7 1e8 tokens, 3 pretraining
# seeds, the bio-ner suite, every arm (MLM, detour, seed-noise control, low / mid third frozen); weights are dropped
# once measured, so what comes back is small files only.
#
#   bash bench/crossover_gpu.sh [OUT_DIR]        # default: $OUT if set (a device machine), else bench/results
#   EXTRA_ARGS=--no-interventions bash bench/crossover_gpu.sh   # the MLM / detour pair alone (2.5x fewer runs)
#
# Data: ../shared/data (or DETOUR_SHARED_DATA=folder holding ncbi_disease, anatem, bc2gm, craft_pmc_oa_text; the
# suite file then comes from SUITE=path, with its tasks' data relative to it). Wheels missing on the machine (plotly,
# seqeval) are installed from .whl/ when that folder exists. Writes OUT_DIR/crossover-detour-gpu.tgz (the study's
# folder without weights or the sweep's large standalone HTML) and OUT_DIR/crossover-detour-gpu.md (the report).
set -uo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-${OUT:-bench/results}}"
STUDY="${STUDY_DIR:-/tmp/crossover-detour-gpu}"
PY="${PYTHON:-python3}"
if [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
nvidia-smi -L || true
"$PY" -m backend replicate --preset gpu --budgets 1e6 1e7 1e8 --pretrain-seeds 3 \
  --suite "${SUITE:-configs/suites/bio-ner.yaml}" --drop-weights --out "$STUDY" ${EXTRA_ARGS:-} --plan
"$PY" -m backend replicate --preset gpu --budgets 1e6 1e7 1e8 --pretrain-seeds 3 \
  --suite "${SUITE:-configs/suites/bio-ner.yaml}" --drop-weights --out "$STUDY" ${EXTRA_ARGS:-} 2>&1 | tee "$STUDY.log" | tail -n 40
rc=${PIPESTATUS[0]}
mkdir -p "$DEST"
cp "$STUDY.log" "$STUDY/replicate.log" 2>/dev/null
tar czf "$DEST/crossover-detour-gpu.tgz" -C "$(dirname "$STUDY")" \
  --exclude=final --exclude=checkpoints --exclude="$(basename "$STUDY")/data" --exclude='*/sweep/figures' --exclude='*/sweep/*.html' \
  --exclude='*/evals/*.html' --exclude='*/evals/*.png' "$(basename "$STUDY")"
cp "$STUDY/report.md" "$DEST/crossover-detour-gpu.md" 2>/dev/null
exit "$rc"
