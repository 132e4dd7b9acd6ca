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


def test_cold_main_job_reads_the_example_output():
    import pytest

    from bench.cold import parse_main_job

    out = "digits: 1437 training images\nheld-out accuracy: 97.50% (351/360)\ntraining: 400 steps in 9.1 s\n"
    out += "kernels compiled: 71, compile time: 2.95 s\n"
    assert parse_main_job(out) == {"kernels": 71, "compile_s": 2.95, "accuracy": 97.5}
    with pytest.raises(ValueError, match="no compile or accuracy line"):
        parse_main_job("training: 400 steps in 9.1 s\n")
