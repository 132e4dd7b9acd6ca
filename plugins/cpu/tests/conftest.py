import os

# check the UOp spec in every test run; set before uopkit (and its flags) is imported
os.environ.setdefault("SPEC", "1")
