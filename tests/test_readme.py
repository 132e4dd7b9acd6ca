"""README.md: the title, what uopkit is, the two fresh-machine commands, and every environment variable the code
reads documented in its table."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

# os.getenv("X"), os.environ.get("X"), os.environ["X"], ContextVar("X", ...)
ENV_READ = re.compile(r"""(?:getenv|environ\.get|environ\[|ContextVar)\(?\s*["']([A-Z][A-Z0-9_]*)["']""")


def env_vars_read() -> dict[str, str]:
    """Every environment variable the core and the in-tree backends read, with one file that reads it."""
    found: dict[str, str] = {}
    files = [*(ROOT / "core" / "uopkit").rglob("*.py"), *(ROOT / "plugins").glob("*/**/*.py")]
    for path in sorted(files):
        if ".venv" in path.parts:
            continue
        for name in ENV_READ.findall(path.read_text()):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def documented_vars() -> set[str]:
    section = README.split("## Environment", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, re.M))


def test_title_then_what_it_is_then_the_two_commands():
    assert README.startswith("# uopkit\n\n")
    blocks = README.split("\n\n")
    assert blocks[1].startswith("uopkit is a small tensor compiler")
    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    assert commands[0].endswith("python examples/train_digits.py") and 'pip install -e ".[examples]"' in commands[0]
    assert commands[1].endswith("python -m pytest -q -n 2") and 'pip install -e ".[test]"' in commands[1]
    assert README.index(commands[0]) < README.index("## ")


def test_architecture_section_names_files_that_exist():
    section = README.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    paths = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", section))
    assert {"tensor/tensor.py", "engine/realize.py", "schedule/grouper.py", "codegen/lowerer.py", "device.py"} <= paths
    for p in paths:
        assert (ROOT / "core" / "uopkit" / p).exists() or (ROOT / p).exists(), f"README names a missing file {p}"
    # the repository documents itself: nothing points outside it
    assert "shared/" not in README


def test_env_reader_finds_reads():
    src = 'x = os.getenv("A_B")\ny = os.environ.get("C")\nz = ContextVar("D", 1)\nos.environ["E"]\n'
    assert ENV_READ.findall(src) == ["A_B", "C", "D", "E"]
    assert {"DEBUG", "SCHEDULE_CACHE", "DEVICE", "CC"} <= set(env_vars_read())


def test_every_environment_variable_is_documented():
    missing = {name: where for name, where in env_vars_read().items() if name not in documented_vars()}
    assert not missing, f"README.md's Environment table lacks variables the code reads: {missing}"
