"""The server's own Python inside a sandbox: its installation and its virtualenv's packages, read-only at the same
paths (so numpy and matplotlib are there when the server has them), and nothing else of where they live."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from hotloop.sandbox import mounts


@dataclass(frozen=True, slots=True)
class Interpreter:
    executable: str  # the python the kernel runs, at the path it has on the host
    trees: tuple[str, ...]  # files and directories to bind read-only at the same paths
    bin_dir: str  # first on the sandbox's PATH: `python3` in a shell is this one


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def server_interpreter() -> Interpreter:
    """This process's interpreter. Of a virtualenv only pyvenv.cfg, bin/ and lib/ (its site-packages): whatever
    else sits in its folder (a model cache in the image's /opt/hotloop) stays out."""
    trees: list[str] = []
    base = os.path.realpath(sys.base_prefix)
    if not _inside(base, "/usr"):
        trees.append(base)
    if sys.prefix != sys.base_prefix and not _inside(sys.prefix, "/usr"):
        trees += [os.path.join(sys.prefix, part) for part in ("pyvenv.cfg", "bin", "lib")]
    # Normalized: started as `../.venv/bin/python`, sys.executable keeps the `..`, whose directories the sandbox
    # does not have (sys.prefix has it resolved); not resolved, so that a virtualenv's python stays its own.
    executable = os.path.abspath(sys.executable)
    real = os.path.realpath(executable)
    if not any(_inside(real, tree) for tree in ("/usr", *trees)):
        trees.append(os.path.dirname(real))
    existing = tuple(tree for tree in trees if os.path.exists(tree))
    return Interpreter(executable, existing, os.path.dirname(executable))


def stage(interpreter: Interpreter, stage_dir: Path) -> list[tuple[str, str]]:
    """(source, path inside) for each tree. A tree the sandbox's uid cannot look up (pyenv's under /root, mode
    0700) is first bound read-only under `stage_dir`, once per host: bwrap resolves its sources as that uid."""
    pairs: list[tuple[str, str]] = []
    for tree in interpreter.trees:
        if mounts.reachable(tree):
            pairs.append((tree, tree))
            continue
        staged = stage_dir / hashlib.sha256(tree.encode()).hexdigest()[:16]
        if not mounts.mounted(str(staged)):
            if os.path.isdir(tree):
                staged.mkdir(mode=0o755, parents=True, exist_ok=True)
            else:
                staged.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                staged.touch(mode=0o644)
            mounts.bind(tree, str(staged), readonly=True)
        pairs.append((str(staged), tree))
    return pairs
