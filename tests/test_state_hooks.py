"""nn.Module's state-dict hooks, extra state and set_submodule (uopkit/nn/state_hooks.py), compared with torch's."""

import copy

import numpy as np
import pytest
import torch

import uopkit.nn as nn
from uopkit import Tensor


def _blocks(lib):
    class Block(lib.Module):
        def __init__(self):
            super().__init__()
            self.fc = lib.Linear(2, 2)

    class Net(lib.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = lib.Sequential(Block(), lib.Linear(2, 3))
            self.head = lib.Linear(3, 1)

    return Net


class _Counter:
    # a layer with extra state, as torch's get_extra_state/set_extra_state
    def __init__(self):
        super().__init__()
        self.steps = 0

    def get_extra_state(self):
        return {"steps": self.steps}

    def set_extra_state(self, state):
        self.steps = state["steps"]


class OursCounter(_Counter, nn.Module):
    pass


class TorchCounter(_Counter, torch.nn.Module):
    pass


def _pair():
    ours, theirs = _blocks(nn)(), _blocks(torch.nn)()
    for name, p in theirs.state_dict().items():
        ours.state_dict(keep_vars=True)[name].assign(Tensor(p.numpy())).realize()
    return ours, theirs


def _as_torch(sd):
    return {k: torch.tensor(v.numpy()) if isinstance(v, Tensor) else v for k, v in sd.items()}


def _hook_all(model, log, kinds):
    for name, m in model.named_modules():
        if "save" in kinds:
            m.register_state_dict_pre_hook(
                lambda m, prefix, keep_vars, n=name: log.append(("pre", n, prefix, keep_vars))
            )
            m.register_state_dict_post_hook(lambda m, sd, prefix, meta, n=name: log.append(("post", n, prefix, meta)))
        if "load" in kinds:

            def load_pre(m, sd, prefix, meta, strict, missing, unexpected, errors, n=name):
                log.append(("load_pre", n, prefix, sorted(sd), strict))

            m.register_load_state_dict_pre_hook(load_pre)


def test_state_dict_hooks_run_in_torchs_order_with_the_inner_prefixes():
    ours, theirs = _pair()
    got, want = [], []
    _hook_all(ours, got, ("save",))
    _hook_all(theirs, want, ("save",))
    assert list(ours.state_dict(keep_vars=True)) == list(theirs.state_dict(keep_vars=True))
    assert got == want
    assert ("pre", "layer1.0", "layer1.0.", True) in got


def test_state_dict_post_hook_changes_the_state_dict_in_place_and_must_return_none():
    ours, theirs = _pair()

    def drop_bias(module, sd, prefix, meta):
        del sd[prefix + "fc.bias"]

    for model in (ours, theirs):
        model.layer1[0].register_state_dict_post_hook(drop_bias)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert "layer1.0.fc.bias" not in ours.state_dict()
    for model in (ours, theirs):
        model.head.register_state_dict_post_hook(lambda m, sd, prefix, meta: sd)
        with pytest.raises(RuntimeError, match="must return None"):
            model.state_dict()


def test_a_removed_state_dict_hook_no_longer_runs():
    ours = _blocks(nn)()
    calls = []
    handles = [
        ours.register_state_dict_pre_hook(lambda *a: calls.append("pre")),
        ours.register_state_dict_post_hook(lambda *a: calls.append("post")),
        ours.register_load_state_dict_pre_hook(lambda *a: calls.append("load_pre")),
        ours.register_load_state_dict_post_hook(lambda *a: calls.append("load_post")),
    ]
    ours.load_state_dict(ours.state_dict())
    assert calls == ["pre", "post", "load_pre", "load_post"]
    for handle in handles:
        handle.remove()
    ours.load_state_dict(ours.state_dict())
    assert len(calls) == 4


@pytest.mark.parametrize("strict", [True, False])
def test_load_pre_hooks_get_the_entries_under_their_prefix_as_torchs(strict):
    ours, theirs = _pair()
    got, want = [], []
    _hook_all(ours, got, ("load",))
    _hook_all(theirs, want, ("load",))
    sd = theirs.state_dict()
    ours.load_state_dict(sd, strict=strict)
    theirs.load_state_dict(sd, strict=strict)
    # (torch's hooks always get strict=True)
    assert got == want
    assert ("load_pre", "layer1.0", "layer1.0.", ["layer1.0.fc.bias", "layer1.0.fc.weight"], True) in got


def test_load_pre_hook_on_an_inner_module_renames_an_old_checkpoints_keys():
    ours, theirs = _pair()
    old = {k.replace(".fc.", ".dense."): v for k, v in theirs.state_dict().items()}

    def rename(module, sd, prefix, meta, strict, missing, unexpected, errors):
        for key in [k for k in sd if k.startswith(prefix + "dense.")]:
            sd[prefix + "fc." + key[len(prefix + "dense.") :]] = sd.pop(key)

    fresh, fresh_torch = _blocks(nn)(), _blocks(torch.nn)()
    fresh.layer1[0].register_load_state_dict_pre_hook(rename)
    fresh_torch.layer1[0].register_load_state_dict_pre_hook(rename)
    assert (
        repr(fresh.load_state_dict(old)) == repr(fresh_torch.load_state_dict(old)) == "<All keys matched successfully>"
    )
    assert "layer1.0.dense.weight" in old
    for k, v in fresh_torch.state_dict().items():
        np.testing.assert_array_equal(fresh.state_dict()[k].numpy(), v.numpy())
    # without the hook the old keys are missing and unexpected, in both
    with pytest.raises(RuntimeError):
        ours.load_state_dict(old)
    with pytest.raises(RuntimeError):
        theirs.load_state_dict(old)


def test_load_pre_hook_error_message_fails_the_load():
    for model in (_blocks(nn)(), _blocks(torch.nn)()):
        model.head.register_load_state_dict_pre_hook(lambda m, sd, p, meta, s, mk, uk, errors: errors.append("bad"))
        with pytest.raises(RuntimeError, match="Error\\(s\\) in loading state_dict for Net:\n\tbad"):
            model.load_state_dict(model.state_dict(), strict=False)


@pytest.mark.parametrize("strict", [True, False])
def test_load_post_hook_may_clear_incompatible_keys_in_place(strict):
    ours, theirs = _pair()
    sd = {k: v for k, v in theirs.state_dict().items() if k != "head.bias"}
    sd["stale"] = torch.zeros(1)
    seen = {"ours": [], "theirs": []}
    for who, model in (("ours", ours), ("theirs", theirs)):

        def forgive(module, keys, who=who):
            seen[who].append((list(keys.missing_keys), list(keys.unexpected_keys)))
            keys.missing_keys.clear()
            keys.unexpected_keys.remove("stale")

        model.register_load_state_dict_post_hook(forgive)
    got, want = ours.load_state_dict(sd, strict=strict), theirs.load_state_dict(_as_torch(sd), strict=strict)
    assert tuple(got) == tuple(want) == ([], [])
    assert seen["ours"] == seen["theirs"] == [(["head.bias"], ["stale"])]
    np.testing.assert_array_equal(ours.head.weight.numpy(), theirs.head.weight.detach().numpy())


def test_load_post_hook_must_return_none():
    for model in (_blocks(nn)(), _blocks(torch.nn)()):
        model.register_load_state_dict_post_hook(lambda m, keys: keys)
        with pytest.raises(AssertionError):
            model.load_state_dict(model.state_dict())


def test_extra_state_is_in_torchs_place_and_loads_through_set_extra_state():
    def model(lib, counter):
        return lib.Sequential(lib.Linear(2, 2), lib.Sequential(counter(), lib.Linear(2, 1)))

    ours, theirs = model(nn, OursCounter), model(torch.nn, TorchCounter)
    ours[1][0].steps = theirs[1][0].steps = 7
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.state_dict()["1.0._extra_state"] == theirs.state_dict()["1.0._extra_state"] == {"steps": 7}
    fresh, fresh_torch = model(nn, OursCounter), model(torch.nn, TorchCounter)
    fresh.load_state_dict(ours.state_dict())
    fresh_torch.load_state_dict(theirs.state_dict())
    assert fresh[1][0].steps == fresh_torch[1][0].steps == 7
    # a missing extra state is a missing key; one for a module without extra state is unexpected
    without = {k: v for k, v in theirs.state_dict().items() if k != "1.0._extra_state"}
    got, want = fresh.load_state_dict(without, strict=False), fresh_torch.load_state_dict(without, strict=False)
    assert tuple(got) == tuple(want) == (["1.0._extra_state"], [])
    with pytest.raises(RuntimeError, match="1.0._extra_state"):
        fresh.load_state_dict(without)
    plain, plain_torch = model(nn, nn.Identity), model(torch.nn, torch.nn.Identity)
    got = plain.load_state_dict(ours.state_dict(), strict=False)
    want = plain_torch.load_state_dict(theirs.state_dict(), strict=False)
    assert tuple(got) == tuple(want) == ([], ["1.0._extra_state"])


def test_extra_state_leaves_named_parameters_and_get_state_dict_alone():
    ours = nn.Sequential(OursCounter(), nn.Linear(2, 1))
    assert [n for n, _ in ours.named_parameters()] == ["1.weight", "1.bias"]
    assert list(nn.state.get_state_dict(ours)) == ["1.weight", "1.bias"]
    assert ours.to("CPU") is ours


def test_set_submodule_as_torchs():
    ours, theirs = _blocks(nn)(), _blocks(torch.nn)()
    for model, lib in ((ours, nn), (theirs, torch.nn)):
        model.set_submodule("layer1.0.fc", lib.Linear(2, 4))
        model.set_submodule("layer1.extra", lib.Linear(4, 4))
        with pytest.raises(AttributeError):
            model.set_submodule("layer1.missing", lib.Linear(1, 1), strict=True)
        with pytest.raises(AttributeError):
            model.set_submodule("nowhere.fc", lib.Linear(1, 1))
        with pytest.raises(ValueError):
            model.set_submodule("", lib.Linear(1, 1))
        with pytest.raises(ValueError):
            model.set_submodule("head", "not a module")
        with pytest.raises(AttributeError):
            model.set_submodule("layer1.0.fc.weight", lib.Linear(1, 1))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.state_dict()["layer1.0.fc.weight"].shape == (4, 2)


def _nested(lib):
    return lib.Sequential(lib.Linear(2, 2), lib.Sequential(lib.Linear(2, 2)), lib.BatchNorm1d(2))


def _log_load_hooks(model, log, with_module=True):
    # a load pre-hook and post-hook on every module, logging what each is given
    for name, m in model.named_modules():

        def pre(*args, n=name):
            sd, prefix, meta, strict, missing, unexpected, errors = args[1:] if with_module else args
            log.append(("pre", n, prefix, dict(meta), sorted(sd), strict, list(missing), list(unexpected)))

        def post(m, keys, n=name):
            log.append(("post", n, list(keys.missing_keys), list(keys.unexpected_keys)))

        if with_module:
            m.register_load_state_dict_pre_hook(pre)
        else:
            # (torch's private form, whose hook takes no module)
            m._register_load_state_dict_pre_hook(pre)
        m.register_load_state_dict_post_hook(post)


@pytest.mark.parametrize("with_module", [True, False])
def test_load_hooks_run_module_by_module_and_see_the_keys_found_so_far_as_torchs(with_module):
    ours, theirs = _nested(nn), _nested(torch.nn)
    got, want = [], []
    _log_load_hooks(ours, got, with_module)
    _log_load_hooks(theirs, want, with_module)
    sd = theirs.state_dict()
    del sd["1.0.bias"]
    sd["junk"] = sd["1.junk"] = sd["0.weight"]
    result, expected = ours.load_state_dict(sd, strict=False), theirs.load_state_dict(sd, strict=False)
    assert tuple(result) == tuple(expected) == (["1.0.bias"], ["junk", "1.junk"])
    assert got == want
    order = [f"{kind} {name or 'root'}" for kind, name, *_ in got]
    assert order == ["pre root", "pre 0", "post 0", "pre 1", "pre 1.0", "post 1.0", "post 1", "pre 2", "post 2"] + [
        "post root"
    ]
    # (the BatchNorm's version 2, from the state dict's `_metadata`)
    assert got[7][3] == {"version": 2}


def test_a_post_hook_sees_its_module_loaded_and_the_strict_check_what_the_hooks_leave():
    ours, theirs = _nested(nn), _nested(torch.nn)
    sd = theirs.state_dict()
    del sd["2.bias"]
    seen = {}
    for who, model in (("ours", ours), ("theirs", theirs)):

        def forgive(module, keys, who=who):
            seen[who] = float(module.weight.detach().numpy()[0, 0]), list(keys.missing_keys)
            keys.missing_keys.clear()

        model[0].register_load_state_dict_post_hook(forgive)
        model[2].register_load_state_dict_post_hook(lambda m, keys: keys.missing_keys.remove("2.bias"))
    assert tuple(ours.load_state_dict(_as_torch(sd))) == tuple(theirs.load_state_dict(sd)) == ([], [])
    assert seen["ours"] == seen["theirs"] == (float(sd["0.weight"][0, 0]), [])
    np.testing.assert_array_equal(ours[2].weight.numpy(), theirs[2].weight.detach().numpy())


def test_state_dict_metadata_holds_the_layers_versions_as_torchs(tmp_path):
    ours, theirs = _nested(nn), _nested(torch.nn)
    sd = ours.state_dict()
    assert sd._metadata == theirs.state_dict()._metadata
    assert sd._metadata["2"] == {"version": 2} and sd._metadata["1.0"] == {"version": 1}
    assert ours.state_dict(prefix="net.")._metadata == theirs.state_dict(prefix="net.")._metadata
    assert copy.deepcopy(sd)._metadata == sd._metadata
    # a post-hook gets its module's entry of `_metadata`
    metas = []
    ours[2].register_state_dict_post_hook(lambda m, out, prefix, meta: metas.append(meta))
    sd = ours.state_dict()
    assert metas[0] is sd._metadata["2"]
    # torch reads the `_metadata` of our torch-format file, and we torch's
    nn.state.torch_save(sd, tmp_path / "ours.pt")
    assert torch.load(tmp_path / "ours.pt")._metadata == theirs.state_dict()._metadata
    torch.save(theirs.state_dict(), tmp_path / "theirs.pt")
    assert nn.state.torch_load(tmp_path / "theirs.pt")._metadata == sd._metadata


def _frozen_bn(lib, mk):
    # torchvision's FrozenBatchNorm2d pattern: fixed statistics as buffers, and a `_load_from_state_dict` that drops
    # the num_batches_tracked a BatchNorm2d checkpoint has and renames an old key, then calls super()'s
    class FrozenBN(lib.Module):
        def __init__(self, n):
            super().__init__()
            for name, value in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
                self.register_buffer(name, mk(np.full(n, value, np.float32)))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
            state_dict.pop(prefix + "num_batches_tracked", None)
            if prefix + "gamma" in state_dict:
                state_dict[prefix + "weight"] = state_dict.pop(prefix + "gamma")
            super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing, unexpected, errors)

    return FrozenBN


def test_a_module_s_own_load_from_state_dict_reworks_its_entries_as_torchs():
    results = []
    for lib, mk in ((torch.nn, torch.tensor), (nn, Tensor)):
        model = lib.Sequential(lib.Linear(2, 2), _frozen_bn(lib, mk)(2))
        bn = lib.BatchNorm2d(2)
        sd = {f"1.{k}": v for k, v in bn.state_dict().items()}
        sd["1.gamma"] = sd.pop("1.weight") * 3
        sd["1.running_var"] = mk(np.array([4.0, 9.0], np.float32))
        sd |= {f"0.{k}": v for k, v in lib.Linear(2, 2).state_dict().items()}
        result = model.load_state_dict(sd)
        results.append((list(result.missing_keys), list(result.unexpected_keys), model[1].weight.tolist()))
        assert model[1].running_var.tolist() == [4.0, 9.0]
    assert results[0] == results[1] == ([], [], [3.0, 3.0])
