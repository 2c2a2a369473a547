"""Model families, one folder each, in keras-hub's layout (`keras_hub/src/models/<family>/`)."""
