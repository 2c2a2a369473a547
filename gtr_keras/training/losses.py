"""GTR's training loss: a bidirectional in-batch sampled softmax with hard negatives; and a reranker's, a listwise
softmax over each query's group (`ListwiseSoftmaxLoss`).

For a batch of `B` queries `q_i`, their positive passages `p_i` and `k` hard
negatives `n_i1 .. n_ik` per query (all unit-norm, so dot products are
cosines), with temperature `tau`:

    L = 1 / (2B) * sum_i [ L_qp(i) + L_pq(i) ]

    L_qp(i) = -log( exp(q_i.p_i / tau) / Z_qp(i) ),
    Z_qp(i) = sum_j exp(q_i.p_j / tau) + sum_{j, m} exp(q_i.n_jm / tau)

    L_pq(i) = -log( exp(p_i.q_i / tau) / Z_pq(i) ),
    Z_pq(i) = sum_j exp(p_i.q_j / tau)

So each query is scored against every positive and every hard negative of the
batch (query -> passage), and each positive against every query
(passage -> query), as in Ni et al. 2022, "Large Dual Encoders Are
Generalizable Retrievers".

False-negative masking (optional): given document ids of the positives `[B]`
and negatives `[B, k]`, a candidate passage with the same id as `p_i` is left
out of `Z_qp(i)` (except `p_i` itself, the target), and a query `q_j`, `j != i`,
whose positive has the same id as `p_i` is left out of `Z_pq(i)`. Given query
ids `[B]` (a query with several judged passages appears once per passage), the
positives `p_j` of the same query as `q_i` are left out of `Z_qp(i)`, and the
queries `q_j` equal to `q_i` are left out of `Z_pq(i)`.
"""

import tensorflow as tf

from gtr_keras.errors import UserError
from gtr_keras.utils.dimensions import check_dimensions, truncate_tensor

DEFAULT_TEMPERATURE = 0.01
_MASKED_LOGIT = -1e9


def in_batch_logits(
    queries,
    positives,
    negatives=None,
    temperature=DEFAULT_TEMPERATURE,
    positive_ids=None,
    negative_ids=None,
    rows=None,
    query_ids=None,
):
    """The masked logits of both directions of the GTR loss, and their target columns.

    Args:
        queries: float `[B, D]` unit-norm query embeddings.
        positives: float `[B, D]` unit-norm embeddings of each query's positive.
        negatives: optional float `[B, k]` + `[D]`, i.e. `[B, k, D]`, hard
            negatives grouped by query (`k` may be 0); `None` for none.
        temperature: `tau`; similarities are divided by it.
        positive_ids: optional `[B]` document ids (strings or integer hashes)
            of the positives; with `negative_ids`, turns on false-negative
            masking.
        negative_ids: `[B, k]` document ids of the negatives (needed with
            `positive_ids` when `negatives` is given).
        rows: optional `(start, stop)`: compute the terms of queries
            `start .. stop - 1` only, against the candidates of the whole
            batch. A replica passes its own rows of the gathered global batch.
        query_ids: optional `[B]` query ids (strings or integer hashes); turns
            on masking of the other positives of the same query.

    Returns:
        `(query_logits, passage_logits, labels)`: `[stop - start, B(1 + k)]`
        query -> passage and `[stop - start, B]` passage -> query similarities
        over `temperature`, masked candidates set to a large negative logit,
        and the `[stop - start]` target column of each row (its own positive,
        or its own query), in float32 (float64 when `queries` are float64).

    Example:
    >>> q = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> query_logits, passage_logits, labels = in_batch_logits(q, q, rows=(2, 4))
    >>> query_logits.shape, labels.numpy().tolist()
    (TensorShape([2, 4]), [2, 3])
    """
    if negatives is not None and positive_ids is not None and negative_ids is None:
        raise UserError("false-negative masking needs `negative_ids` [B, k] along with `positive_ids`")
    queries = tf.convert_to_tensor(queries)
    dtype = tf.float64 if queries.dtype == tf.float64 else tf.float32
    queries, positives = tf.cast(queries, dtype), tf.cast(positives, dtype)
    start, stop = rows if rows is not None else (0, tf.shape(queries)[0])
    own_queries, own_positives = queries[start:stop], positives[start:stop]
    labels = tf.range(start, stop)
    candidates = positives
    candidate_ids = positive_ids
    if negatives is not None:
        negatives = tf.cast(negatives, dtype)
        candidates = tf.concat([positives, tf.reshape(negatives, [-1, tf.shape(negatives)[-1]])], axis=0)
        if positive_ids is not None:
            candidate_ids = tf.concat([positive_ids, tf.reshape(negative_ids, [-1])], axis=0)
    query_logits = tf.matmul(own_queries, candidates, transpose_b=True) / temperature
    passage_logits = tf.matmul(own_positives, queries, transpose_b=True) / temperature
    query_masked = tf.zeros_like(query_logits, tf.bool)
    passage_masked = tf.zeros_like(passage_logits, tf.bool)
    if positive_ids is not None:
        own_ids = positive_ids[start:stop]
        query_masked |= _same(own_ids, candidate_ids)
        passage_masked |= _same(own_ids, positive_ids)
    if query_ids is not None:
        same_query = _same(query_ids[start:stop], query_ids)
        num_negatives = tf.shape(query_logits)[1] - tf.shape(same_query)[1]
        query_masked |= tf.pad(same_query, [[0, 0], [0, num_negatives]], constant_values=False)
        passage_masked |= same_query
    return _mask(query_logits, query_masked, labels), _mask(passage_logits, passage_masked, labels), labels


def bidirectional_softmax_terms(
    queries,
    positives,
    negatives=None,
    temperature=DEFAULT_TEMPERATURE,
    positive_ids=None,
    negative_ids=None,
    rows=None,
    query_ids=None,
):
    """Per-query cross-entropies of both directions of the GTR loss.

    Args: as for `in_batch_logits`.

    Returns:
        `(query_to_passage, passage_to_query)`: `[stop - start]` cross-entropies
        `L_qp(i)` and `L_pq(i)`, in float32 (float64 when `queries` are float64).

    Example:
    >>> q = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> p = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> qp, pq = bidirectional_softmax_terms(q, p)
    >>> qp.shape, pq.shape
    (TensorShape([4]), TensorShape([4]))
    """
    return _cross_entropies(
        *in_batch_logits(queries, positives, negatives, temperature, positive_ids, negative_ids, rows, query_ids)
    )


def in_batch_hits(
    queries,
    positives,
    negatives=None,
    positive_ids=None,
    negative_ids=None,
    rows=None,
    query_ids=None,
    temperature=DEFAULT_TEMPERATURE,
):
    """How many queries score their own positive above every other in-batch candidate (query -> passage).

    The candidates and the masking are the loss's (`in_batch_logits`, same
    arguments): every positive and hard negative of the batch, less those
    sharing the positive's document id or belonging to the same query id.
    Divided by the number of queries, this is the in-batch top-1 accuracy
    `DualEncoder` reports as its `accuracy` metric.

    Returns:
        A float32 scalar: the number of queries among `rows` (default: all)
        whose highest-scoring candidate is their positive.

    Example:
    >>> q = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> float(in_batch_hits(q, q))
    4.0
    """
    query_logits, _, labels = in_batch_logits(
        queries, positives, negatives, temperature, positive_ids, negative_ids, rows, query_ids
    )
    return _top1_hits(query_logits, labels)


def _cross_entropies(query_logits, passage_logits, labels):
    return (
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, query_logits),
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels, passage_logits),
    )


def _top1_hits(logits, labels):
    best = tf.argmax(logits, axis=1, output_type=labels.dtype)
    return tf.reduce_sum(tf.cast(tf.equal(best, labels), tf.float32))


def _same(row_ids, column_ids):
    return tf.equal(row_ids[:, None], column_ids[None, :])


def _mask(logits, masked, labels):
    """Masks the `masked` entries of `logits`, except each row's target column."""
    target = tf.equal(tf.range(tf.shape(logits)[1])[None, :], labels[:, None])
    return tf.where(masked & ~target, tf.constant(_MASKED_LOGIT, logits.dtype), logits)


class BidirectionalInBatchLoss:
    """GTR's loss `L = 1/(2B) sum_i [L_qp(i) + L_pq(i)]` (see the module docstring).

    Calling it with `rows=(start, stop)` returns the share of the batch loss
    that those queries contribute, `1/(2B) sum_{start <= i < stop} [...]`,
    where `B` is the number of queries passed: the shares of disjoint row
    ranges add up to the loss of the whole batch, which is how replicas of a
    distributed step split the global-batch loss.

    With `matryoshka_dims` (Matryoshka representation learning, `gtr-keras train --matryoshka-dims`), the loss
    is that of the whole embeddings plus, for each N of them below D, the same loss over the first N
    coordinates of every embedding, renormalised (`utils.dimensions.truncate_tensor`), with the same
    candidates (the global batch's, where replicas gather them) and masks. Accuracy is the whole embeddings'.

    Args:
        temperature: `tau` (0.01 in GTR).
        matryoshka_dims: the prefixes N trained besides D (`()`: GTR's loss alone).

    Example:
    >>> loss = BidirectionalInBatchLoss(temperature=0.01)
    >>> q = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> p = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> n = tf.math.l2_normalize(tf.random.normal([4, 2, 8]), -1)
    >>> float(loss(q, p, n)) > 0
    True
    """

    def __init__(self, temperature=DEFAULT_TEMPERATURE, matryoshka_dims=()):
        self.temperature = temperature
        self.matryoshka_dims = tuple(check_dimensions(n, None, "matryoshka_dims") for n in matryoshka_dims or ())

    def __call__(
        self, queries, positives, negatives=None, positive_ids=None, negative_ids=None, rows=None, query_ids=None
    ):
        """Returns the scalar loss (or the share of `rows`); arguments as in `bidirectional_softmax_terms`."""
        return self.loss_and_hits(queries, positives, negatives, positive_ids, negative_ids, rows, query_ids)[0]

    def loss_and_hits(
        self, queries, positives, negatives=None, positive_ids=None, negative_ids=None, rows=None, query_ids=None
    ):
        """The loss (or the share of `rows`) and `in_batch_hits`, from one computation of the logits (one
        more for each of `matryoshka_dims` below D)."""
        ids = (positive_ids, negative_ids, rows, query_ids)
        loss, hits = self._loss_and_hits(queries, positives, negatives, *ids)
        for dimensions in self.matryoshka_dims:
            if dimensions != queries.shape[-1]:
                prefixes = [truncate_tensor(x, dimensions) for x in (queries, positives)]
                prefixes.append(None if negatives is None else truncate_tensor(negatives, dimensions))
                loss += self._loss_and_hits(*prefixes, *ids)[0]
        return loss, hits

    def _loss_and_hits(self, queries, positives, negatives, positive_ids, negative_ids, rows, query_ids):
        query_logits, passage_logits, labels = in_batch_logits(
            queries, positives, negatives, self.temperature, positive_ids, negative_ids, rows, query_ids
        )
        query_to_passage, passage_to_query = _cross_entropies(query_logits, passage_logits, labels)
        batch_size = tf.cast(tf.shape(queries)[0], query_to_passage.dtype)
        loss = (tf.reduce_sum(query_to_passage) + tf.reduce_sum(passage_to_query)) / (2.0 * batch_size)
        return loss, _top1_hits(query_logits, labels)

    def get_config(self):
        return {"temperature": self.temperature, "matryoshka_dims": list(self.matryoshka_dims)}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class SimilarityDistillationLoss:
    """In-batch similarity distillation: the student's score matrix learns the teacher's.

    A batch holds `B` documents `d_i` and their anchors `a_i`: the query of a
    (query, document) pair, or for a single text the text itself. With the
    student's unit embeddings `S = a . d^T` and the teacher's scores `T` of the
    same texts (`[B, B]`), each row (an anchor against the batch's documents)
    and each column (a document against the batch's anchors) is turned into a
    distribution, `p_T = softmax(T / tau_t)` and `p_S = softmax(S / tau_s)`,
    and the loss is the mean of their KL divergences over rows and columns:

        L_kl = 1 / (2B) * sum_i [ KL(p_T(row i) || p_S(row i)) + KL(p_T(col i) || p_S(col i)) ]

    A single text's own entry `(i, i)` is left out of its row and column (it
    would be trivially the best). With `mse_weight` w > 0 the loss adds
    `w * mean ||P s - t||^2`, the squared distance between each student
    embedding mapped into the teacher's space (`P`: a learned projection, or
    none when the dimensions agree) and the teacher's embedding, over the
    batch's documents and the queries of its pairs.

    Called with `rows=(start, stop)`, it returns the share of the batch loss
    of those rows, so that replicas holding disjoint rows of a gathered
    global batch add up to the loss of the whole batch.

    Args:
        student_temperature: `tau_s`.
        teacher_temperature: `tau_t`.
        mse_weight: `w` (0: similarity distillation only).

    Example:
    >>> loss = SimilarityDistillationLoss(0.05, 0.05)
    >>> a = tf.math.l2_normalize(tf.random.normal([4, 8]), -1)
    >>> loss(a, a, a, a, single=tf.zeros([4], tf.bool)).numpy() < 1e-6
    True
    """

    def __init__(self, student_temperature=0.05, teacher_temperature=0.05, mse_weight=0.0):
        self.student_temperature = student_temperature
        self.teacher_temperature = teacher_temperature
        self.mse_weight = mse_weight

    def __call__(
        self,
        student_anchors,
        student_documents,
        teacher_anchors,
        teacher_documents,
        single,
        projected_anchors=None,
        projected_documents=None,
        rows=None,
    ):
        """The scalar loss (or the share of `rows`); arguments as in `loss_and_hits`."""
        return self.loss_and_hits(
            student_anchors,
            student_documents,
            teacher_anchors,
            teacher_documents,
            single,
            projected_anchors,
            projected_documents,
            rows,
        )[0]

    def loss_and_hits(
        self,
        student_anchors,
        student_documents,
        teacher_anchors,
        teacher_documents,
        single,
        projected_anchors=None,
        projected_documents=None,
        rows=None,
    ):
        """The loss (or the share of `rows`) and how many rows' best document is the teacher's best.

        Args:
            student_anchors, student_documents: float `[B, D]` unit student embeddings.
            teacher_anchors, teacher_documents: float `[B, Dt]` teacher embeddings (their dot
                products are the teacher's scores).
            single: bool `[B]`, True where the example is a single text (anchor = document).
            projected_anchors, projected_documents: `[B, Dt]` student embeddings in the teacher's
                space, for the MSE term (default: the student embeddings themselves).
            rows: optional `(start, stop)`: the rows this call accounts for.

        Returns:
            `(loss, hits)` float32 scalars; `hits` counts the rows among `rows` whose
            highest-scoring document under the student is the teacher's.
        """
        student_anchors, student_documents, teacher_anchors, teacher_documents = (
            tf.cast(x, tf.float32) for x in (student_anchors, student_documents, teacher_anchors, teacher_documents)
        )
        start, stop = rows if rows is not None else (0, tf.shape(student_anchors)[0])
        batch_size = tf.cast(tf.shape(student_anchors)[0], tf.float32)
        own = tf.range(start, stop)
        masked = tf.equal(own[:, None], tf.range(tf.shape(student_anchors)[0])[None, :]) & single[start:stop, None]

        def logits(rows_of, columns_of, temperature):
            scores = tf.matmul(rows_of[start:stop], columns_of, transpose_b=True) / temperature
            return tf.where(masked, tf.constant(_MASKED_LOGIT, tf.float32), scores)

        def kl_sum(teacher_logits, student_logits):
            return tf.reduce_sum(
                tf.nn.softmax(teacher_logits) * (tf.nn.log_softmax(teacher_logits) - tf.nn.log_softmax(student_logits))
            )

        teacher_rows = logits(teacher_anchors, teacher_documents, self.teacher_temperature)
        student_rows = logits(student_anchors, student_documents, self.student_temperature)
        kl = kl_sum(teacher_rows, student_rows) + kl_sum(
            logits(teacher_documents, teacher_anchors, self.teacher_temperature),
            logits(student_documents, student_anchors, self.student_temperature),
        )
        hits = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(student_rows, 1), tf.argmax(teacher_rows, 1)), tf.float32))
        loss = kl / (2.0 * batch_size)
        if self.mse_weight:
            anchors = student_anchors if projected_anchors is None else tf.cast(projected_anchors, tf.float32)
            documents = student_documents if projected_documents is None else tf.cast(projected_documents, tf.float32)
            paired = 1.0 - tf.cast(single, tf.float32)
            squared = tf.reduce_sum(tf.square(documents - teacher_documents), 1) + paired * tf.reduce_sum(
                tf.square(anchors - teacher_anchors), 1
            )
            loss += self.mse_weight * tf.reduce_sum(squared[start:stop]) / (batch_size + tf.reduce_sum(paired))
        return loss, hits

    def get_config(self):
        return {
            "student_temperature": self.student_temperature,
            "teacher_temperature": self.teacher_temperature,
            "mse_weight": self.mse_weight,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class ListwiseSoftmaxLoss:
    """A reranker's loss over each query's group: its positive and its `k` hard negatives, scored as pairs.

    `L = 1/B sum_i -log( exp(s_i0 / tau) / sum_{j=0..k} exp(s_ij / tau) )`, where `s_i0` is the reranker's
    logit of query `i` with its positive and `s_ij` (`j >= 1`) with its negatives (sentence-transformers'
    `ListNetLoss` with one relevant document, or `MultipleNegativesRankingLoss` within the group).

    Calling it with `batch_size=G` divides the sum by `G` instead of the queries passed: a replica's share of
    the loss of a global batch of `G` queries (the shares of the replicas add up to it).

    Args:
        temperature: `tau` (1.0: the logits as they are).

    Example:
    >>> loss = ListwiseSoftmaxLoss()
    >>> round(float(loss(tf.constant([[2.0, 0.0], [0.0, 0.0]]))), 4)
    0.4100
    """

    def __init__(self, temperature=1.0):
        self.temperature = temperature

    def __call__(self, logits, batch_size=None):
        """The mean loss of logits `[B, 1 + k]` (positive first), or the sum over `batch_size`."""
        return self.loss_and_hits(logits, batch_size)[0]

    def loss_and_hits(self, logits, batch_size=None):
        """The loss and how many queries score their positive above every negative."""
        logits = tf.cast(logits, tf.float32) / self.temperature
        terms = tf.reduce_logsumexp(logits, axis=1) - logits[:, 0]
        count = tf.cast(tf.shape(logits)[0] if batch_size is None else batch_size, tf.float32)
        hits = tf.reduce_sum(tf.cast(tf.argmax(logits, axis=1) == 0, tf.float32))
        return tf.reduce_sum(terms) / count, hits

    def get_config(self):
        return {"temperature": self.temperature, "matryoshka_dims": list(self.matryoshka_dims)}
