"""Seeded mutants of 12_distributed: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # the all-gather adds the finished chunks instead of copying them: every rank ends with too much.
    ('distributed_ring_all_reduce', "                    target[...] = message\n", "                    target += message\n"),
    # the left-over samples go to the last ranks instead of the first.
    ('distributed_data_parallel', "stop = start + base + (1 if r < extra else 0)", "stop = start + base + (1 if r >= world_size - extra else 0)"),
    # local SGD sums the replicas instead of averaging them: the weights are never applied.
    ('distributed_local_sgd', "        flat *= flat.dtype.type(weight)\n", ""),
    # a replica without a gradient is skipped in the buffer, shifting every later gradient.
    ('distributed_data_parallel', "reshape(-1)\n            offset += p.data.size\n        buffers.append(flat)",
      "reshape(-1)\n                offset += p.data.size\n        buffers.append(flat)"),
]
