"""``python -m benchmarks`` runs every benchmark (see run_all.py)."""

from benchmarks import common, run_all

run_all.main(**vars(common.parse_args(run_all.__doc__.splitlines()[0], devices=True)))
