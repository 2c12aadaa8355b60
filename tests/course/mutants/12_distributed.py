"""Seeded mutants of 12_distributed: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # the chunk index runs the wrong way round the ring: chunks miss some ranks' contributions.
    (
        "distributed_reduce_scatter",
        "chunks = [(r - s) % n for r in range(n)]  # the chunk rank r sends in step s",
        "chunks = [(r + s) % n for r in range(n)]  # the chunk rank r sends in step s",
    ),
    # the receiver overwrites its copy instead of adding to it: only two contributions survive.
    (
        "distributed_reduce_scatter",
        "            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] += message\n",
        "            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] = message\n",
    ),
    # the bytes counted for the receiver, not the sender (a hidden test with uneven chunks catches it).
    (
        "distributed_reduce_scatter",
        "            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] += message\n            sent[r] += message.nbytes",
        "            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] += message\n            sent[(r + 1) % n] += message.nbytes",
    ),
    # one step short: each chunk misses the last rank's contribution.
    (
        "distributed_reduce_scatter",
        "    for s in range(n - 1):\n        chunks = [(r - s) % n for r in range(n)]",
        "    for s in range(n - 2):\n        chunks = [(r - s) % n for r in range(n)]",
    ),
    # the all-gather adds the finished chunks instead of copying them: every rank ends with too much.
    (
        "distributed_ring_all_reduce",
        "            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] = message\n",
        "            buffers[(r + 1) % n][bounds[c]:bounds[c + 1]] += message\n",
    ),
    # the all-gather sends the reduce-scatter's chunks: a partial sum goes round instead of the finished one.
    (
        "distributed_ring_all_reduce",
        "chunks = [(r + 1 - s) % n for r in range(n)]",
        "chunks = [(r - s) % n for r in range(n)]",
    ),
    # ring_all_reduce reports the bytes of the all-gather only.
    (
        "distributed_ring_all_reduce",
        "return [a + b for a, b in zip(scattered, gathered)]",
        "return gathered",
    ),
    # the left-over samples go to the last ranks instead of the first.
    (
        "distributed_shard_bounds",
        "stop = start + base + (1 if r < extra else 0)",
        "stop = start + base + (1 if r >= world_size - extra else 0)",
    ),
    # the remainder forgotten: n % world_size samples are never trained on (a hidden test catches it).
    (
        "distributed_shard_bounds",
        "base, extra = divmod(n, world_size)",
        "base, extra = n // world_size, 0",
    ),
    # shards of ⌈n / world_size⌉: the last shard is short by more than one.
    (
        "distributed_shard_bounds",
        "stop = start + base + (1 if r < extra else 0)",
        "stop = min(start + -(-n // world_size), n)",
    ),
    # a replica without a gradient is skipped in the buffer, shifting every later gradient.
    (
        "distributed_data_parallel",
        "reshape(-1)\n            offset += p.data.size\n        buffers.append(flat)",
        "reshape(-1)\n                offset += p.data.size\n        buffers.append(flat)",
    ),
    # the replicas' gradients averaged instead of summed: the weights n_r / B are applied twice.
    (
        "distributed_data_parallel",
        '    group.all_reduce(buffers, op="sum")\n    for params, flat, dev in zip(',
        '    group.all_reduce(buffers, op="avg")\n    for params, flat, dev in zip(',
    ),
    # the buffer in NumPy's default float64, whatever the parameters' dtype (a hidden test catches it).
    (
        "distributed_data_parallel",
        "flat = dev.xp.zeros(sum(p.data.size for p in params), params[0].dtype if params else np.float32)",
        "flat = dev.xp.zeros(sum(p.data.size for p in params))",
    ),
    # every gradient put on rank 0's device (a hidden test catches it).
    (
        "distributed_data_parallel",
        "p.grad = Tensor._wrap(flat[offset:offset + p.data.size].reshape(p.shape), dev)",
        "p.grad = Tensor._wrap(flat[offset:offset + p.data.size].reshape(p.shape), group.devices[0])",
    ),
    # frozen parameters packed too: they get a .grad (a hidden test catches it).
    (
        "distributed_data_parallel",
        "        params = _trainable(params)\n",
        "        params = list(params)\n",
    ),
    # local SGD sums the replicas instead of averaging them: the weights are never applied.
    ("distributed_local_sgd", "        flat *= flat.dtype.type(weight)\n", ""),
    # the result bound to new arrays: optimizers and replicas keep the old ones.
    (
        "distributed_local_sgd",
        "t.data[...] = flat[offset:offset + t.data.size].reshape(t.shape)",
        "t.data = flat[offset:offset + t.data.size].reshape(t.shape)",
    ),
    # weighted and then averaged as well: the result is divided by the world size again.
    (
        "distributed_local_sgd",
        '    group.all_reduce(buffers, op="sum")\n    for tensors, flat in zip(',
        '    group.all_reduce(buffers, op="avg")\n    for tensors, flat in zip(',
    ),
    # the offset never advances: every tensor is written from the start of the buffer.
    (
        "distributed_local_sgd",
        "            t.data[...] = flat[offset:offset + t.data.size].reshape(t.shape)\n            offset += t.data.size\n",
        "            t.data[...] = flat[offset:offset + t.data.size].reshape(t.shape)\n",
    ),
    # the fastest rank's time as the yardstick: every rank is "slower", and all take the anchor or fewer.
    ("distributed_el_che", "    slowest = max(step_seconds)\n", "    slowest = min(step_seconds)\n"),
    # no cap: a rank a hundred times faster drifts for hundreds of steps.
    (
        "distributed_el_che",
        "return [min(max_steps, round(anchor * slowest / t)) for t in step_seconds]",
        "return [round(anchor * slowest / t) for t in step_seconds]",
    ),
    # the steps cut down instead of rounded: 6.67 steps become 6 (a hidden test catches it).
    (
        "distributed_el_che",
        "return [min(max_steps, round(anchor * slowest / t)) for t in step_seconds]",
        "return [min(max_steps, int(anchor * slowest / t)) for t in step_seconds]",
    ),
    # the steps rounded up: 4.2 steps become 5 (a hidden test catches it).
    (
        "distributed_el_che",
        "return [min(max_steps, round(anchor * slowest / t)) for t in step_seconds]",
        "return [min(max_steps, math.ceil(anchor * slowest / t)) for t in step_seconds]",
    ),
    # the ratio upside down: faster ranks take fewer steps.
    (
        "distributed_el_che",
        "return [min(max_steps, round(anchor * slowest / t)) for t in step_seconds]",
        "return [min(max_steps, round(anchor * t / slowest)) for t in step_seconds]",
    ),
    # a replica without a gradient keeps none: it never gets the sum the others got.
    (
        "distributed_data_parallel",
        "            p.grad = Tensor._wrap(flat[offset:offset + p.data.size].reshape(p.shape), dev)\n",
        "            if p.grad is not None:\n"
        "                p.grad = Tensor._wrap(flat[offset:offset + p.data.size].reshape(p.shape), dev)\n",
    ),
    # the weights ignored: the replicas' plain mean, right only when every rank saw as many samples.
    (
        "distributed_local_sgd",
        "        flat *= flat.dtype.type(weight)\n",
        "        flat *= flat.dtype.type(1 / len(tensor_lists))\n",
    ),
]
