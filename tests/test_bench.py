"""Smoke test of bench/: `--quick` runs end to end and uopkit's results agree with numpy (no timing is asserted)."""

import json

from bench import cases
from bench.main import TOLERANCE, benchmarks, main


def test_quick_run_writes_results(tmp_path, capsys):
    out = tmp_path / "results.json"
    argv = ["--quick", "--frameworks", "numpy,uopkit", "--no-cold", "--budget", "0.005", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "vs numpy" in printed
    data = json.loads(out.read_text())
    assert data["quick"] is True
    assert set(data["frameworks"]) == {"numpy", "uopkit"}
    names = [r["name"] for r in data["results"]]
    assert names == [b.name for b in benchmarks(cases.QUICK)]
    for r in data["results"]:
        for fw in ("numpy", "uopkit"):
            # every cell is either a time or a reason it was skipped
            assert (fw in r["times"]) != (fw in r["skipped"]), (r["name"], fw)
        for fw, t in r["times"].items():
            assert t > 0
            err = r["errors"][fw]
            assert err is None or err <= TOLERANCE, f"{r['name']} on {fw}: relative error {err}"
    # the kernels that exist today run on uopkit
    by_name = {r["name"]: r for r in data["results"]}
    assert "uopkit" in by_name["matmul 64 fp32"]["times"]
    assert "uopkit" in by_name["tiny op a+1 (16 floats) jit"]["times"]


def test_unknown_framework_is_a_clear_error(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["--frameworks", "numpy,jax"])
    assert "unknown framework(s) jax" in capsys.readouterr().err


def test_compare_prints_ratio_per_benchmark(tmp_path, capsys):
    import json

    from bench.compare import main as compare

    def write(name, t):
        path = tmp_path / name
        path.write_text(json.dumps({"results": [{"name": "matmul 256 fp32", "times": {"uopkit": t}}]}))
        return str(path)

    assert compare([write("a.json", 0.002), write("b.json", 0.001)]) == 0
    out = capsys.readouterr().out
    assert "matmul 256 fp32" in out and "2.00x" in out


def test_gpu_cases_are_the_issues_shapes():
    from bench import gpu

    full = {c.name: c for c in gpu.cases(quick=False)}
    assert list(full) == [c.name for c in gpu.cases(quick=True)]
    assert set(full) == {
        *("matmul_fp32", "matmul_fp16", "matmul_bf16", "elementwise", "softmax"),
        *("sum_axis0", "sum_axis1", "conv2d", "mlp_step"),
    }
    assert full["matmul_fp32"].shape == (4096, 4096) and full["matmul_fp16"].dtype == "float16"
    assert full["elementwise"].shape == (64 * 2**20,) and full["softmax"].shape == (8192, 4096)
    assert (full["sum_axis0"].axis, full["sum_axis1"].axis) == (0, 1) and full["sum_axis0"].shape == (8192, 4096)


def test_gpu_quick_on_opencl(tmp_path, capsys, monkeypatch):
    """bench.gpu --quick on PoCL (three cases: each compiles cold in CI): the run is checked against PyTorch; without
    CUDA it says so and prints no ratios; bfloat16, which no renderer claims, runs through the core's bits."""
    import torch

    from bench import gpu

    monkeypatch.setenv("OPENCL_PLATFORM", "Portable Computing Language")
    out = tmp_path / "gpu.json"
    only = ["--only", "matmul_fp32", "--only", "matmul_bf16", "--only", "sum_axis1"]
    assert gpu.main(["--quick", "--device", "OPENCL", *only, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == ["matmul_fp32", "matmul_bf16", "sum_axis1"]
    for r in (rows["matmul_fp32"], rows["matmul_bf16"], rows["sum_axis1"]):
        assert r["uopkit_s"] > 0 and r["rel_error"] <= r["tolerance"], r
        assert ("torch_s" in r) == torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert (
            "has no CUDA (torch.cuda.is_available() is False): PyTorch's timings and the ratios are skipped" in printed
        )
        assert "x  ok" not in printed


def test_gpu_reports_wrong_values(capsys, monkeypatch):
    from bench import gpu

    monkeypatch.setenv("OPENCL_PLATFORM", "Portable Computing Language")
    monkeypatch.setattr(gpu, "relative_error", lambda ours, theirs: 0.5)
    assert gpu.main(["--quick", "--device", "OPENCL", "--only", "sum_axis1"]) == 1
    printed = capsys.readouterr().out
    assert "sum_axis1" in printed and "WRONG (rel. error 0.5)" in printed and "1 case(s) failed" in printed


def test_gpu_unknown_device_skips(capsys):
    from bench import gpu

    assert gpu.main(["--quick", "--device", "NOPE"]) == 0
    assert "skipped: NOPE can't be opened: unknown device NOPE" in capsys.readouterr().out


def test_cold_main_job_reads_the_example_output():
    import pytest

    from bench.cold import parse_main_job

    out = "digits: 1437 training images\nheld-out accuracy: 97.50% (351/360)\ntraining: 400 steps in 9.1 s\n"
    out += "kernels compiled: 71, compile time: 2.95 s\n"
    assert parse_main_job(out) == {"kernels": 71, "compile_s": 2.95, "accuracy": 97.5}
    out = out.replace("2.95 s\n", "4.10 s (summed per kernel), waited on compiling: 2.95 s\n")
    assert parse_main_job(out) == {"kernels": 71, "compile_s": 4.1, "compile_wait_s": 2.95, "accuracy": 97.5}
    with pytest.raises(ValueError, match="no compile or accuracy line"):
        parse_main_job("training: 400 steps in 9.1 s\n")


def test_each_benchmark_runs_the_sizes_its_label_names():
    # the cases are closures: one must not read a name a later case reassigns (the elementwise case once ran on 256
    # floats under its "16M" label)
    from bench.frameworks import Framework

    numpy_fw = Framework("numpy", module=__import__("numpy"))
    sizes = cases.QUICK
    by_name = {b.name: b for b in benchmarks(sizes)}
    run, _ = next(b for name, b in by_name.items() if name.startswith("relu")).make(numpy_fw)
    assert run().shape == (sizes.elementwise,)


def test_partial_run_updates_the_saved_results(tmp_path, capsys):
    import pytest

    out = tmp_path / "results.json"
    base = ["--quick", "--no-cold", "--budget", "0.002", "--json", str(out)]
    assert main([*base, "--frameworks", "numpy,uopkit"]) == 0
    before = json.loads(out.read_text())
    # a run of one benchmark for one framework replaces that cell and keeps every other row and cell
    assert main([*base, "--frameworks", "uopkit", "--only", "matmul 64"]) == 0
    after = json.loads(out.read_text())
    assert [r["name"] for r in after["results"]] == [r["name"] for r in before["results"]]
    rows = {r["name"]: r for r in after["results"]}
    assert "numpy" in rows["matmul 64 fp32"]["times"] and "uopkit" in rows["matmul 64 fp32"]["times"]
    assert after["results"][1:] == before["results"][1:]
    assert "updated" in capsys.readouterr().out
    # a name that matches nothing is an error, and the saved results stay as they are
    with pytest.raises(SystemExit):
        main([*base, "--only", "MLP"])
    assert "matches no benchmark" in capsys.readouterr().err
    assert json.loads(out.read_text()) == after
    # results of another machine are left as they are: the partial run is saved beside them
    other = json.loads(out.read_text())
    other["machine"] = {"cpu": "another CPU", "cores": 64, "python": "3.11.0"}
    out.write_text(json.dumps(other))
    assert main([*base, "--frameworks", "uopkit", "--only", "matmul 64"]) == 0
    assert json.loads(out.read_text()) == other
    partial = json.loads((tmp_path / "results.partial.json").read_text())
    assert [r["name"] for r in partial["results"]] == ["matmul 64 fp32"]


def test_an_epoch_trains_on_each_batch_in_turn():
    # the cold epoch's loop (bench.cold --epoch): numpy's and uopkit's last losses agree, so each sliced batch was used
    import numpy as np

    from bench.frameworks import load

    params, x, y = cases.mlp_weights(cases.QUICK.mlp, 4 * 8)
    losses = {}
    for name in ("numpy", "uopkit"):
        fw = load(name)
        last = cases.make_epoch(fw, params, x, y, 8)()
        losses[name] = float(last) if name == "numpy" else float(fw.numpy(last))
    np.testing.assert_allclose(losses["uopkit"], losses["numpy"], rtol=1e-4)
    # (one batch alone gives another loss)
    one = cases.make_epoch(load("numpy"), params, x[:8], y[:8], 8)()
    assert abs(one - losses["numpy"]) > 1e-3


def test_rounds_take_turns_and_report_the_median_round(monkeypatch):
    # frameworks take turns round by round; each cell is the median of its rounds' medians
    from bench import main as bench_main
    from bench.frameworks import Framework

    order: list[str] = []
    slow_rounds = {"a": {1}, "b": {0, 2}}
    rounds_seen = {"a": 0, "b": 0}

    def fake_measure(run, warmup, budget, max_reps=1000):
        return run(), None

    def make(fw):
        def run():
            r = rounds_seen[fw.name]
            rounds_seen[fw.name] += 1
            order.append(fw.name)
            return 3.0 if r in slow_rounds[fw.name] else 1.0

        return run, lambda out: None

    monkeypatch.setattr(bench_main, "measure", fake_measure)
    res = bench_main.run_bench(bench_main.Bench("fake", make), [Framework("a"), Framework("b")], 0.0, False, rounds=3)
    assert order == ["a", "b"] * 3
    # a: 1, 3, 1 -> 1; b: 3, 1, 3 -> 3
    assert res.times == {"a": 1.0, "b": 3.0}


def test_rounds_must_be_positive(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
    assert "--rounds must be at least 1" in capsys.readouterr().err
