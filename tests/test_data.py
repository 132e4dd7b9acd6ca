"""uopkit.data against torch.utils.data: the same batches from sequential loaders (values, shapes, dtypes, len,
drop_last), collation of nested samples, samplers' index sets (a random order is a permutation, new each epoch,
reproducible under Tensor.manual_seed), the errors, and a small training loop over a DataLoader."""

from __future__ import annotations

import collections
import doctest
import inspect
import warnings

import numpy as np
import pytest

import uopkit.data as data
from uopkit import Tensor, dtypes
from uopkit.data import collate, dataloader, dataset, sampler
from uopkit.nn import Linear
from uopkit.nn.optim import SGD
from uopkit.nn.state import get_parameters

torch = pytest.importorskip("torch")
tdata = torch.utils.data

Point = collections.namedtuple("Point", "x y")


def plain(x):
    """A batch as plain values for comparing: tensors (uopkit or torch) as numpy arrays, containers kept."""
    if isinstance(x, Tensor | torch.Tensor):
        return np.asarray(x.numpy())
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return ("namedtuple", type(x).__name__, [plain(v) for v in x])
    if isinstance(x, list | tuple):
        return (type(x).__name__, [plain(v) for v in x])
    return x


def assert_same(ours, theirs):
    a, b = plain(ours), plain(theirs)
    _assert_same(a, b, "batch")


def _assert_same(a, b, where):
    if isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray), f"{where}: {type(a)} is not a tensor"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(b, dict):
        assert isinstance(a, dict) and list(a) == list(b), where
        for k in b:
            _assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(b, tuple):
        assert isinstance(a, tuple) and a[:-1] == b[:-1] and len(a[-1]) == len(b[-1]), f"{where}: {a} vs {b}"
        for i, (x, y) in enumerate(zip(a[-1], b[-1], strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} vs {b!r}"


def both_loaders(arrays, **kwargs):
    ours = data.DataLoader(data.TensorDataset(*(Tensor(a) for a in arrays)), **kwargs)
    theirs = tdata.DataLoader(tdata.TensorDataset(*(torch.from_numpy(a) for a in arrays)), **kwargs)
    return ours, theirs


def arrays(n=10):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, 3, 2)).astype(np.float32), rng.integers(0, 9, n).astype(np.int64)]


# ------------------------------------------------------------------------------------------ sequential loaders


@pytest.mark.parametrize("batch_size", [1, 3, 4, 10, 11])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_batches_match_torch(batch_size, drop_last):
    ours, theirs = both_loaders(arrays(), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    ours_batches, their_batches = list(ours), list(theirs)
    assert len(ours_batches) == len(their_batches) == len(ours)
    for a, b in zip(ours_batches, their_batches, strict=True):
        assert_same(a, b)


def test_numpy_storage_matches_torch():
    # a TensorDataset of numpy arrays gives numpy rows; batches are Tensors of their dtype (torch needs tensors, so
    # its side holds the same values as tensors)
    xs = arrays(7) + [np.arange(7, dtype=np.int32)]
    ours = data.DataLoader(data.TensorDataset(*xs), batch_size=3)
    theirs = tdata.DataLoader(tdata.TensorDataset(*(torch.from_numpy(a) for a in xs)), batch_size=3)
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)
    row = data.TensorDataset(*xs)[2]
    assert isinstance(row[0], np.ndarray) and int(row[2]) == 2


def test_gather_path_equals_per_row_collate():
    # the one-gather batch is what collating the rows one by one gives (an explicit collate_fn takes that path)
    xs = arrays(9)
    ds = data.TensorDataset(Tensor(xs[0]), xs[1])
    sub = data.Subset(data.Subset(ds, [8, 1, 5, 2, 0, 7]), [5, 0, 3, 1])
    for d in (ds, sub):
        fast = list(data.DataLoader(d, batch_size=4))
        slow = list(data.DataLoader(d, batch_size=4, collate_fn=lambda b: data.default_collate(b)))
        for a, b in zip(fast, slow, strict=True):
            assert_same(a, b)


def test_tensor_dataset_batch_is_one_index_op_per_tensor(monkeypatch):
    ds = data.TensorDataset(Tensor(arrays(64)[0]), Tensor(arrays(64)[1]))
    calls = []
    original = Tensor.__getitem__

    def counting(self, index):
        calls.append(index)
        return original(self, index)

    monkeypatch.setattr(Tensor, "__getitem__", counting)
    batches = list(data.DataLoader(ds, batch_size=16, shuffle=True))
    assert len(batches) == 4 and len(calls) == 2 * 4
    assert all(isinstance(i, Tensor) and i.shape == (16,) for i in calls)


def test_batch_size_none_converts_each_sample():
    xs = arrays(4)
    ours = data.DataLoader(data.TensorDataset(xs[0], xs[1]), batch_size=None)
    theirs = tdata.DataLoader(tdata.TensorDataset(torch.from_numpy(xs[0]), torch.from_numpy(xs[1])), batch_size=None)
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)


def test_plain_dataset_and_getitems():
    class Squares(data.Dataset):
        def __init__(self):
            self.batched = 0

        def __getitem__(self, i):
            return {"i": i, "sq": float(i * i), "v": np.full(2, i, np.float32), "tag": f"s{i}"}

        def __len__(self):
            return 7

    class TorchSquares(tdata.Dataset):
        __getitem__ = Squares.__getitem__

        def __len__(self):
            return 7

    ours, theirs = data.DataLoader(Squares(), batch_size=3), tdata.DataLoader(TorchSquares(), batch_size=3)
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)

    # a dataset's __getitems__ is how a batch is read, as torch's fetcher does (also through a Subset)
    class Batched(Squares):
        def __getitems__(self, indices):
            self.batched += 1
            return [self[i] for i in indices]

    ds = Batched()
    assert len(list(data.DataLoader(ds, batch_size=3))) == 3 and ds.batched == 3
    assert len(list(data.DataLoader(data.Subset(ds, [0, 2, 4]), batch_size=2))) == 2 and ds.batched == 5


def test_loader_iterator_with_workers():
    xs = arrays(10)
    plain_loader = data.DataLoader(data.TensorDataset(*xs), batch_size=4)
    workers = data.DataLoader(
        data.TensorDataset(*xs), batch_size=4, num_workers=2, pin_memory=True, timeout=5, prefetch_factor=2,
        persistent_workers=True, worker_init_fn=lambda i: None,
    )  # fmt: skip
    it = iter(workers)
    assert len(it) == 3
    for a, b in zip(plain_loader, it, strict=True):
        assert_same(a, b)
    assert data.get_worker_info() is None


# ------------------------------------------------------------------------------------------ collate and convert

SAMPLES = {
    "ints": [1, 2, 3],
    "floats": [0.5, 1.5],
    "bools": [True, False],
    "int then float": [1, 2.5],
    "strings": ["a", "bc"],
    "bytes": [b"a", b"b"],
    "np float32 scalars": [np.float32(1), np.float32(2)],
    "np int32 scalars": [np.int32(1), np.int32(-2)],
    "np bool scalars": [np.bool_(True), np.bool_(False)],
    "np arrays": [np.arange(6, dtype=np.int16).reshape(2, 3), np.ones((2, 3), np.int16)],
    "np float64 arrays": [np.zeros(2), np.ones(2)],
    # mixed dtypes take torch's promotion (float32 with int64 is float32; numpy's own would make float64)
    "np mixed float32 int64 arrays": [np.ones(2, np.float32), np.arange(2, dtype=np.int64) + 2**40 + 1],
    "np mixed float16 int32 arrays": [np.ones(2, np.float16), np.arange(2, dtype=np.int32)],
    "np mixed uint8 int8 arrays": [np.full(2, 200, np.uint8), np.full(2, -3, np.int8)],
    "np mixed scalars": [np.float32(1.5), np.int64(3)],
    "np str scalars": [np.str_("a"), np.str_("b")],
    "tuples": [(1, 0.5, "x"), (2, 1.5, "y")],
    "lists": [[1, 2], [3, 4]],
    "dicts": [{"a": 1, "b": [0.5, np.float32(2)]}, {"a": 2, "b": [1.5, np.float32(3)]}],
    "namedtuples": [Point(1, np.ones(2, np.float32)), Point(2, np.zeros(2, np.float32))],
    "nested": [{"p": Point((1, 2), {"z": 0.5})}, {"p": Point((3, 4), {"z": 1.5})}],
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_default_collate_matches_torch(name):
    batch = SAMPLES[name]
    assert_same(data.default_collate(batch), tdata.default_collate(batch))


def test_default_collate_stacks_tensors():
    rows = [np.arange(3, dtype=np.float32) + i for i in range(4)]
    ours = data.default_collate([Tensor(r) for r in rows])
    assert_same(ours, tdata.default_collate([torch.from_numpy(r) for r in rows]))
    # a Python int batch is int64 (torch's collate), though uopkit's Tensor([1, 2]) is int32
    assert data.default_collate([1, 2]).dtype == dtypes.int64 and Tensor([1, 2]).dtype == dtypes.int32


@pytest.mark.parametrize(
    "batch, error",
    [
        ([[1, 2], [3]], RuntimeError),
        ([object(), object()], TypeError),
        ([np.array(["a"]), np.array(["b"])], TypeError),
        ([None, None], TypeError),
        ([np.zeros(2), np.zeros(3)], RuntimeError),
        ([np.zeros((2, 1), np.float32), np.zeros((1, 2), np.float32)], RuntimeError),
    ],
)
def test_default_collate_errors_as_torch(batch, error):
    with pytest.raises(error):
        tdata.default_collate(batch)
    with pytest.raises(error):
        data.default_collate(batch)


@pytest.mark.parametrize(
    "sample",
    [
        np.arange(3),
        np.float64(2.5),
        3,
        "text",
        (np.ones(2, np.float32), 2),
        [np.zeros(1), "a"],
        {"a": np.int8(3), "b": [np.ones(2)]},
        Point(np.ones(1), 2),
        np.array(["x"]),
    ],
)
def test_default_convert_matches_torch(sample):
    ours, theirs = data.default_convert(sample), tdata.default_convert(sample)
    if isinstance(sample, np.ndarray) and sample.dtype.kind == "U":
        assert ours is sample and theirs is sample
    else:
        assert_same(ours, theirs)


# ------------------------------------------------------------------------------------------ datasets


def test_concat_dataset_matches_torch():
    parts = [list(range(3)), list(range(10, 12)), list(range(20, 24))]
    ours, theirs = data.ConcatDataset(parts), tdata.ConcatDataset(parts)
    assert len(ours) == len(theirs) == 9 and ours.cumulative_sizes == theirs.cumulative_sizes
    assert [ours[i] for i in range(-9, 9)] == [theirs[i] for i in range(-9, 9)]
    with pytest.raises(IndexError):
        ours[9]

    class Range(data.Dataset):
        def __init__(self, n):
            self.n = n

        def __getitem__(self, i):
            return i

        def __len__(self):
            return self.n

    joined = Range(2) + Range(3)
    assert isinstance(joined, data.ConcatDataset) and [joined[i] for i in range(5)] == [0, 1, 0, 1, 2]


def test_subset_matches_torch():
    ours, theirs = data.Subset(list(range(10, 20)), [4, 0, 9]), tdata.Subset(list(range(10, 20)), [4, 0, 9])
    assert len(ours) == len(theirs) and [ours[i] for i in range(3)] == [theirs[i] for i in range(3)]


class Stream(data.IterableDataset):
    def __init__(self, n, with_len=True):
        self.n, self.with_len = n, with_len

    def __iter__(self):
        return iter({"v": i, "x": np.full(2, i, np.float32)} for i in range(self.n))

    def __len__(self):
        if not self.with_len:
            raise TypeError("no length")
        return self.n


class TorchStream(tdata.IterableDataset):
    __init__, __iter__, __len__ = Stream.__init__, Stream.__iter__, Stream.__len__


@pytest.mark.parametrize("batch_size, drop_last", [(3, False), (3, True), (5, False), (None, False)])
def test_iterable_dataset_matches_torch(batch_size, drop_last):
    ours = data.DataLoader(Stream(7), batch_size=batch_size, drop_last=drop_last)
    theirs = tdata.DataLoader(TorchStream(7), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    batches = list(ours)
    assert len(batches) == len(list(theirs))
    for a, b in zip(batches, theirs, strict=True):
        assert_same(a, b)
    with pytest.raises(TypeError):
        len(data.DataLoader(Stream(7, with_len=False)))
    ours, theirs = data.ChainDataset([Stream(2), Stream(3)]), tdata.ChainDataset([TorchStream(2), TorchStream(3)])
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)
    assert isinstance(Stream(1) + Stream(2), data.ChainDataset) and len(list(Stream(1) + Stream(2))) == 3


def test_tensor_dataset_checks_lengths():
    with pytest.raises(AssertionError):
        tdata.TensorDataset(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="Size mismatch"):
        data.TensorDataset(Tensor.zeros(3), np.zeros(4))
    with pytest.raises(TypeError):
        data.TensorDataset([1, 2, 3])


@pytest.mark.parametrize(
    "n, lengths",
    [
        (10, [3, 7]),
        (10, [0.5, 0.5]),
        (10, [0.33, 0.33, 0.34]),
        (7, [0.1, 0.2, 0.7]),
        (5, [0.9, 0.1]),
        (11, [1 / 3, 1 / 3, 1 / 3]),
        (10, [10, 0]),
        (1, [1]),
    ],
)
def test_random_split_lengths_match_torch(n, lengths):
    with warnings.catch_warnings(record=True) as their_warnings:
        warnings.simplefilter("always")
        theirs = tdata.random_split(range(n), lengths)
    with warnings.catch_warnings(record=True) as our_warnings:
        warnings.simplefilter("always")
        ours = data.random_split(range(n), lengths)
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    assert len(our_warnings) == len(their_warnings)
    # the splits partition the dataset
    assert sorted(i for s in ours for i in (s[j] for j in range(len(s)))) == list(range(n))


def test_random_split_is_seeded():
    Tensor.manual_seed(3)
    a = [s.indices for s in data.random_split(range(20), [5, 15])]
    b = [s.indices for s in data.random_split(range(20), [5, 15])]
    Tensor.manual_seed(3)
    assert a == [s.indices for s in data.random_split(range(20), [5, 15])] and a != b
    g = [s.indices for s in data.random_split(range(20), [0.5, 0.5], generator=np.random.default_rng(1))]
    assert g == [s.indices for s in data.random_split(range(20), [0.5, 0.5], generator=np.random.default_rng(1))]


# ------------------------------------------------------------------------------------------ samplers


def test_sequential_and_batch_samplers_match_torch():
    assert list(data.SequentialSampler(range(5))) == list(tdata.SequentialSampler(range(5)))
    for n, size, drop in [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False), (2, 5, True), (0, 2, False)]:
        ours, theirs = data.BatchSampler(range(n), size, drop), tdata.BatchSampler(range(n), size, drop)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_random_sampler_is_a_permutation_each_epoch_and_seeded():
    ds = range(50)
    Tensor.manual_seed(0)
    s = data.RandomSampler(ds)
    first, second = list(s), list(s)
    assert sorted(first) == sorted(second) == list(ds) and first != second and len(s) == 50
    Tensor.manual_seed(0)
    assert list(s) == first
    # a numpy Generator drives it on its own
    g = data.RandomSampler(ds, generator=np.random.default_rng(5))
    assert list(g) == list(data.RandomSampler(ds, generator=np.random.default_rng(5)))


def test_random_sampler_num_samples_and_replacement():
    over = list(data.RandomSampler(range(4), num_samples=10))
    assert len(over) == len(list(tdata.RandomSampler(range(4), num_samples=10))) == 10
    assert sorted(over[:4]) == sorted(over[4:8]) == [0, 1, 2, 3] and len(set(over[8:])) == 2
    drawn = list(data.RandomSampler(range(3), replacement=True, num_samples=200))
    assert len(drawn) == 200 and set(drawn) == {0, 1, 2}
    assert len(data.RandomSampler(range(3), replacement=True)) == 3


def test_subset_and_weighted_samplers():
    s = data.SubsetRandomSampler([10, 20, 30, 40])
    a, b = list(s), list(s)
    assert sorted(a) == sorted(b) == [10, 20, 30, 40] and len(s) == 4
    w = data.WeightedRandomSampler([0.0, 1.0, 3.0, 0.0], 4000)
    drawn = np.array(list(w))
    assert len(w) == 4000 and set(drawn.tolist()) == {1, 2} and 0.7 < (drawn == 2).mean() < 0.8
    no_repeat = list(data.WeightedRandomSampler(Tensor([1.0, 2.0, 3.0, 4.0]), 4, replacement=False))
    assert sorted(no_repeat) == [0, 1, 2, 3]


def test_weighted_sampler_without_replacement_past_the_non_zero_weights_as_torch():
    # more samples than non-zero weights: torch's multinomial gives the non-zero ones first (by weight), then indices
    # of zero weights; this raised ValueError. More samples than weights raises, as torch's (here when built)
    tdata = pytest.importorskip("torch.utils.data")

    weights = [1.0, 0.0, 0.0, 0.0, 2.0]
    theirs = list(tdata.WeightedRandomSampler(weights, 4, replacement=False))
    for _ in range(20):
        ours = list(data.WeightedRandomSampler(weights, 4, replacement=False))
        assert len(ours) == len(theirs) == 4 and len(set(ours)) == 4
        assert sorted(ours[:2]) == sorted(theirs[:2]) == [0, 4] and set(ours[2:]) <= {1, 2, 3}
    firsts = [next(iter(data.WeightedRandomSampler(weights, 3, replacement=False))) for _ in range(600)]
    assert 0.6 < np.mean(np.array(firsts) == 4) < 0.73
    with pytest.raises(RuntimeError):
        list(tdata.WeightedRandomSampler(weights, 6, replacement=False))
    with pytest.raises(ValueError, match="at most 5 samples .* asked for 6"):
        data.WeightedRandomSampler(weights, 6, replacement=False)


def test_shuffled_loader_epochs():
    xs = np.arange(40, dtype=np.float32).reshape(20, 2)
    loader = data.DataLoader(data.TensorDataset(Tensor(xs)), batch_size=6, shuffle=True)
    Tensor.manual_seed(7)
    epochs = [np.concatenate([b[0].numpy() for b in loader]) for _ in range(2)]
    for rows in epochs:
        assert sorted(rows[:, 0].tolist()) == xs[:, 0].tolist() and np.array_equal(rows[:, 1], rows[:, 0] + 1)
    assert not np.array_equal(epochs[0], epochs[1])
    Tensor.manual_seed(7)
    assert np.array_equal(np.concatenate([b[0].numpy() for b in loader]), epochs[0])
    assert [len(b[0]) for b in loader] == [6, 6, 6, 2]


# ------------------------------------------------------------------------------------------ errors


def _loader_cases():
    ds = list(range(10))
    return {
        "batch_size 0": lambda m: m.DataLoader(ds, batch_size=0),
        "batch_size negative": lambda m: m.DataLoader(ds, batch_size=-2),
        "sampler and shuffle": lambda m: m.DataLoader(ds, sampler=m.SequentialSampler(ds), shuffle=True),
        "batch_sampler and batch_size": lambda m: m.DataLoader(ds, batch_size=2, batch_sampler=[[0, 1]]),
        "batch_sampler and shuffle": lambda m: m.DataLoader(ds, shuffle=True, batch_sampler=[[0, 1]]),
        "batch_sampler and drop_last": lambda m: m.DataLoader(ds, drop_last=True, batch_sampler=[[0, 1]]),
        "no batch and drop_last": lambda m: m.DataLoader(ds, batch_size=None, drop_last=True),
        "negative workers": lambda m: m.DataLoader(ds, num_workers=-1),
        "negative timeout": lambda m: m.DataLoader(ds, timeout=-1),
        "prefetch without workers": lambda m: m.DataLoader(ds, prefetch_factor=2),
        "persistent without workers": lambda m: m.DataLoader(ds, persistent_workers=True),
        "negative prefetch": lambda m: m.DataLoader(ds, num_workers=2, prefetch_factor=-1),
        "context without workers": lambda m: m.DataLoader(ds, multiprocessing_context="spawn"),
        "unknown start method": lambda m: m.DataLoader(ds, num_workers=2, multiprocessing_context="threads"),
        "distributed without world size": lambda m: m.DistributedSampler(ds),
        "distributed rank past replicas": lambda m: m.DistributedSampler(ds, num_replicas=2, rank=2),
        "distributed negative rank": lambda m: m.DistributedSampler(ds, num_replicas=2, rank=-1),
        "stack of nothing": lambda m: m.StackDataset(),
        "stack of tuple and dict": lambda m: m.StackDataset(ds, y=ds),
        "stack lengths differ": lambda m: m.StackDataset(ds, ds[:3]),
        "lengths don't add up": lambda m: m.random_split(ds, [3, 4]),
        "fractions don't add up": lambda m: m.random_split(ds, [0.3, 0.4]),
        "fraction above 1": lambda m: m.random_split(ds, [1.5, -0.5]),
        "num_samples 0": lambda m: m.RandomSampler(ds, num_samples=0),
        "batch sampler size 0": lambda m: m.BatchSampler(ds, 0, False),
        "batch sampler drop_last": lambda m: m.BatchSampler(ds, 2, 1),
        "weighted num_samples": lambda m: m.WeightedRandomSampler([1.0, 2.0], 0),
        "weighted replacement": lambda m: m.WeightedRandomSampler([1.0, 2.0], 2, replacement=1),
        "weighted 2-d": lambda m: m.WeightedRandomSampler([[1.0, 2.0]], 2),
    }


@pytest.mark.parametrize("case", list(_loader_cases()))
def test_errors_as_torch(case):
    make = _loader_cases()[case]
    with pytest.raises(ValueError):
        make(tdata)
    with pytest.raises(ValueError):
        make(data)


def test_iterable_dataset_refuses_an_order():
    for kwargs in ({"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}):
        with pytest.raises(ValueError):
            tdata.DataLoader(TorchStream(3), **kwargs)
        with pytest.raises(ValueError, match="IterableDataset"):
            data.DataLoader(Stream(3), **kwargs)
    with pytest.raises(TypeError):
        data.RandomSampler(range(3), replacement=1)
    with pytest.raises(TypeError, match="numpy Generator"):
        list(data.RandomSampler(range(3), generator=1))
    with pytest.raises(ValueError):
        data.WeightedRandomSampler([1.0, -1.0], 2)
    with pytest.raises(ValueError):
        data.ConcatDataset([])


def test_loader_signature_matches_torch():
    # (torch's multiprocessing_context and generator are positional, prefetch_factor and the rest keyword-only)
    ours, theirs = inspect.signature(data.DataLoader), inspect.signature(tdata.DataLoader)
    assert [(p.name, p.kind) for p in ours.parameters.values()] == [
        (p.name, p.kind) for p in theirs.parameters.values()
    ]
    rng = np.random.default_rng(0)
    loader = data.DataLoader(range(4), 1, True, None, None, 0, None, False, False, 0, None, None, rng)
    assert loader.generator is rng and loader.multiprocessing_context is None


def test_loader_worker_options_as_torch():
    for m in (data, tdata):
        loader = m.DataLoader(range(4), num_workers=2, multiprocessing_context="spawn")
        assert loader.prefetch_factor == 2 and loader.multiprocessing_context.get_start_method() == "spawn"
        assert m.DataLoader(range(4)).prefetch_factor is None
        with pytest.raises(TypeError):
            m.DataLoader(range(4), num_workers=2, multiprocessing_context=3)


@pytest.mark.parametrize(
    "name", ["batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"]
)
def test_loader_batching_is_fixed_after_init(name):
    for m in (data, tdata):
        loader = m.DataLoader(list(range(6)), batch_size=2)
        with pytest.raises(ValueError, match=name):
            setattr(loader, name, None)
        loader.collate_fn = len
        assert list(loader) == [2, 2, 2]


def test_random_sampler_num_samples_from_nothing():
    for m in (data, tdata):
        with pytest.raises(RuntimeError):
            list(m.RandomSampler([], replacement=True, num_samples=3))
        with pytest.raises(ZeroDivisionError):
            list(m.RandomSampler([], num_samples=3))
    with pytest.raises(ZeroDivisionError, match="RandomSampler: can't draw 3 samples from an empty dataset"):
        list(data.RandomSampler([], num_samples=3))


def test_generator_error_names_the_torch_generator():
    with pytest.raises(TypeError, match="torch.*Generator"):
        list(data.RandomSampler(range(3), generator=torch.Generator()))


# ------------------------------------------------------------------------------------------ distributed and stacked


@pytest.mark.parametrize("n", [0, 1, 5, 6, 7, 10])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_in_order_matches_torch(n, replicas, drop_last):
    for rank in range(replicas):
        kwargs = {"num_replicas": replicas, "rank": rank, "shuffle": False, "drop_last": drop_last}
        ours, theirs = data.DistributedSampler(range(n), **kwargs), tdata.DistributedSampler(range(n), **kwargs)
        assert (len(ours), ours.num_samples, ours.total_size) == (len(theirs), theirs.num_samples, theirs.total_size)
        assert list(ours) == list(theirs)


@pytest.mark.parametrize("n, replicas, drop_last", [(50, 2, False), (23, 4, False), (23, 4, True), (3, 5, False)])
def test_distributed_sampler_shuffled_shares(n, replicas, drop_last):
    def shares(m, epoch, seed=3):
        out = []
        for rank in range(replicas):
            s = m.DistributedSampler(range(n), num_replicas=replicas, rank=rank, seed=seed, drop_last=drop_last)
            s.set_epoch(epoch)
            out.append(list(s))
        return out

    for epoch in (0, 1):
        ours, theirs = shares(data, epoch), shares(tdata, epoch)
        # the shares' sizes and how often each index is taken (padding repeats) match torch's, order aside
        assert [len(x) for x in ours] == [len(x) for x in theirs]
        count = lambda parts: sorted(collections.Counter(sum(parts, [])).values())  # noqa: E731
        assert count(ours) == count(theirs)
        if not drop_last:
            assert set(sum(ours, [])) == set(sum(theirs, [])) == set(range(n))
        # the same on every replica process: a fresh sampler with the same seed and epoch gives the same share
        assert shares(data, epoch) == ours
    assert shares(data, 0) != shares(data, 1) and shares(data, 0) != shares(data, 0, seed=4)


def test_distributed_sampler_in_a_loader():
    ds = list(range(7))
    ours = data.DataLoader(ds, batch_size=2, sampler=data.DistributedSampler(ds, 2, 1, shuffle=False))
    theirs = tdata.DataLoader(ds, batch_size=2, sampler=tdata.DistributedSampler(ds, 2, 1, shuffle=False))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)


def test_stack_dataset_matches_torch():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    for args, kwargs in (((x, "abc"), {}), ((), {"x": x, "label": [4, 5, 6]})):
        ours, theirs = data.StackDataset(*args, **kwargs), tdata.StackDataset(*args, **kwargs)
        assert len(ours) == len(theirs) == 3
        assert repr(ours[1]) == repr(theirs[1])
        assert repr(ours.__getitems__([2, 0])) == repr(theirs.__getitems__([2, 0]))
    ours = data.DataLoader(data.StackDataset(x=data.TensorDataset(Tensor(x)), y=[4, 5, 6]), batch_size=2)
    theirs = tdata.DataLoader(tdata.StackDataset(x=tdata.TensorDataset(torch.from_numpy(x)), y=[4, 5, 6]), batch_size=2)
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)


def test_concat_dataset_cumsum():
    parts = [range(2), range(0), range(3)]
    assert data.ConcatDataset.cumsum(parts) == tdata.ConcatDataset.cumsum(parts) == [2, 2, 5]


# ------------------------------------------------------------------------------------------ training and docs


def test_training_loop_over_a_loader():
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)
    train, val = data.random_split(data.TensorDataset(Tensor(x), Tensor(y)), [0.75, 0.25])
    model = Linear(4, 1)
    opt = SGD(get_parameters(model), lr=0.1)
    losses = []
    with Tensor.train():
        for _ in range(8):
            for xb, yb in data.DataLoader(train, batch_size=16, shuffle=True, num_workers=2):
                opt.zero_grad()
                loss = ((model(xb) - yb) ** 2).mean()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    xv, yv = next(iter(data.DataLoader(val, batch_size=len(val))))
    assert losses[-1] < 0.05 * losses[0] and ((model(xv) - yv) ** 2).mean().item() < 0.05


@pytest.mark.parametrize("module", [sampler, dataset, collate, dataloader])
def test_docstring_examples(module):
    names = dict(vars(data)) | {"Tensor": Tensor, "np": np}
    failed, attempted = doctest.testmod(
        module, extraglobs=names, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert attempted > 0 and failed == 0


# ------------------------------------------------------------------------------------------ worker processes


def _worker_sample(m, tensor, i):
    info = m.get_worker_info()
    return {"x": tensor([float(i), 2.0 * i]), "a": np.arange(3) + i, "worker": -1 if info is None else info.id}


class _MapWorkers(data.Dataset):
    def __init__(self, m, tensor):
        self.m, self.tensor = m, tensor

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return _worker_sample(self.m, self.tensor, i)


class _StreamWorkers(data.IterableDataset):
    m = data

    def __init__(self, shard):
        self.shard = shard

    def __iter__(self):
        info = self.m.get_worker_info()
        if info is None or not self.shard:
            return iter(range(7))
        return iter(range(info.id, 7, info.num_workers))


class _TorchStreamWorkers(tdata.IterableDataset):
    m = tdata
    __init__, __iter__ = _StreamWorkers.__init__, _StreamWorkers.__iter__


def test_loader_workers_load_in_order_as_torch():
    # batches handed out round-robin over the workers and yielded in order; each worker's id in its samples
    ours = list(data.DataLoader(_MapWorkers(data, Tensor), batch_size=2, num_workers=2))
    theirs = list(tdata.DataLoader(_MapWorkers(tdata, torch.tensor), batch_size=2, num_workers=2))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)
    assert [b["worker"].tolist() for b in ours] == [[0, 0], [1, 1], [0, 0], [1]]


@pytest.mark.parametrize("shard", [False, True])
@pytest.mark.parametrize("batch_size", [None, 2])
def test_loader_workers_iterable_copies_or_shards_as_torch(shard, batch_size):
    ours = data.DataLoader(_StreamWorkers(shard), batch_size=batch_size, num_workers=2)
    theirs = tdata.DataLoader(_TorchStreamWorkers(shard), batch_size=batch_size, num_workers=2)
    ours, theirs = list(ours), list(theirs)
    assert len(ours) == len(theirs) == (14 if not shard else 7) // (batch_size or 1) + (batch_size == 2)
    for a, b in zip(ours, theirs, strict=True):
        assert_same(a, b)


def test_loader_workers_shuffle_as_without_workers():
    from uopkit import Generator

    def order(workers):
        g = Generator().manual_seed(3)
        return [b.tolist() for b in data.DataLoader(range(10), 3, True, num_workers=workers, generator=g)]

    assert order(2) == order(0)


class _Pids(data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        import os

        return [os.getpid(), int(os.environ["UOPKIT_TEST_WORKER"])]


def test_loader_persistent_workers_and_init_fn():
    import os

    loader = data.DataLoader(_Pids(), batch_size=2, num_workers=2, persistent_workers=True, worker_init_fn=_init_env)
    first, second = ([(p.tolist(), w.tolist()) for p, w in loader] for _ in range(2))
    # the same two worker processes both epochs, each set up by worker_init_fn, batches round-robin
    assert first == second and [w for _, w in first] == [[0, 0], [1, 1]]
    pids = {p for b, _ in first for p in b}
    assert len(pids) == 2 and os.getpid() not in pids
    assert data.get_worker_info() is None


def _init_env(worker_id):
    import os

    os.environ["UOPKIT_TEST_WORKER"] = str(worker_id)


def _init_fails(worker_id):
    raise ValueError(f"init failed in {worker_id}")


class _Failing(data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        import os
        import signal

        if i == 1 and self.kill:
            # (killed before it puts anything: a KeyError put just before the kill reached the loader or not, by the
            # race between the worker's queue feeder thread and the kill, so the test failed under load)
            os.kill(os.getpid(), signal.SIGKILL)
        if i == 1:
            raise KeyError(f"no sample {i}")
        return i

    kill = False


def test_loader_worker_errors_raise_in_the_main_process():
    it = iter(data.DataLoader(_Failing(), batch_size=None, num_workers=2))
    assert next(it) == 0
    with pytest.raises(KeyError, match="(?s)KeyError in DataLoader worker process 1.*no sample 1"):
        next(it)
    # the other batches still come (as torch's)
    assert [next(it), next(it)] == [2, 3]
    with pytest.raises(ValueError, match="(?s)worker process 0.*worker_init_fn.*init failed in 0"):
        list(data.DataLoader(range(2), num_workers=1, worker_init_fn=_init_fails))
    killed = _Failing()
    killed.kill = True
    with pytest.raises(RuntimeError, match="DataLoader worker .* exited unexpectedly"):
        list(data.DataLoader(killed, batch_size=None, num_workers=2))


class _Slow(data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        import time

        time.sleep(1.5 * i)
        return i


def test_loader_worker_timeout_and_early_break():
    import multiprocessing

    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.3 seconds"):
        list(data.DataLoader(_Slow(), batch_size=None, num_workers=1, timeout=0.3))
    before = set(multiprocessing.active_children())
    for _ in data.DataLoader(range(100), batch_size=2, num_workers=2):
        break
    # leaving the loop early stops the workers
    assert set(multiprocessing.active_children()) <= before


def _realize_in_child(queue):
    queue.put((Tensor.arange(5) * 3).sum().item())


def test_fork_while_another_thread_holds_uopkit_locks():
    # a thread in the middle of a realize (or of asking for the default device) when the process forks: the child's
    # first Tensor must not wait forever on a lock held by a thread it doesn't have
    import multiprocessing
    import threading

    from uopkit.engine.realize import realize_lock
    from uopkit.plugin import manager

    context = multiprocessing.get_context("fork")
    holding, release = threading.Event(), threading.Event()

    def hold():
        with realize_lock, manager.get_manager()._lock:
            holding.set()
            release.wait(10)

    def hold_manager():
        with manager.get_manager()._lock:
            holding.set()
            release.wait(10)

    for target in (hold, hold_manager):
        holding.clear(), release.clear()
        thread = threading.Thread(target=target)
        thread.start()
        holding.wait(10)
        threading.Timer(0.3, release.set).start()
        results = context.Queue()
        child = context.Process(target=_realize_in_child, args=(results,))
        child.start()
        child.join(10)
        alive = child.is_alive()
        if alive:
            child.kill()
        thread.join()
        assert not alive and results.get(timeout=1) == 30
