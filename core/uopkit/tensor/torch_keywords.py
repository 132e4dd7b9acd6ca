"""PyTorch's keyword names for the arguments of Tensor methods that uopkit names otherwise.

A call ported from torch passes arguments by torch's names: `torch.cumprod(input=x, dim=0)`, `t.pow(exponent=2)`,
`torch.cat(tensors=[a, b])`, `t.split(split_size=2)`. Each table entry below says, for one method, which argument
position a torch keyword stands for (0 is the tensor itself); `accept_torch_keywords` wraps the method so that the
keyword reaches the parameter uopkit has at that position. uopkit's own names keep working; giving both is a TypeError.
As torch's argument parser does for its native functions, numpy's `axis=` and `keepdims=` stand for `dim=` and
`keepdim=` on every method that has those and not numpy's (`Tensor.cat([a, b], axis=1)`, `t.sum(0, keepdims=True)`),
and the methods of torch's functions that take `out=` take it (tensor/out_arg.py).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from uopkit.tensor.out_arg import takes_out, write_out

# torch.X(input, ...): the tensor itself is torch's `input` (`self` in torch.Tensor.X's own signature)
_INPUT_FIRST = """abs neg exp sin cos tanh sigmoid relu floor ceil round sign square trunc frac reciprocal erf exp2
expm1 sinh cosh atan isnan isinf isfinite logical_not nan_to_num positive log log2 log10 log1p sqrt rsqrt lgamma
digamma add sub mul div maximum minimum atan2 eq ne lt le gt ge fmod remainder hypot copysign xlogy logaddexp fmax
fmin true_divide multiply subtract dist float_power lerp addcmul addcdiv clamp clip clamp_min clamp_max masked_fill
logical_and logical_or logical_xor isclose allclose equal softmax log_softmax sum mean prod amax amin logsumexp any
all nansum nanmean argmax argmin count_nonzero std var max min median norm cumsum cumprod cummax cummin logcumsumexp
sort argsort topk kthvalue mode std_mean var_mean aminmax diff reshape permute transpose swapaxes swapdims movedim
moveaxis squeeze unsqueeze flatten unflatten narrow chunk tensor_split roll flip gather take_along_dim index_select
scatter scatter_add scatter_reduce index_add index_fill index_copy masked_select masked_scatter tril triu diagonal
diag diag_embed trace t unbind tile repeat_interleave rot90 fliplr flipud nonzero select ravel matmul mm bmm mv dot
outer kron cross addmm baddbmm bucketize histc clone zeros_like ones_like full_like empty_like rand_like randn_like
detach multinomial bernoulli poisson stft istft""".split()

# torch.X(tensors, ...): a sequence of tensors in the place of the tensor itself
_TENSORS_FIRST = "cat concat concatenate stack hstack vstack dstack".split()

# torch's name for the second argument of a binary op (`other`), as `t.add(other=u, alpha=2)`
_OTHER_SECOND = """add sub mul div maximum minimum atan2 eq ne lt le gt ge fmod remainder hypot copysign xlogy
logaddexp fmax fmin true_divide multiply subtract dist logical_and logical_or logical_xor isclose allclose equal
kron matmul""".split()

TORCH_KEYWORDS: dict[str, dict[str, int]] = {}
for _name in _INPUT_FIRST:
    TORCH_KEYWORDS.setdefault(_name, {})["input"] = 0
for _name in _TENSORS_FIRST:
    TORCH_KEYWORDS.setdefault(_name, {})["tensors"] = 0
for _name in _OTHER_SECOND:
    TORCH_KEYWORDS.setdefault(_name, {})["other"] = 1
for _name, _keywords in {
    "pow": {"input": 0, "self": 0, "exponent": 1},
    "float_power": {"exponent": 1},
    # torch.split(tensor, split_size_or_sections, dim); Tensor.split(split_size, dim)
    "split": {"tensor": 0, "split_size_or_sections": 1, "split_size": 1},
    "expand": {"size": 1},
    "broadcast_to": {"input": 0, "size": 1},
    # torch.tensor_split's overloads name the second argument `sections` or `indices`
    "tensor_split": {"sections": 1, "indices": 1},
    "unfold": {"dimension": 1},
    "swapdims": {"dim0": 1, "dim1": 2},
    "swapaxes": {"axis0": 1, "axis1": 2, "dim0": 1, "dim1": 2},
    "moveaxis": {"source": 1, "destination": 2},
    "outer": {"vec2": 1},
    "dot": {"tensor": 1},
    "tensordot": {"a": 0, "b": 1},
    "cdist": {"x1": 0, "x2": 1},
    "cosine_similarity": {"x1": 0, "x2": 1},
    "pairwise_distance": {"x1": 0, "x2": 1},
    # torch.scatter's overload with a number to write names it `value` (`t.scatter(1, idx, value=1.0)`, a one-hot)
    "scatter": {"value": 3},
    "new_zeros": {"size": 1},
    "new_ones": {"size": 1},
    "new_empty": {"size": 1},
}.items():
    TORCH_KEYWORDS.setdefault(_name, {}).update(_keywords)


# numpy's name -> torch's, accepted by torch for every native function with the torch-named argument
NUMPY_ALIASES = {"axis": "dim", "keepdims": "keepdim"}


def _positional_names(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]


def accept_torch_keywords(fn: Callable[..., Any], keywords: dict[str, int]) -> Callable[..., Any]:
    """`fn` taking, besides its own names, torch's `keywords` (torch name -> argument position) by keyword, and numpy's
    names of the arguments it names as torch (NUMPY_ALIASES)."""
    params = _positional_names(fn)
    own = {p.name for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    # torch keyword -> the parameter at its position; a name fn already has is its own, left alone
    renames = {k: params[i] for k, i in keywords.items() if k not in own and i < len(params)}
    aliases = {k: name for k, name in NUMPY_ALIASES.items() if name in own and k not in own}
    out_ok = "out" not in own and takes_out(fn.__name__, TORCH_KEYWORDS)
    if not renames and not aliases and not out_ok:
        return fn

    # (not named `method`, the name of the functions tensor/support.py's factories make from tables)
    @functools.wraps(fn)
    def with_torch_keywords(*args: Any, **kwargs: Any) -> Any:
        if kwargs and out_ok and "out" in kwargs:
            kwargs = dict(kwargs)
            out = kwargs.pop("out")
            result = with_torch_keywords(*args, **kwargs)
            return result if out is None else write_out(fn.__name__, result, out)
        if kwargs and not aliases.keys().isdisjoint(kwargs):
            kwargs = _aliased(fn.__name__, aliases, kwargs)
        if kwargs and not renames.keys().isdisjoint(kwargs):
            args, kwargs = _renamed(fn.__name__, renames, params, args, kwargs)
        return fn(*args, **kwargs)

    return with_torch_keywords


def _aliased(op: str, aliases: dict[str, str], kwargs: dict) -> dict:
    kwargs = dict(kwargs)
    for key, name in aliases.items():
        if key in kwargs:
            if name in kwargs:
                raise TypeError(f"{op}: got both {name}={kwargs[name]!r} and {key}={kwargs[key]!r}; give one")
            kwargs[name] = kwargs.pop(key)
    return kwargs


def _renamed(
    op: str, renames: dict[str, inspect.Parameter], params: list[inspect.Parameter], args: tuple, kwargs: dict
) -> tuple[tuple, dict]:
    # (sorted by position, so that positional-only and *args places fill in order)
    given = sorted((params.index(renames[k]), k) for k in kwargs if k in renames)
    for at, key in given:
        param, value = renames[key], kwargs.pop(key)
        if at < len(args) or param.name in kwargs:
            mine = args[at] if at < len(args) else kwargs[param.name]
            if at == 0 and at < len(args):
                raise TypeError(f"{op}: got the tensor twice, as self and as {key}={value!r}; give one")
            raise TypeError(f"{op}: got both {param.name}={mine!r} and {key}={value!r}; give one")
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL) or at == 0:
            if at != len(args):
                raise TypeError(f"{op}: {key}= needs the arguments before it given too")
            args = (*args, value)
        else:
            kwargs[param.name] = value
    return args, kwargs


def install_torch_keywords(cls: type) -> None:
    """Wrap each public method of `cls` named in TORCH_KEYWORDS or having an argument NUMPY_ALIASES names (plain
    functions only; static and class methods stay)."""
    for name in dir(cls):
        fn = inspect.getattr_static(cls, name, None)
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        wrapped = accept_torch_keywords(fn, TORCH_KEYWORDS.get(name, {}))
        if wrapped is not fn:
            setattr(cls, name, wrapped)
