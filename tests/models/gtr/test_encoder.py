import numpy as np
import pytest

from gtr_keras.errors import UserError
from gtr_keras.models.gtr.encoder import Encoder, bucket_length


def test_bucket_lengths_are_few():
    assert [bucket_length(n) for n in (1, 16, 17, 64, 65, 500, 512, 513, 1000)] == [
        16,
        16,
        32,
        64,
        128,
        512,
        512,
        768,
        1024,
    ]
    assert len({bucket_length(n) for n in range(1, 513)}) == 7


def test_results_come_back_in_input_order(tiny_encoder):
    texts = ["boundary layer " * n for n in (30, 1, 12, 0, 50, 3)]
    together = tiny_encoder.encode_documents(texts, batch_size=2)
    one_by_one = np.concatenate([tiny_encoder.encode_documents([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-6)


def test_queries_are_truncated_shorter_than_documents(tiny_encoder):
    long_text = "shock wave " * 100
    query, document = tiny_encoder.encode_queries([long_text]), tiny_encoder.encode_documents([long_text])
    assert not np.allclose(query, document)
    assert len(tiny_encoder.tokenize([long_text], "query")[0]) == 64


def test_empty_input_gives_empty_array(tiny_encoder):
    assert tiny_encoder.encode_documents([]).shape == (0, 64)


def test_one_graph_for_many_lengths(tiny_encoder):
    texts = ["lift " * n for n in range(0, 300, 7)]
    tiny_encoder.encode_documents(texts, batch_size=5)
    tiny_encoder.encode_queries(texts, batch_size=3)
    assert tiny_encoder._forward.experimental_get_tracing_count() == 1


def test_xla_programs_are_bounded_by_the_buckets(tiny_model_dir, tiny_encoder):
    from gtr_keras.saving import load_model

    xla_encoder = load_model(tiny_model_dir, jit_compile=True)
    texts = ["lift " * n for n in range(0, 300, 7)]
    lengths = [len(ids) for ids in xla_encoder.tokenize(texts)]
    embeddings = xla_encoder.encode_documents(texts, batch_size=4)
    # One program per length bucket, plus one for the short last batch.
    assert xla_encoder._forward.experimental_get_tracing_count() <= len({bucket_length(n) for n in lengths}) + 1
    np.testing.assert_allclose(embeddings, tiny_encoder.encode_documents(texts, batch_size=4), atol=1e-5)


def test_padding_only_where_xla_needs_it(tiny_encoder):
    assert tiny_encoder.padded_shape(3, 70, batch_size=32) == (3, 70)
    xla_encoder = Encoder(tiny_encoder.model, jit_compile=True)
    assert xla_encoder.padded_shape(3, 70, batch_size=32) == (4, 128)
    assert xla_encoder.padded_shape(1, 9, batch_size=32) == (1, 16)
    assert xla_encoder.padded_shape(16, 300, batch_size=16) == (16, 384)


def test_a_preprocessor_set_on_the_model_later_applies_to_its_encoder(tiny_model_dir):
    from gtr_keras.models.gtr.gtr_text_embedder_preprocessor import GTRTextEmbedderPreprocessor
    from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer
    from gtr_keras.saving import load_model

    encoder = load_model(tiny_model_dir)
    texts = ["Shock Wave " * 40, "Boundary Layer"]
    assert encoder.model.batch_encoder() is encoder and len(encoder.tokenize(texts)[0]) > 16
    model = encoder.model
    model.preprocessor = GTRTextEmbedderPreprocessor(model.preprocessor.tokenizer, 16, 8)
    assert len(encoder.tokenize(texts)[0]) == 16
    np.testing.assert_allclose(
        encoder.encode_documents(texts),
        load_model(tiny_model_dir, document_length=16).encode_documents(texts),
        atol=1e-6,
    )
    lowercase = GTRTokenizer(model.preprocessor.tokenizer.proto, lowercase=True)
    model.preprocessor = GTRTextEmbedderPreprocessor(lowercase, 16, 8)
    assert (
        encoder.tokenize(texts)
        == encoder.tokenize([text.lower() for text in texts])
        != load_model(tiny_model_dir, document_length=16).tokenize(texts)
    )
    model.preprocessor = None
    with pytest.raises(UserError, match="the model has no preprocessor now: it embeds token ids only"):
        encoder.encode_documents(texts)


def test_dimensions_give_the_first_n_coordinates_renormalised_and_warn_once(tiny_encoder, shown_warnings):
    from gtr_keras.models.text_encoder import TextEncoder
    from gtr_keras.utils.dimensions import truncate

    texts = ["lift on a wing", "the boundary layer"]
    full = tiny_encoder.encode_documents(texts)
    encoder = Encoder(tiny_encoder.model)  # a warning of its own
    with pytest.warns(UserWarning, match="not trained for embeddings of 16 dimensions"):
        cut = encoder.encode_documents(texts, dimensions=16)
    np.testing.assert_allclose(cut, truncate(full, 16), atol=1e-6)
    truncated = encoder.truncated(16)
    assert isinstance(truncated, TextEncoder) and truncated.embedding_dim == 16
    assert truncated.query_length == encoder.query_length and truncated.model is encoder.model
    np.testing.assert_allclose(truncated.encode_queries(texts), truncate(encoder.encode_queries(texts), 16), atol=1e-6)
    np.testing.assert_allclose(truncated.encode_documents(texts, dimensions=8), truncate(full, 8), atol=1e-6)
    assert encoder.encode_documents([], dimensions=8).shape == (0, 8)
    assert encoder.model.encode_documents(texts, dimensions=64).shape == (2, 64)
    with pytest.raises(UserError, match="dimensions: must be an integer from 1 to 64, got 65"):
        encoder.encode_queries(texts, dimensions=65)
    with pytest.raises(UserError, match="from 1 to 16, got 32"):
        truncated.encode_queries(texts, dimensions=32)


def test_a_model_trained_for_the_dimensions_does_not_warn(tiny_encoder, shown_warnings):
    import warnings

    from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder

    config = tiny_encoder.model.get_config()
    assert "matryoshka_dims" not in config  # a model without them records none
    model = GTRTextEmbedder.from_config({**config, "matryoshka_dims": [16, 32]})
    assert model.matryoshka_dims == (16, 32) and model.get_config()["matryoshka_dims"] == [16, 32]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model.batch_encoder().truncated(32).embedding_dim == 32


def test_a_text_holding_a_lone_surrogate_is_one_user_error_naming_it(tiny_encoder):
    with pytest.raises(UserError, match=r"^texts\[1\]: a lone surrogate \(U\+D800 at character 4\), which UTF-8"):
        tiny_encoder.encode_queries(["lift", "wing\ud800"])
    assert tiny_encoder.encode_documents(["wing \u00e9".encode()]).shape == (1, 64)  # UTF-8 bytes as they are


def _pooled_independently(model, token_ids, start, end):
    """A span's late vector computed by hand: the text's forward pass alone, the span's token outputs
    averaged, projected by the kernel and divided by their norm."""
    features = {"token_ids": np.array([token_ids], np.int32), "padding_mask": np.ones((1, len(token_ids)), np.int32)}
    sequence = model.backbone(features).numpy()[0]
    vector = sequence[start:end].mean(axis=0) @ model.projection.kernel.numpy()
    return vector / np.linalg.norm(vector)


def test_late_chunks_are_the_spans_of_one_forward_pass_pooled(tiny_encoder):
    texts = ["the boundary layer separates " * 200, "lift on a wing", "shock wave " * 40]
    ids = tiny_encoder.tokenize(texts, length=2048)
    assert len(ids[0]) > 600 > tiny_encoder.document_length  # past the model's budget
    spans = [[(0, 64), (32, 96), (550, len(ids[0]))], [], [(0, len(ids[2])), (5, 6)]]
    vectors = tiny_encoder.encode_late_chunks(texts, spans, document_length=2048, batch_size=2)
    assert vectors.shape == (5, 64) and vectors.dtype == np.float32
    expected = [_pooled_independently(tiny_encoder.model, ids[t], s, e) for t in (0, 2) for s, e in spans[t]]
    np.testing.assert_allclose(vectors, np.array(expected), atol=1e-5)
    window = tiny_encoder.encode_documents([tiny_encoder.tokenizer.detokenize(ids[0][32:96])])
    assert not np.allclose(vectors[1], window[0], atol=1e-3)  # the window sees its document, unlike alone


def test_a_late_chunk_over_a_whole_document_is_its_embedding(tiny_encoder, shown_warnings):
    from gtr_keras.utils.dimensions import truncate

    texts = ["lift on a wing", "shock wave " * 10]
    spans = [[(0, len(ids))] for ids in tiny_encoder.tokenize(texts)]
    embeddings = tiny_encoder.encode_documents(texts)
    np.testing.assert_allclose(tiny_encoder.encode_late_chunks(texts, spans, 512), embeddings, atol=1e-5)
    with pytest.warns(UserWarning, match="not trained for embeddings of 16 dimensions"):
        cut = Encoder(tiny_encoder.model).truncated(16).encode_late_chunks(texts, spans, 512)
    np.testing.assert_allclose(cut, truncate(embeddings, 16), atol=1e-5)
    with pytest.warns(UserWarning, match="not trained for embeddings of 8 dimensions"):
        xla = Encoder(tiny_encoder.model, jit_compile=True).encode_late_chunks(texts, spans, 512, dimensions=8)
    np.testing.assert_allclose(xla, truncate(embeddings, 8), atol=1e-5)


@pytest.mark.parametrize(
    ("spans", "length", "message"),
    [
        ([[(0, 3)], [(2, 2)]], 64, r"^spans\[1\]\[0\]: \[2, 2\) is empty or starts below 0$"),
        ([[(-1, 3)], []], 64, r"^spans\[0\]\[0\]: \[-1, 3\) is empty"),
        ([[(0, 3)], [(0, 80)]], 64, r"^spans\[1\]\[0\]: \[0, 80\) ends past document_length 64: raise it$"),
        ([[(0, 3)], [(0, 60)]], 64, r"^spans\[1\]\[0\]: \[0, 60\) ends past the text's 4 tokens$"),
        ([[(0, 3)], [(0.0, 2.0)]], 64, r"^spans\[1\]: not a list of \[start, end\) pairs of integers"),
        ([[(0, 3)], [(0, 1, 2)]], 64, r"^spans\[1\]: not a list"),
        ([[(0, 3)]], 64, r"^spans: 1 lists of spans for 2 texts"),
        ([[], []], 1, r"^document_length must be an integer of at least 2"),
    ],
)
def test_bad_spans_are_one_user_error_before_any_forward_pass(tiny_encoder, spans, length, message):
    encoder = Encoder(tiny_encoder.model)
    with pytest.raises(UserError, match=message):
        encoder.encode_late_chunks(["shock wave " * 40, "lift on a"], spans, length)
    assert encoder._embed_spans.experimental_get_tracing_count() == 0


def test_only_the_keras_encoder_late_chunks(tiny_encoder):
    from gtr_keras.models.text_encoder import TextEncoder

    with pytest.raises(UserError, match="late chunking needs the Keras model's token outputs; TextEncoder"):
        TextEncoder().encode_late_chunks(["lift"], [[(0, 1)]], 64)
