"""Seeded mutants of 08_training: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # small gradients scaled *up* to max_norm: the factor is not capped at 1.
    ('training_clip', "factor = xp.minimum(max_norm / (norm + 1e-6), 1.0)", "factor = max_norm / (norm + 1e-6)"),
    # every micro-batch weighted 1/k: wrong when the batches of a group differ in size.
    ('training_epoch', "trainer.backward(loss if n == group_samples else loss * (n / group_samples))",
      "trainer.backward(loss * (1 / len(group)))"),
    # the slope from the end points instead of least squares (a hidden test catches it).
    ('training_trend', "return float((i * (y - y.mean())).sum() / (i * i).sum())", "return float((y[-1] - y[0]) / (len(y) - 1))"),
    # evaluation in training mode: dropout stays on (a hidden test catches it).
    ('training_evaluate', "    trainer.model.eval()\n    total = correct = None", "    total = correct = None"),
    # BestModel keeps views of the live weights, which go on changing.
    ('training_fit', "self.state = {k: Tensor._wrap(v.data.copy(), v.device) for k, v in trainer.model.state_dict().items()}",
      "self.state = trainer.model.state_dict()"),
]
