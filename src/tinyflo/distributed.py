"""Process groups, data parallelism and local SGD (module 12), as in ``torch.distributed``.

``init_process_group("local", world_size=4)`` gives four replicas in one process (notebooks,
CI); ``tinyflo launch -n 2 --backend mpi script.py`` runs a script once per rank, and inside it
``init_process_group()`` finds its rank. ``Trainer(..., group=group)`` trains data parallel
(``plugins=[DataParallelStrategy(group, local_sgd=LocalSGD(k))]`` with local SGD, ``local_sgd=ElChe()`` for
ranks of unequal speed: each takes as many steps as its speed allows between sample-weighted averages).
"""

from tinyflo.core.distributed import (
    DataParallel,
    DataParallelStrategy,
    ElChe,
    LocalGroup,
    LocalSGD,
    MPIGroup,
    NCCLGroup,
    ProcessGroup,
    all_reduce_gradients,
    average_parameters,
    el_che_plan,
    init_process_group,
    ring_all_reduce,
    shard_bounds,
)

__all__ = [
    "DataParallel", "DataParallelStrategy", "ElChe", "LocalGroup", "LocalSGD", "MPIGroup", "NCCLGroup", "ProcessGroup",
    "all_reduce_gradients", "average_parameters", "el_che_plan", "init_process_group", "ring_all_reduce", "shard_bounds",
]
