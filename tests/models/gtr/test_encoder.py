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
    from gtr_keras.saving import load

    xla_encoder = load(tiny_model_dir, jit_compile=True)
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
    from gtr_keras.saving import load

    encoder = load(tiny_model_dir)
    texts = ["Shock Wave " * 40, "Boundary Layer"]
    assert encoder.model.batch_encoder() is encoder and len(encoder.tokenize(texts)[0]) > 16
    model = encoder.model
    model.preprocessor = GTRTextEmbedderPreprocessor(model.preprocessor.tokenizer, 16, 8)
    assert len(encoder.tokenize(texts)[0]) == 16
    np.testing.assert_allclose(
        encoder.encode_documents(texts), load(tiny_model_dir, document_length=16).encode_documents(texts), atol=1e-6
    )
    lowercase = GTRTokenizer(model.preprocessor.tokenizer.proto, lowercase=True)
    model.preprocessor = GTRTextEmbedderPreprocessor(lowercase, 16, 8)
    assert (
        encoder.tokenize(texts)
        == encoder.tokenize([text.lower() for text in texts])
        != load(tiny_model_dir, document_length=16).tokenize(texts)
    )
    model.preprocessor = None
    with pytest.raises(UserError, match="the model has no preprocessor now: it embeds token ids only"):
        encoder.encode_documents(texts)


def test_a_text_holding_a_lone_surrogate_is_one_user_error_naming_it(tiny_encoder):
    with pytest.raises(UserError, match=r"^texts\[1\]: a lone surrogate \(U\+D800 at character 4\), which UTF-8"):
        tiny_encoder.encode_queries(["lift", "wing\ud800"])
    assert tiny_encoder.encode_documents(["wing \u00e9".encode()]).shape == (1, 64)  # UTF-8 bytes as they are
