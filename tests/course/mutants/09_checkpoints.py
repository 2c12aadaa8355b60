"""Seeded mutants of 09_checkpoints: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # tensors ordered by name only: a float64 after a float32 may start at an unaligned offset.
    (
        "checkpoints_write",
        "order = sorted(arrays, key=lambda name: (-arrays[name].dtype.itemsize, name))",
        "order = sorted(arrays)",
    ),
    # the header is not padded to a multiple of 8.
    ("checkpoints_write", '    raw += b" " * (-len(raw) % 8)\n', ""),
    # the checksum covers the payload but not the header: an edited epoch number goes unnoticed.
    (
        "checkpoints_write",
        "        metadata.setdefault(FORMAT_KEY, FORMAT_VERSION)\n        digest = hashlib.sha256(_canonical(index, metadata))\n",
        "        metadata.setdefault(FORMAT_KEY, FORMAT_VERSION)\n        digest = hashlib.sha256()\n",
    ),
    # the caller's format version is overwritten.
    (
        "checkpoints_write",
        "        metadata.setdefault(FORMAT_KEY, FORMAT_VERSION)\n",
        "        metadata[FORMAT_KEY] = FORMAT_VERSION\n",
    ),
    # the 8 bytes of the length prefix are not counted in the bytes written.
    ("checkpoints_write", "    return 8 + len(raw) + offset\n", "    return len(raw) + offset\n"),
    # no truncation check: a file cut short parses as if it were whole.
    (
        "checkpoints_header",
        '    if position > payload:\n        raise CheckpointError(f"{where}: truncated:',
        '    if False:\n        raise CheckpointError(f"{where}: truncated:',
    ),
    # a falsy __metadata__ (0, []) is taken for a missing one.
    (
        "checkpoints_header",
        "    metadata = {} if metadata is None else metadata\n",
        "    metadata = metadata or {}\n",
    ),
    # gaps between tensors are let through; only overlaps are refused.
    ("checkpoints_header", "        if begin != position:\n", "        if begin < position:\n"),
    # JSON nested too deep escapes as a RecursionError instead of a CheckpointError.
    (
        "checkpoints_header",
        "    except (ValueError, RecursionError) as err:  # bad UTF-8 and JSON, huge integers, deep nesting",
        "    except ValueError as err:  # bad UTF-8 and JSON, huge integers, deep nesting",
    ),
    # bytes after the last tensor are let through.
    ("checkpoints_header", "    if position < payload:\n", "    if False:\n"),
    # the checksum is written but never checked: a flipped bit loads silently.
    (
        "checkpoints_read",
        "    if verify and CHECKSUM_KEY in metadata:\n        digest",
        "    if False:\n        digest",
    ),
    # verify=False is ignored: a file cannot be inspected without the check.
    (
        "checkpoints_read",
        "    if verify and CHECKSUM_KEY in metadata:\n",
        "    if CHECKSUM_KEY in metadata:\n",
    ),
    # our format key without a checksum loads: a damaged key name switches the check off.
    (
        "checkpoints_read",
        "    if verify and FORMAT_KEY in metadata and CHECKSUM_KEY not in metadata:\n",
        "    if False:\n",
    ),
    # the arrays are made from a bytes copy: read-only.
    (
        "checkpoints_read",
        "np.frombuffer(payload[begin:end], dtype=dtype)",
        "np.frombuffer(bytes(payload[begin:end]), dtype=dtype)",
    ),
    # no fsync before the rename: after a power cut the new name may point to an empty file.
    ("checkpoints_atomic", "            os.fsync(f.fileno())\n", ""),
    # a failed write leaves its temporary file behind.
    ("checkpoints_atomic", "            os.unlink(temp)", "            pass"),
    # the folder is fsynced before the rename, not after: the rename itself may be lost.
    (
        "checkpoints_atomic",
        "        os.replace(temp, path)\n    except BaseException:\n        with contextlib.suppress(FileNotFoundError):\n"
        "            os.unlink(temp)\n        raise\n    _fsync_directory(path.parent)\n",
        "        _fsync_directory(path.parent)\n        os.replace(temp, path)\n    except BaseException:\n"
        "        with contextlib.suppress(FileNotFoundError):\n            os.unlink(temp)\n        raise\n",
    ),
    # LoadReport with skipped and missing swapped.
    (
        "checkpoints_load",
        "LoadReport(tuple(loaded), tuple(skipped), tuple(missing))",
        "LoadReport(tuple(loaded), tuple(missing), tuple(skipped))",
    ),
    # strict mode compares the names only: other module classes under the same names pass.
    (
        "checkpoints_load",
        'same = state["model"]["hash"] == structural_hash(model) if ours else not skipped and not missing',
        "same = not skipped and not missing",
    ),
    # a file from another framework (no tinyflo state) is read as if it were ours.
    (
        "checkpoints_load",
        'names = list(state["model"]["keys"]) if ours else list(tensors)',
        'names = list(state["model"]["keys"])',
    ),
    # shapes compared by size only: a (3, 8) weight loads into a (8, 3) one.
    (
        "checkpoints_load",
        "        if tuple(tensors[key].shape) != own[key].shape:\n",
        "        if tensors[key].size != own[key].data.size:\n",
    ),
    # the random generators are not restored: dropout draws other masks after a resume.
    ("checkpoints_resume", '        set_rng_state(state["rng"])\n', "        pass\n"),
    # a loader's state with no loader to go into is dropped.
    (
        "checkpoints_resume",
        "            trainer.pending_loader_state = loader_state\n",
        "            pass\n",
    ),
    # the GradScaler's state is never saved.
    (
        "checkpoints_resume",
        '"scaler": _encode(scaler.state_dict(), "scaler", tensors) if scaler is not None else None,',
        '"scaler": None,',
    ),
    # a saved GradScaler state and no scaler: the state is silently dropped.
    (
        "checkpoints_resume",
        '    if state.get("scaler") is not None:\n        if scaler is None:',
        '    if state.get("scaler") is not None and scaler is not None:\n        if scaler is None:',
    ),
    # keep_last keeps one checkpoint too many.
    (
        "checkpoints_retention",
        "keep.update(range(max(len(entries) - keep_last, 0), len(entries)))",
        "keep.update(range(max(len(entries) - keep_last - 1, 0), len(entries)))",
    ),
    # NaN metrics take part in the ranking.
    (
        "checkpoints_retention",
        'if e.get("metric") is not None and not math.isnan(e["metric"])]',
        'if e.get("metric") is not None]',
    ),
    # mode="max" ignored: the smallest metric is always the best.
    (
        "checkpoints_retention",
        'key=lambda i: entries[i]["metric"] if mode == "min" else -entries[i]["metric"]',
        'key=lambda i: entries[i]["metric"]',
    ),
    # keep_every counts positions, not steps.
    (
        "checkpoints_retention",
        'keep.update(i for i, e in enumerate(entries) if e["step"] % keep_every == 0)',
        "keep.update(i for i, e in enumerate(entries) if (i + 1) % keep_every == 0)",
    ),
    # a second background save does not wait for the first.
    (
        "checkpoints_background",
        "        self.wait()\n        self._thread = threading.Thread",
        "        self._thread = threading.Thread",
    ),
    # the job runs on the caller's thread: training waits for every save.
    (
        "checkpoints_background",
        '        self._thread = threading.Thread(target=self._run, args=(fn,), name="tinyflo-checkpoint")\n'
        "        self._thread.start()\n",
        "        self._run(fn)\n",
    ),
    # an error is raised again on every wait(): it is never forgotten.
    (
        "checkpoints_background",
        "        error, self._error = self._error, None\n",
        "        error = self._error\n",
    ),
]
