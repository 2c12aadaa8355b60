"""Seeded mutants of 05_data: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # every fork restarts from the parent's seed: forks are copies, not independent streams.
    (
        "data_rng",
        "child._start(self._sequence.spawn(1)[0])",
        "child._start(np.random.SeedSequence(self.seed))",
    ),
    # NumPy's default normal draws: float64 sneaks into the data.
    (
        "data_rng",
        "draw = self._generator.standard_normal(size, dtype=np.float32)\n"
        "        return (draw * np.float32(std) + np.float32(mean)).astype(np.float32, copy=False)",
        "return self._generator.normal(mean, std, size)",
    ),
    # uniform scaled by high instead of high - low: it overshoots the interval.
    (
        "data_rng",
        "(draw * np.float32(high - low) + np.float32(low))",
        "(draw * np.float32(high) + np.float32(low))",
    ),
    # the state forgets how many children were spawned: the next fork after a reload repeats an old one.
    ("data_rng", '"forks": int(self._sequence.n_children_spawned),', '"forks": 0,'),
    # integers includes high: integers(3, 6) can give 6, integers(4) can give 4.
    (
        "data_rng",
        "return self._generator.integers(low, high, size, dtype=np.int64)",
        "return self._generator.integers(low, high, size, dtype=np.int64, endpoint=True)",
    ),
    # a fork seeded by a draw from the parent's stream: forking moves the parent on.
    (
        "data_rng",
        "child._start(self._sequence.spawn(1)[0])",
        "child._start(np.random.SeedSequence(int(self._generator.integers(2**63))))",
    ),
    # a fork is a new unseeded Rng: it follows the global generator, not its parent.
    (
        "data_rng",
        "child = object.__new__(Rng)\n        child._start(self._sequence.spawn(1)[0])\n        return child",
        "return Rng()",
    ),
    # load_state_dict puts back the bit generator but keeps the old seed sequence: the next fork is the old one's.
    (
        "data_rng",
        "        self._start(sequence)\n        self._generator.bit_generator.state",
        "        self._generator.bit_generator.state",
    ),
    # bernoulli compares the wrong way: True with probability 1 - p.
    (
        "data_rng",
        "return self._generator.random(shape, dtype=np.float32) < p",
        "return self._generator.random(shape, dtype=np.float32) > p",
    ),
    # Python data taken with np.asarray: float64 labels, and tensors copied instead of kept.
    (
        "data_datasets",
        "arrays = tuple(_as_array(a) for a in arrays)",
        "arrays = tuple(np.asarray(a) for a in arrays)",
    ),
    # only the first and last arguments are compared.
    (
        "data_datasets",
        "if len({a.shape[0] for a in arrays}) > 1:",
        "if arrays[0].shape[0] != arrays[-1].shape[0]:",
    ),
    # the mismatch error says how many arguments came, not their shapes.
    (
        "data_datasets",
        'shapes = ", ".join(f"argument {i} has shape {a.shape}" for i, a in enumerate(arrays))',
        'shapes = f"{len(arrays)} arguments"',
    ),
    # no arguments at all make an empty, broken dataset.
    (
        "data_datasets",
        '        if not arrays:\n            raise ValueError("TensorDataset: give at least one array or tensor")\n',
        "",
    ),
    # negative indices kept as they are instead of counted from the end.
    ("data_subset", "self.indices = np.where(raw < 0, raw + n, raw)", "self.indices = raw"),
    # the range check lets the index n through.
    ("data_subset", "bad = raw[(raw < -n) | (raw >= n)]", "bad = raw[(raw < -n) | (raw > n)]"),
    # an empty list of indices refused, because np.asarray([]) is a float array.
    (
        "data_subset",
        'if raw.size and raw.dtype.kind not in "iu":',
        'if raw.dtype.kind not in "iu":',
    ),
    # negative indices not range-checked: -7 of 6 samples slips through.
    ("data_subset", "bad = raw[(raw < -n) | (raw >= n)]", "bad = raw[raw >= n]"),
    # the fractions' left-over samples are never handed out: the subsets miss samples.
    (
        "data_random_split",
        "        for i in range(n - sum(counts)):\n            counts[i % len(counts)] += 1\n",
        "",
    ),
    # the fractions' left-over samples all go to the last subset.
    ("data_random_split", "counts[i % len(counts)] += 1", "counts[-1] += 1"),
    # fractions rounded to the nearest count: they can add up to more than the dataset.
    (
        "data_random_split",
        "counts = [int(np.floor(f * n)) for f in lengths]",
        "counts = [int(round(f * n)) for f in lengths]",
    ),
    # fractions compared with 1 exactly: [0.7, 0.2, 0.1] is refused.
    ("data_random_split", "if abs(sum(lengths) - 1) > 1e-6:", "if sum(lengths) != 1:"),
    # the subsets cut from the samples in order: the permutation is drawn but never used.
    (
        "data_random_split",
        "return [Subset(dataset, order[end - count:end]) for count, end in zip(counts, ends)]",
        "return [Subset(dataset, np.arange(end - count, end)) for count, end in zip(counts, ends)]",
    ),
    # Python floats collated as NumPy's float64.
    (
        "data_collate",
        'arrays = [_as_array(s, "default_collate") for s in samples]',
        "arrays = [np.asarray(s) for s in samples]",
    ),
    # dict samples fall through to the array branch.
    (
        "data_collate",
        "    if isinstance(first, dict):\n        return {key: default_collate([s[key] for s in samples]) for key in first}\n",
        "",
    ),
    # fields collated into a list instead of a tuple.
    (
        "data_collate",
        "return tuple(default_collate([s[field] for s in samples]) for field in range(len(first)))",
        "return [default_collate([s[field] for s in samples]) for field in range(len(first))]",
    ),
    # only samples with more fields than the first are refused; shorter ones crash later.
    ("data_collate", "if len(sample) != len(first):", "if len(sample) > len(first):"),
    # len() ignores drop_last.
    (
        "data_loader",
        "return n // self.batch_size if self.drop_last else -(-n // self.batch_size)",
        "return -(-n // self.batch_size)",
    ),
    # len() always rounds down: without drop_last the smaller last batch is lost.
    (
        "data_loader",
        "return n // self.batch_size if self.drop_last else -(-n // self.batch_size)",
        "return n // self.batch_size",
    ),
    # the same shuffled order every epoch.
    (
        "data_loader",
        "order = self.rng.permutation(n) if self.shuffle",
        "order = Rng(self.rng.seed).permutation(n) if self.shuffle",
    ),
    # the fast path forgets a Subset's rows and gathers from the start of the arrays.
    ("data_loader", "picked = indices if rows is None else rows[indices]", "picked = indices"),
    # a resumed loader starts the epoch over instead of skipping the batches already seen.
    ("data_loader", "start, self._skip = self._skip, 0", "start, self._skip = 0, 0"),
    # the Rng saved after this epoch's permutation was drawn: a resume redraws the next epoch's order.
    (
        "data_loader",
        "self._epoch_state = self.rng.state_dict()\n"
        "        order = self.rng.permutation(n) if self.shuffle else np.arange(n)",
        "order = self.rng.permutation(n) if self.shuffle else np.arange(n)\n"
        "        self._epoch_state = self.rng.state_dict()",
    ),
    # an epoch whose every batch was handed out, but whose loop has not closed, is saved as still running.
    (
        "data_loader",
        '"epoch": self.epoch + finished, "batch": 0',
        '"epoch": self.epoch, "batch": 0',
    ),
    # load_state_dict compares only the number of samples: a state saved with another batch_size loads.
    (
        "data_loader",
        'for key, mine in (("batch_size", self.batch_size), ("samples", len(self.dataset))):',
        'for key, mine in (("samples", len(self.dataset)),):',
    ),
]
