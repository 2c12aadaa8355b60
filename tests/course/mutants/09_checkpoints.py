"""Seeded mutants of 09_checkpoints: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # the checksum is written but never checked: a flipped bit loads silently (a hidden test catches it).
    ('checkpoints_format', "    if verify and CHECKSUM_KEY in metadata:\n        digest", "    if False:\n        digest"),
    # no fsync before the rename: after a power cut the new name may point to an empty file.
    ('checkpoints_atomic', "            os.fsync(f.fileno())\n", ""),
    # a failed write leaves its temporary file behind.
    ('checkpoints_atomic', "            os.unlink(temp)", "            pass"),
    # LoadReport with skipped and missing swapped (a hidden test catches it).
    ('checkpoints_load', "LoadReport(tuple(loaded), tuple(skipped), tuple(missing))", "LoadReport(tuple(loaded), tuple(missing), tuple(skipped))"),
    # loading rebinds the parameter's array instead of writing into it: optimizers lose their views.
    ('checkpoints_load', "target.data[...] = device.xp.asarray(values).astype(target.dtype, copy=False)",
      "target.data = device.xp.asarray(values).astype(target.dtype)"),
    # tinyflo's generator not restored: dropout draws other masks after a resume.
    ('checkpoints_resume', "    _Generators.numpy = generator\n", ""),
    # a second background save does not wait for the first (a hidden test catches it).
    ('checkpoints_retention', "        self.wait()\n        self._thread = threading.Thread", "        self._thread = threading.Thread"),
    # the job runs on the caller's thread: training waits for every save (a hidden test catches it).
    ('checkpoints_retention', "        self._thread = threading.Thread(target=self._run, args=(fn,), name=\"tinyflo-checkpoint\")\n"
      "        self._thread.start()\n", "        self._run(fn)\n"),
    # the folder is fsynced before the rename, not after: the rename itself may be lost (a hidden test catches it).
    ('checkpoints_atomic', "        os.replace(temp, path)\n    except BaseException:\n        with contextlib.suppress(FileNotFoundError):\n"
      "            os.unlink(temp)\n        raise\n    _fsync_directory(path.parent)\n",
      "        _fsync_directory(path.parent)\n        os.replace(temp, path)\n    except BaseException:\n"
      "        with contextlib.suppress(FileNotFoundError):\n            os.unlink(temp)\n        raise\n"),
]
