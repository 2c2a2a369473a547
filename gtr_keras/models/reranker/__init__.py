"""Rerankers: cross-encoders (a query and a document read together, one relevance score out) as keras-hub
classes, one class a module, each module named after its class.

From the bottom up: `reranker_bert_backbone` (`RerankerBertBackbone`, keras-hub's `BertBackbone` with the
checkpoint's GELU) and `reranker_xlm_roberta_backbone` (`RerankerXLMRobertaBackbone`, keras-hub's
`XLMRobertaBackbone` with a GELU that ONNX runs); `reranker_bert_tokenizer` (`RerankerBertTokenizer`, BERT's
WordPiece as Hugging Face's fast tokenizer normalises) and `reranker_xlm_roberta_tokenizer`
(`RerankerXLMRobertaTokenizer`, the `sentencepiece` library's ids); `reranker_preprocessor`
(`RerankerPreprocessor`, pairs packed and cut with Hugging Face's `longest_first`); `pair_scorer` (`PairScorer`,
Python pairs in length-sorted batches); and `reranker` (`Reranker`: the backbone and Hugging Face's scoring
head). The readers of cross-encoder checkpoints are `gtr_keras.convert.cross_encoder`'s.
"""
