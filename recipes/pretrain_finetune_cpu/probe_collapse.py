"""Watches a from-scratch run for representation collapse, step by step.

Trains `gtr-small` from random weights on a BEIR training split and every `--every` steps prints the
loss, the mean and spread of the cosine between the batch's documents (all documents at one point
when the tower has collapsed) and the in-batch top-1 accuracy of the queries (chance: 1/batch).

    python recipes/pretrain_finetune_cpu/probe_collapse.py --tokenizer spiece.model \
        --learning-rate 1e-3 --temperature 0.01 --steps 140
"""

import argparse

import keras
import numpy as np

from gtr_keras import DualEncoder, GTRTextEmbedder, GTRTokenizer
from gtr_keras.training import TrainingData, make_optimizer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/nfcorpus")
    parser.add_argument("--tokenizer", required=True, help="SentencePiece model")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--temperature", type=float, default=0.01)
    parser.add_argument("--optimizer", choices=["adafactor", "adam"], default="adafactor")
    parser.add_argument("--steps", type=int, default=140)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-positives-per-query", type=int, default=10)
    parser.add_argument("--fixed-batches", type=int, help="cycle through this many batches only")
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    data = TrainingData(
        args.data,
        split="train",
        num_negatives=0,
        query_length=32,
        document_length=128,
        max_positives_per_query=args.max_positives_per_query,
    )
    batches = data.dataset(GTRTokenizer(args.tokenizer), args.batch_size, seed=0, drop_remainder=True)
    if args.fixed_batches:
        batches = batches.take(args.fixed_batches).cache().repeat()
    batches = iter(batches)
    tower = GTRTextEmbedder.from_architecture("gtr-small")
    model = DualEncoder(tower, args.temperature)
    optimizer = (
        make_optimizer(2000, args.learning_rate)
        if args.optimizer == "adafactor"
        else keras.optimizers.Adam(args.learning_rate)
    )
    model.compile(optimizer=optimizer)
    print("step  loss    doc-cos mean  doc-cos std  in-batch acc")
    for step in range(args.steps + 1):
        batch = next(batches)
        loss = float(model.train_step(batch)["loss"])
        if step % args.every == 0:
            documents, queries = tower(batch["positive"]).numpy(), tower(batch["query"]).numpy()
            cosines = (documents @ documents.T)[~np.eye(len(documents), dtype=bool)]
            accuracy = np.mean(np.argmax(queries @ documents.T, axis=1) == np.arange(len(queries)))
            print(
                f"{step:4d}  {loss:6.3f}  {cosines.mean():12.3f}  {cosines.std():11.3f}  {accuracy:12.3f}", flush=True
            )


if __name__ == "__main__":
    main()
