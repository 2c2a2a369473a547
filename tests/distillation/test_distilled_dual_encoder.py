"""`DistilledDualEncoder`: the projection into a teacher's space of another size trains."""

import numpy as np
from distillation_inputs import tiny_distillation
from training_inputs import final_weights

from gtr_keras.distillation.distillation_data import DistillationTexts
from gtr_keras.distillation.distillation_loop import distill
from gtr_keras.distillation.distilled_dual_encoder import DistilledDualEncoder
from gtr_keras.distillation.teachers import load_teacher


def test_a_keras_hub_teacher_of_another_size_trains_the_projection(tmp_path, tiny_model_dir):
    from training_inputs import write_bert_text_embedder

    from gtr_keras.training.dual_encoder import make_optimizer

    write_bert_text_embedder(tmp_path / "bert")  # 8-d embeddings; the student's are 64-d
    config = tiny_distillation(tmp_path, str(tmp_path / "bert"), steps=2)
    student = distill(config)
    assert student.model.embedding_dim == 64
    weights = final_weights(tmp_path / "run")
    assert not any("teacher_projection" in name for name in weights)  # a training aid, not kept
    # The projection learns: one step moves it.
    data = DistillationTexts(config["data"]["texts"], query_length=8, document_length=16)
    queries, documents = data.distinct_texts()
    teacher = load_teacher(tmp_path / "bert")
    model = DistilledDualEncoder(student.model, teacher.embedding_dim, mse_weight=1.0)
    model.compile(optimizer=make_optimizer(steps=2, learning_rate=0.01))
    before = model.projection.kernel.numpy().copy()
    batches = data.dataset(
        student.model.preprocessor.tokenizer,
        teacher.encode_queries(queries),
        teacher.encode_documents(documents),
        batch_size=8,
    )
    model.fit(batches, steps_per_epoch=1, epochs=1, verbose=0)
    assert model.projection.kernel.shape == (64, 8) and np.abs(model.projection.kernel.numpy() - before).max() > 1e-4
