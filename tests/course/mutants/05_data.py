"""Seeded mutants of 05_data: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # every fork restarts from the parent's seed: forks are copies, not independent streams.
    ('data_rng', "child._start(self._sequence.spawn(1)[0])", "child._start(np.random.SeedSequence(self.seed))"),
    # NumPy's default normal draws: float64 sneaks into the data.
    ('data_rng', "draw = self._generator.standard_normal(size, dtype=np.float32)\n        return (draw * np.float32(std) + np.float32(mean)).astype(np.float32, copy=False)",
      "return self._generator.normal(mean, std, size)"),
    # the fractions' left-over samples all go to the last subset.
    ('data_random_split', "counts[i % len(counts)] += 1", "counts[-1] += 1"),
    # Python floats collated as NumPy's float64.
    ('data_collate', "arrays = [_as_array(s) for s in samples]", "arrays = [np.asarray(s) for s in samples]"),
    # len() ignores drop_last.
    ('data_loader', "return n // self.batch_size if self.drop_last else -(-n // self.batch_size)", "return -(-n // self.batch_size)"),
    # the same shuffled order every epoch.
    ('data_loader', "order = self.rng.permutation(n) if self.shuffle", "order = Rng(self.rng.seed).permutation(n) if self.shuffle"),
    # the fast path forgets a Subset's rows and gathers from the start of the arrays.
    ('data_loader', "picked = indices if rows is None else rows[indices]", "picked = indices"),
    # a resumed loader starts the epoch over instead of skipping the batches already seen.
    ('data_loader', "start, self._skip = self._skip, 0", "start, self._skip = 0, 0"),
]
