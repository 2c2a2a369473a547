"""BEIR data and evaluation: `readers` (BEIR collections and text files) and `evaluation` (pytrec_eval
metrics, TREC run files). Imports nothing of gtr-keras but `utils`."""
