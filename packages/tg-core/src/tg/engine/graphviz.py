"""GRAPH=1: the lazy graph of every schedule as a picture. Each kernel (a realized buffer) is a node,
labelled with its op, shape and dtype; an edge means a kernel reads another's output.

Written at exit as DOT to GRAPH_PATH (default tg_graph.dot) and rendered to SVG beside it when Graphviz's
`dot` is installed; without it the DOT file is written and tg says how to get the picture."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
from typing import Any

from tg.settings import GRAPH, GRAPH_PATH

_nodes: dict[int, str] = {}
_edges: set[tuple[int, int]] = set()


def enabled() -> bool:
  return bool(GRAPH.value)


def add_schedule(reads: dict[Any, set[Any]]) -> None:
  """`reads` maps each scheduled base to the bases its kernel loads."""
  if not _nodes:
    atexit.register(write)
  for b, srcs in reads.items():
    _nodes[id(b)] = f"{getattr(b.op, 'name', b.op)}\\n{tuple(b.shape)} {b.dtype.name}"
    for s in srcs:
      _nodes.setdefault(id(s), f"buffer\\n{tuple(s.shape)} {s.dtype.name}")
      _edges.add((id(s), id(b)))


def write(path: str | None = None) -> str:
  path = path or GRAPH_PATH.value
  lines = ["digraph tg {", "  node [shape=box, fontname=monospace];"]
  lines += [f'  n{k} [label="{label}"];' for k, label in _nodes.items()]
  lines += [f"  n{a} -> n{b};" for a, b in sorted(_edges)]
  with open(path, "w") as f:
    f.write("\n".join(lines + ["}"]) + "\n")
  if shutil.which("dot") is None:
    print(f"GRAPH: wrote {path}; Graphviz is not installed, so no picture (apt-get install graphviz, then dot -Tsvg {path})")
    return path
  svg = os.path.splitext(path)[0] + ".svg"
  subprocess.run(["dot", "-Tsvg", path, "-o", svg], check=False)
  print(f"GRAPH: wrote {path} and {svg}")
  return svg
