import numpy as np
import pytest
import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.training.losses import (
    BidirectionalInBatchLoss,
    SimilarityDistillationLoss,
    bidirectional_softmax_terms,
)


def unit(rng, *shape):
    x = rng.normal(size=shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def reference_terms(q, p, n, tau, pos_ids=None, neg_ids=None, query_ids=None):
    """Loop-by-loop NumPy version of the GTR loss terms, in float64."""
    batch, k = q.shape[0], n.shape[1]
    candidates = [(p[j], None if pos_ids is None else pos_ids[j], j) for j in range(batch)]
    candidates += [(n[j, m], None if neg_ids is None else neg_ids[j, m], None) for j in range(batch) for m in range(k)]
    qp, pq = [], []
    for i in range(batch):
        kept = [
            np.dot(q[i], vec) / tau
            for vec, doc_id, slot in candidates
            if slot == i
            or (
                (pos_ids is None or doc_id != pos_ids[i])
                and (query_ids is None or slot is None or query_ids[slot] != query_ids[i])
            )
        ]
        qp.append(np.log(np.sum(np.exp(kept))) - np.dot(q[i], p[i]) / tau)
        kept = [
            np.dot(p[i], q[j]) / tau
            for j in range(batch)
            if j == i
            or ((pos_ids is None or pos_ids[j] != pos_ids[i]) and (query_ids is None or query_ids[j] != query_ids[i]))
        ]
        pq.append(np.log(np.sum(np.exp(kept))) - np.dot(p[i], q[i]) / tau)
    return np.array(qp), np.array(pq)


def batch(k, batch_size=6, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    q, p, n = unit(rng, batch_size, dim), unit(rng, batch_size, dim), unit(rng, batch_size, k, dim)
    # Positives 0 and 3 are the same document; query 1's first negative is it too,
    # and query 2's first negative is query 2's own positive.
    pos_ids = np.array(["a", "b", "c", "a", "e", "f"][:batch_size])
    neg_ids = np.array([[f"n{j}{m}" for m in range(k)] for j in range(batch_size)], dtype="U8")
    neg_ids = neg_ids.reshape(batch_size, k)
    if k:
        neg_ids[1, 0], neg_ids[2, 0] = "a", "c"
    return q, p, n, pos_ids, neg_ids


@pytest.mark.parametrize("k", [0, 1, 3])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("tau", [0.01, 0.5])
def test_terms_match_numpy_reference(k, masked, tau):
    q, p, n, pos_ids, neg_ids = batch(k)
    ids = [None, None] if not masked else [tf.constant(pos_ids), tf.constant(neg_ids)]
    want_qp, want_pq = reference_terms(q, p, n, tau, *([pos_ids, neg_ids] if masked else []))
    got_qp, got_pq = bidirectional_softmax_terms(q, p, n if k else None, tau, *ids)
    np.testing.assert_allclose(got_qp.numpy(), want_qp, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_pq.numpy(), want_pq, rtol=0, atol=1e-6)
    loss = BidirectionalInBatchLoss(tau)(q, p, n, *ids)
    np.testing.assert_allclose(float(loss), (want_qp.sum() + want_pq.sum()) / (2 * len(q)), rtol=0, atol=1e-6)
    # float32 inputs, as in training: the same up to float32 rounding of logits of size 1 / tau.
    got_qp32, got_pq32 = bidirectional_softmax_terms(
        q.astype("float32"), p.astype("float32"), n.astype("float32") if k else None, tau, *ids
    )
    np.testing.assert_allclose(got_qp32.numpy(), want_qp, rtol=1e-6, atol=1e-5 / tau)
    np.testing.assert_allclose(got_pq32.numpy(), want_pq, rtol=1e-6, atol=1e-5 / tau)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_query_id_masking_matches_numpy_reference(k):
    q, p, n, pos_ids, neg_ids = batch(k)
    # Queries 1 and 4 are the same query with different judged passages.
    query_ids = np.array(["x", "y", "z", "w", "y", "v"])
    want_qp, want_pq = reference_terms(q, p, n, 0.05, pos_ids, neg_ids, query_ids)
    got_qp, got_pq = bidirectional_softmax_terms(
        q, p, n if k else None, 0.05, tf.constant(pos_ids), tf.constant(neg_ids), query_ids=tf.constant(query_ids)
    )
    np.testing.assert_allclose(got_qp.numpy(), want_qp, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_pq.numpy(), want_pq, rtol=0, atol=1e-6)
    ids = (tf.constant(pos_ids), tf.constant(neg_ids))
    with_queries = bidirectional_softmax_terms(q, p, n if k else None, 1.0, *ids, query_ids=tf.constant(query_ids))
    only_documents = bidirectional_softmax_terms(q, p, n if k else None, 1.0, *ids)
    for direction in (0, 1):
        changed = ~np.isclose(with_queries[direction].numpy(), only_documents[direction].numpy())
        assert changed.tolist() == [False, True, False, False, True, False]
    rows = bidirectional_softmax_terms(
        q,
        p,
        n if k else None,
        0.05,
        tf.constant(pos_ids),
        tf.constant(neg_ids),
        rows=(3, 6),
        query_ids=tf.constant(query_ids),
    )
    np.testing.assert_allclose(rows[0].numpy(), want_qp[3:], rtol=0, atol=1e-6)


def test_masking_changes_only_rows_with_duplicates():
    q, p, n, pos_ids, neg_ids = batch(2)
    plain = bidirectional_softmax_terms(q, p, n, temperature=1.0)
    masked = bidirectional_softmax_terms(
        q, p, n, temperature=1.0, positive_ids=tf.constant(pos_ids), negative_ids=tf.constant(neg_ids)
    )
    changed_qp = ~np.isclose(plain[0].numpy(), masked[0].numpy())
    changed_pq = ~np.isclose(plain[1].numpy(), masked[1].numpy())
    # Rows 0 and 3 share a positive (and query 1 has "a" as a negative); row 2 has its positive as a negative.
    assert changed_qp.tolist() == [True, False, True, True, False, False]
    assert changed_pq.tolist() == [True, False, False, True, False, False]


def test_integer_ids_mask_like_strings():
    q, p, n, pos_ids, neg_ids = batch(1)
    hashed = [tf.strings.to_hash_bucket_fast(tf.constant(x), 2**62) for x in (pos_ids, neg_ids)]
    by_string = bidirectional_softmax_terms(
        q, p, n, positive_ids=tf.constant(pos_ids), negative_ids=tf.constant(neg_ids)
    )
    by_hash = bidirectional_softmax_terms(q, p, n, positive_ids=hashed[0], negative_ids=hashed[1])
    for a, b in zip(by_string, by_hash):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_row_shares_add_up_to_the_batch_loss():
    q, p, n, *_ = batch(2)
    loss = BidirectionalInBatchLoss()
    whole = loss(q, p, n)
    shares = loss(q, p, n, rows=(0, 2)) + loss(q, p, n, rows=(2, 6))
    np.testing.assert_allclose(float(shares), float(whole), rtol=1e-6)
    halves = (loss(q[:3], p[:3], n[:3]) + loss(q[3:], p[3:], n[3:])) / 2
    assert abs(float(halves) - float(whole)) > 1e-3


def test_gradient_is_finite_with_masking_and_compiles_with_xla():
    q, p, n, pos_ids, neg_ids = batch(3)
    ids = [tf.strings.to_hash_bucket_fast(tf.constant(x), 2**62) for x in (pos_ids, neg_ids)]
    loss = BidirectionalInBatchLoss()
    q = tf.Variable(q, dtype=tf.float32)

    @tf.function(jit_compile=True)
    def value_and_grad():
        with tf.GradientTape() as tape:
            value = loss(q, p, n, *ids)
        return value, tape.gradient(value, q)

    value, grad = value_and_grad()
    np.testing.assert_allclose(float(value), float(loss(q, p, n, *ids)), rtol=1e-6)
    assert np.isfinite(grad.numpy()).all()


def test_masking_needs_negative_ids_with_negatives():
    q, p, n, pos_ids, _ = batch(1)
    with pytest.raises(UserError, match="^false-negative masking needs `negative_ids`"):
        bidirectional_softmax_terms(q, p, n, positive_ids=tf.constant(pos_ids))


def test_config_round_trip():
    loss = BidirectionalInBatchLoss(temperature=0.05)
    assert BidirectionalInBatchLoss.from_config(loss.get_config()).temperature == 0.05


def test_the_loss_is_zero_for_the_teachers_own_embeddings_and_splits_over_rows():
    rng = np.random.default_rng(0)
    unit = lambda n, d: tf.math.l2_normalize(tf.constant(rng.normal(size=(n, d)), tf.float32), -1)  # noqa: E731
    anchors, documents, single = unit(6, 8), unit(6, 8), tf.constant([False, True, False, True, False, False])
    value, hits = SimilarityDistillationLoss(0.1, 0.1, mse_weight=0.5).loss_and_hits(
        anchors, documents, anchors, documents, single
    )
    assert float(value) == pytest.approx(0.0, abs=1e-6) and float(hits) == 6.0
    loss = SimilarityDistillationLoss(0.05, 0.1, mse_weight=0.5)
    student_anchors, student_documents = unit(6, 8), unit(6, 8)
    whole = float(loss(student_anchors, student_documents, anchors, documents, single))
    parts = sum(
        float(loss(student_anchors, student_documents, anchors, documents, single, rows=rows))
        for rows in ((0, 2), (2, 6))
    )
    assert whole == pytest.approx(parts, rel=1e-6) and whole > 0.1


def test_the_loss_is_the_kl_from_the_teacher_with_a_single_texts_own_score_left_out():
    rng = np.random.default_rng(1)
    s_a, s_d, t_a, t_d = (rng.normal(size=(4, 3)).astype("float32") for _ in range(4))
    single = np.array([False, True, False, True])
    tau_s, tau_t = 0.5, 0.2

    def softmax_rows(logits, masked):
        logits = np.where(masked, -np.inf, logits)
        e = np.exp(logits - logits.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    masked = np.eye(4, dtype=bool) & single[:, None]
    expected = 0.0
    for student, teacher in (((s_a, s_d), (t_a, t_d)), ((s_d, s_a), (t_d, t_a))):
        p = softmax_rows(teacher[0] @ teacher[1].T / tau_t, masked)
        q = softmax_rows(student[0] @ student[1].T / tau_s, masked)
        kept = ~masked
        expected += np.sum(p[kept] * (np.log(p[kept]) - np.log(q[kept])))  # KL(teacher || student)
    loss = SimilarityDistillationLoss(tau_s, tau_t)
    assert float(loss(s_a, s_d, t_a, t_d, tf.constant(single))) == pytest.approx(expected / 8, rel=1e-5)


@pytest.mark.parametrize("k", [0, 2])
def test_the_matryoshka_loss_sums_the_loss_over_the_renormalised_prefixes(k):
    q, p, n, pos_ids, neg_ids = batch(k)
    q, p, n = (x.astype(np.float32) for x in (q, p, n))  # the tower's embeddings are float32
    ids = [tf.strings.to_hash_bucket_fast(tf.constant(x), 2**62) for x in (pos_ids, neg_ids)]
    plain = BidirectionalInBatchLoss()
    whole = float(plain(q, p, n if k else None, *ids))
    np.testing.assert_allclose(
        float(BidirectionalInBatchLoss(matryoshka_dims=[16])(q, p, n if k else None, *ids)), whole, rtol=1e-6
    )

    def prefix(x, dimensions):
        return x[..., :dimensions] / np.linalg.norm(x[..., :dimensions], axis=-1, keepdims=True)

    expected = whole + sum(float(plain(prefix(q, d), prefix(p, d), prefix(n, d) if k else None, *ids)) for d in (4, 8))
    matryoshka = BidirectionalInBatchLoss(matryoshka_dims=[4, 8])
    np.testing.assert_allclose(float(matryoshka(q, p, n if k else None, *ids)), expected, rtol=1e-5)
    shares = matryoshka(q, p, n if k else None, *ids, rows=(0, 2)) + matryoshka(
        q, p, n if k else None, *ids, rows=(2, 6)
    )
    np.testing.assert_allclose(float(shares), expected, rtol=1e-5)  # the replicas' shares add up to it
    assert BidirectionalInBatchLoss.from_config(matryoshka.get_config()).matryoshka_dims == (4, 8)
    with pytest.raises(UserError, match="matryoshka_dims: must be an integer of at least 1, got 0"):
        BidirectionalInBatchLoss(matryoshka_dims=[0])
