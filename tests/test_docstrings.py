"""The examples in the Tensor methods' docstrings run and print what they say."""

import doctest
import math

import numpy as np
import pytest

from uopkit import Tensor, dtypes


def _examples() -> list[tuple[str, str]]:
    found = []
    for name in sorted(dir(Tensor)):
        doc = getattr(getattr(Tensor, name, None), "__doc__", None)
        if not name.startswith("_") and doc and ">>>" in doc:
            found.append((name, doc))
    return found


EXAMPLES = _examples()


def test_most_methods_have_an_example():
    assert len(EXAMPLES) > 200


@pytest.mark.parametrize("name, doc", EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_docstring_example(name, doc):
    names = {"Tensor": Tensor, "dtypes": dtypes, "np": np, "math": math}
    test = doctest.DocTestParser().get_doctest(doc, names, f"Tensor.{name}", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.summarize(verbose=False).failed == 0, "".join(report)
