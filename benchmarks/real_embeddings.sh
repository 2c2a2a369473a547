#!/usr/bin/env bash
# ScaNN vs exact search on real GTR embeddings: every document and query of the shared BEIR
# collections, encoded with a trained model, then benchmarks/search.py on them.
#   bash benchmarks/real_embeddings.sh MODEL_DIR [DATA_DIR] [SCRATCH_DIR]
set -euo pipefail
MODEL=$1
DATA=${2:-../shared/data}
SCRATCH=${3:-/tmp/gtr-real-embeddings}
mkdir -p "$SCRATCH"
for dataset in scifact nfcorpus cranfield cisi msmarco-dl19-subset; do
  corpus=$(ls "$DATA/$dataset"/corpus.jsonl* | head -1)
  gtr-keras encode --model "$MODEL" --input "$corpus" --output "$SCRATCH/$dataset-corpus.npy" --batch-size 64
  gtr-keras encode --model "$MODEL" --input "$DATA/$dataset/queries.jsonl" --output "$SCRATCH/$dataset-queries.npy"
done
python - "$SCRATCH" <<'PY'
import glob, sys
import numpy as np
scratch = sys.argv[1]
for kind in ("corpus", "queries"):
    parts = [np.load(p) for p in sorted(glob.glob(f"{scratch}/*-{kind}.npy")) if "/all-" not in p]
    np.save(f"{scratch}/all-{kind}.npy", np.concatenate(parts))
    print(kind, sum(len(p) for p in parts))
PY
PYTHONPATH=. python benchmarks/search.py --embeddings "$SCRATCH/all-corpus.npy" --query-embeddings "$SCRATCH/all-queries.npy"
