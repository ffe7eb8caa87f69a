"""The small programs hotloop-sim writes for `code_interpreter` (backends/sim/backend.py), from the words of the
user's message: a plot when it asks for one, a file when it asks for one, else a sum of the first n numbers (the
message's first number, else 100). Deterministic: the same message, the same program."""

from __future__ import annotations

import re

PLOT = """import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
xs = list(range({n}))
plt.plot(xs, [x * x for x in xs])
plt.title("squares")
plt.savefig("/mnt/data/plot.png")
print("saved /mnt/data/plot.png")
"""
FILE = """with open("/mnt/data/numbers.txt", "w") as out:
    out.write("\\n".join(str(x) for x in range({n})))
print("wrote /mnt/data/numbers.txt")
"""
SUM = "print(sum(range({n})))"


def sim_program(message: str) -> str:
    words = message.lower()
    found = re.search(r"\d+", words)
    n = min(int(found.group()), 10**6) if found else 100
    if "plot" in words or "chart" in words:
        return PLOT.format(n=n)
    if "file" in words:
        return FILE.format(n=n)
    return SUM.format(n=n)
