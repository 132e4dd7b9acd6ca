"""torch.utils.data for uopkit: datasets, samplers, DataLoader and collation, with torch's names and behaviour.

    from uopkit.data import DataLoader, TensorDataset
    for x, y in DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True): ...

`num_workers > 0` loads in worker processes (uopkit.data.worker); random orders come from uopkit's seeded stream
(`Tensor.manual_seed`) or a numpy Generator passed as `generator`.
"""

from uopkit.data.collate import default_collate, default_convert
from uopkit.data.dataloader import DataLoader, get_worker_info
from uopkit.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from uopkit.data.sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "StackDataset",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "random_split",
]
