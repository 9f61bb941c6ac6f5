"""Issue 33, round two: reproductions for this item (see bench/api_attack.py)."""


def run(ctx):
    pass
