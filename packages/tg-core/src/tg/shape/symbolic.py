"""Symbolic integer expressions: shapes that contain Variables, and the index math of every kernel.

Every node knows its bounds (`min`, `max`), and the operators simplify as they build: constants fold,
like terms collect, `(a*c + b) // c` and `% c` fold when the bounds allow, nested div/mod fold, and
comparisons that the bounds decide become constants. That keeps generated index expressions short.

Division and modulo are floor division and Python's modulo, so the rules above hold for negative values
too. C's `/` and `%` truncate instead; the lowerer renders a division whose numerator may be negative
with a shift that makes them agree (see tg/codegen/lowerer.py).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, Union

sint = Union[int, "Node"]


class Node:
  min: int
  max: int

  # ---------- rendering and identity ----------
  def render(self, ops: dict[type, Callable[..., Any]] | None = None, ctx: Any = None) -> Any:
    return (ops or render_python)[type(self)](self, ops or render_python, ctx)

  @functools.cached_property
  def key(self) -> str:
    return str(self.render(ctx="DEBUG"))

  def __repr__(self) -> str:
    return str(self.render(ctx="REPR"))

  def __str__(self) -> str:
    return "<" + self.key + ">"

  def __hash__(self) -> int:
    return hash(self.key)

  def __eq__(self, other: object) -> bool:
    if isinstance(other, Node):
      return self.key == other.key
    if isinstance(other, int) and not isinstance(other, bool):
      return isinstance(self, NumNode) and self.b == other
    return False

  def __bool__(self) -> bool:
    return not (self.max == self.min == 0)

  def vars(self) -> set[Variable]:
    return set()

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    raise NotImplementedError(type(self))

  def unbind(self) -> tuple[Node, dict[Variable, int]]:
    """This expression over unbound Variables, and the values the bound ones had."""
    bound = {v: v.unbind() for v in self.vars() if v.val is not None}
    return self.substitute({v: u for v, (u, _) in bound.items()}), {u: val for u, val in bound.values()}

  # ---------- arithmetic ----------
  def __neg__(self) -> Node: return self * -1
  def __add__(self, b: sint) -> Node: return Node.sum([self, b if isinstance(b, Node) else NumNode(b)])
  def __radd__(self, b: int) -> Node: return self + b
  def __sub__(self, b: sint) -> Node: return self + -b
  def __rsub__(self, b: int) -> Node: return -self + b
  def __le__(self, b: sint) -> Node: return self < (b + 1)
  def __gt__(self, b: sint) -> Node: return (-self) < (-b)
  def __ge__(self, b: sint) -> Node: return (-self) < (-b + 1)
  def __rmul__(self, b: int) -> Node: return self * b
  def __rfloordiv__(self, b: int) -> Node: return NumNode(b) // self
  def __rmod__(self, b: int) -> Node: return NumNode(b) % self

  def __truediv__(self, b: sint) -> Node:
    if not isinstance(b, (int, Node)) or isinstance(b, bool):
      return NotImplemented
    """Exact division only: a size divided by what divides it ((i*4)/2 is i*2). tinygrad's Nodes have no `/` at all;
    a quotient that may not be an integer is refused (as tinygrad refuses every `/`) rather than made a float, which
    a shape or an index can't hold."""
    q = self // b
    if q * b == self:
      return q
    raise TypeError(f"{self} / {b} may not be an integer: symbolic sizes divide with // (floor) or exactly")

  def __rtruediv__(self, b: int) -> Node:
    if not isinstance(b, int) or isinstance(b, bool):
      return NotImplemented
    return NumNode(b) / self

  def __lt__(self, b: sint) -> Node:
    lhs: Node = self
    if isinstance(b, Node):
      if isinstance(b, NumNode):
        b = b.b
      else:
        lhs, b = self - b, 0
    assert isinstance(b, int)
    if lhs.max < b:
      return NumNode(1)
    if lhs.min >= b:
      return NumNode(0)
    if isinstance(lhs, SumNode):  # move constants to the right: (x + 3) < 5 is x < 2
      consts = sum(x.b for x in lhs.nodes if isinstance(x, NumNode))
      if consts:
        return Node.sum([x for x in lhs.nodes if not isinstance(x, NumNode)]) < b - consts
      if (folded := _lt_common_factor(lhs, b)) is not None:
        return folded
    if isinstance(lhs, MulNode) and isinstance(lhs.b, int):
      if lhs.b > 0:  # x*c < b is x < ceil(b/c)
        return lhs.a < -(-b // lhs.b)
      if lhs.b < -1:  # x*-c < b is -x < ceil(b/c)
        return (lhs.a * -1) < -(-b // -lhs.b)
    return LtNode(lhs, b)

  def __mul__(self, b: sint) -> Node:
    if isinstance(b, NumNode):
      b = b.b
    if isinstance(b, Node):
      if isinstance(self, NumNode):
        return b * self.b
      return MulNode(self, b) if self.key <= b.key else MulNode(b, self)  # one order, so i*j == j*i
    if b == 0:
      return NumNode(0)
    if b == 1:
      return self
    return self._mul_int(b)

  def _mul_int(self, b: int) -> Node:
    return MulNode(self, b)

  def __floordiv__(self, b: sint) -> Node:
    if isinstance(b, NumNode):
      b = b.b
    if isinstance(b, Node):
      return self._div_node(b)
    if b == 0:
      raise ZeroDivisionError(f"{self} // 0")
    if b < 0:
      return (-self) // -b  # floor(x / b) == floor(-x / -b)
    if b == 1:
      return self
    if self.min // b == self.max // b:
      return NumNode(self.min // b)
    return self._div_int(b)

  def _div_int(self, b: int) -> Node:
    return DivNode(self, b)

  def _div_node(self, b: Node) -> Node:
    if self == b:
      return NumNode(1)
    if b.min <= 0:
      raise ValueError(f"can't divide by {b}, which may be <= 0")
    ret = DivNode(self, b)
    return NumNode(ret.min) if ret.min == ret.max else ret  # 127 // (i*128) is 0 for every i >= 1

  def __mod__(self, b: sint) -> Node:
    if isinstance(b, NumNode):
      b = b.b
    if isinstance(b, Node):
      if self == b:
        return NumNode(0)
      if b.min <= 0:
        raise ValueError(f"can't take modulo by {b}, which may be <= 0")
      if self.min >= 0 and (b - self).min > 0:  # always below the divisor: 127 % (i*128) is 127
        return self
      return ModNode(self, b)
    if b <= 0:
      raise ValueError(f"modulo by non-positive {b}")
    if b == 1:
      return NumNode(0)
    if self.min // b == self.max // b:  # all in one bucket: a shift, not a wrap
      return self - b * (self.min // b)
    return self._mod_int(b)

  def _mod_int(self, b: int) -> Node:
    return ModNode(self, b)

  # ---------- builders of sums and conjunctions ----------
  @staticmethod
  def sum(nodes: list[Node]) -> Node:
    """Sum, with constants folded and like terms (x*a + x*b) collected."""
    num = 0
    coefs: dict[Node, int] = {}
    order: list[Node] = []
    for n in _flat(nodes, SumNode):
      if isinstance(n, NumNode):
        num += n.b
        continue
      base, c = (n.a, n.b) if isinstance(n, MulNode) and isinstance(n.b, int) else (n, 1)
      if base not in coefs:
        order.append(base)
        coefs[base] = 0
      coefs[base] += c
    terms = [base * coefs[base] for base in order if coefs[base] != 0]
    if num != 0:
      terms.append(NumNode(num))
    if not terms:
      return NumNode(0)
    return terms[0] if len(terms) == 1 else SumNode(terms)

  @staticmethod
  def ands(nodes: list[Node]) -> Node:
    """Logical and of 0/1 expressions; always-true terms drop, an always-false one decides."""
    flat = _flat(nodes, AndNode)
    if any(n.max == 0 for n in flat):
      return NumNode(0)
    kept = [n for n in dict.fromkeys(flat) if n.min != 1]
    if not kept:
      return NumNode(1)
    return kept[0] if len(kept) == 1 else AndNode(kept)


def _lt_common_factor(lhs: SumNode, b: int) -> Node | None:
  """g*M + r < g*B is M < B when 0 <= r < g: (idx*4 + lane) < 512 is idx < 128, for lane in [0, 4)."""
  muls = [(n.a, n.b) for n in lhs.nodes if isinstance(n, MulNode) and isinstance(n.b, int) and n.b > 0]
  if not muls:
    return None
  g = math.gcd(b, *[c for _, c in muls])
  rest = Node.sum([n for n in lhs.nodes if not (isinstance(n, MulNode) and isinstance(n.b, int) and n.b > 0)])
  if g <= 1 or rest.min < 0 or rest.max >= g:
    return None
  return Node.sum([a * (c // g) for a, c in muls]) < b // g


def _flat(nodes: list[Node], kind: type) -> list[Node]:
  out: list[Node] = []
  for n in nodes:
    out.extend(_flat(n.nodes, kind) if isinstance(n, kind) else [n])  # type: ignore[attr-defined]
  return out


class NumNode(Node):
  def __init__(self, num: int) -> None:
    assert isinstance(num, int), f"NumNode of {type(num).__name__}"
    self.b, self.min, self.max = num, num, num

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return self

  def __int__(self) -> int:
    return self.b

  def __hash__(self) -> int:  # equal to the int it equals, as a dict key or set member
    return hash(self.b)

  def _mul_int(self, b: int) -> Node:
    return NumNode(self.b * b)


class Variable(Node):
  """A named integer in [min, max]; `bind(val)` gives it a value for one run (the kernel stays symbolic)."""

  def __new__(cls, expr: str, nmin: int, nmax: int) -> Any:
    if nmin == nmax:
      return NumNode(nmin)
    return super().__new__(cls)

  def __getnewargs__(self) -> tuple[str, int, int]:
    return (self.expr, self.min, self.max)

  def __init__(self, expr: str, nmin: int, nmax: int) -> None:
    if not (isinstance(nmin, int) and isinstance(nmax, int) and 0 <= nmin <= nmax):
      raise ValueError(f"Variable {expr} needs int bounds with 0 <= min <= max, got [{nmin}, {nmax}]")
    self.expr, self.min, self.max = expr, nmin, nmax
    self._val: int | None = None

  @property
  def val(self) -> int | None:
    return self._val

  def bind(self, val: int) -> Variable:
    if self._val is not None:
      raise RuntimeError(f"{self.expr} is already bound to {self._val}")
    if not (isinstance(val, int) and self.min <= val <= self.max):
      raise ValueError(f"{self.expr}={val} is outside its range [{self.min}, {self.max}]")
    ret = Variable(self.expr, self.min, self.max)
    ret._val = val
    return ret

  def unbind(self) -> tuple[Variable, int]:  # type: ignore[override]
    if self._val is None:
      raise RuntimeError(f"{self.expr} is not bound")
    return Variable(self.expr, self.min, self.max), self._val

  def vars(self) -> set[Variable]:
    return {self}

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return var_vals.get(self, self)


class OpNode(Node):
  def __init__(self, a: Node, b: sint) -> None:
    self.a, self.b = a, b
    self.min, self.max = self.get_bounds()

  def vars(self) -> set[Variable]:
    return self.a.vars() | (self.b.vars() if isinstance(self.b, Node) else set())

  def get_bounds(self) -> tuple[int, int]:
    raise NotImplementedError(type(self))


class LtNode(OpNode):
  def get_bounds(self) -> tuple[int, int]:
    return 0, 1

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return self.a.substitute(var_vals) < (self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b)


class MulNode(OpNode):
  def get_bounds(self) -> tuple[int, int]:
    bb = (self.b.min, self.b.max) if isinstance(self.b, Node) else (self.b, self.b)
    prods = [x * y for x in (self.a.min, self.a.max) for y in bb]
    return min(prods), max(prods)

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return self.a.substitute(var_vals) * (self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b)

  def _mul_int(self, b: int) -> Node:
    return self.a * (self.b * b)  # (x*c)*b = x*(c*b)

  def _div_int(self, b: int) -> Node:
    if isinstance(self.b, int):
      if self.b % b == 0:
        return self.a * (self.b // b)
      if self.b > 0 and b % self.b == 0:
        return self.a // (b // self.b)
    return DivNode(self, b)

  def _div_node(self, b: Node) -> Node:
    if self.b == b:  # (x*v)//v
      return self.a
    if self.a == b and isinstance(self.b, (int, Node)):
      return self.b if isinstance(self.b, Node) else NumNode(self.b)
    return super()._div_node(b)

  def _mod_int(self, b: int) -> Node:
    if isinstance(self.b, int):
      if self.b % b == 0:
        return NumNode(0)
      if self.b % b != self.b:
        return (self.a * (self.b % b)) % b
    return ModNode(self, b)

  def __mod__(self, b: sint) -> Node:
    if isinstance(b, Node) and not isinstance(b, NumNode) and (self.b == b or self.a == b):
      return NumNode(0)  # (x*v) % v
    return super().__mod__(b)


class DivNode(OpNode):
  def get_bounds(self) -> tuple[int, int]:
    if isinstance(self.b, int):
      return (self.a.min // self.b, self.a.max // self.b) if self.b > 0 else (self.a.max // self.b, self.a.min // self.b)
    # b > 0: floor(a/b) is monotonic in a, and in b for a fixed sign of a, so the extremes are at the corners
    corners = [a // b for a in (self.a.min, self.a.max) for b in (self.b.min, self.b.max)]
    return min(corners), max(corners)

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return self.a.substitute(var_vals) // (self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b)

  def _div_int(self, b: int) -> Node:
    if isinstance(self.b, int) and self.b > 0:
      return self.a // (self.b * b)  # (x//a)//b = x//(a*b)
    return DivNode(self, b)


class ModNode(OpNode):
  def get_bounds(self) -> tuple[int, int]:
    if isinstance(self.b, int):
      if self.a.min >= 0 and self.a.max < self.b:
        return self.a.min, self.a.max
      return 0, self.b - 1
    return 0, self.b.max - 1

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return self.a.substitute(var_vals) % (self.b.substitute(var_vals) if isinstance(self.b, Node) else self.b)

  def _mod_int(self, b: int) -> Node:
    if isinstance(self.b, int) and self.b % b == 0:
      return self.a % b  # (x%(k*b))%b = x%b
    return ModNode(self, b)

  def _div_int(self, b: int) -> Node:
    if isinstance(self.b, int) and self.b % b == 0:
      return (self.a // b) % (self.b // b)  # (x%(k*b))//b = (x//b)%k
    return DivNode(self, b)


class RedNode(Node):
  def __init__(self, nodes: list[Node]) -> None:
    self.nodes = nodes
    self.min, self.max = self.get_bounds()

  def vars(self) -> set[Variable]:
    return set().union(*[n.vars() for n in self.nodes])

  def get_bounds(self) -> tuple[int, int]:
    raise NotImplementedError(type(self))


class SumNode(RedNode):
  def get_bounds(self) -> tuple[int, int]:
    return sum(n.min for n in self.nodes), sum(n.max for n in self.nodes)

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return Node.sum([n.substitute(var_vals) for n in self.nodes])

  def _mul_int(self, b: int) -> Node:
    return Node.sum([n * b for n in self.nodes])

  def _div_int(self, b: int) -> Node:
    """Take out what divides exactly: (a*c + r)//c = a + r//c, and share a common factor with b."""
    divided: list[Node] = []
    rest: list[Node] = []
    g = b
    for n in self.nodes:
      if isinstance(n, NumNode):
        divided.append(NumNode(n.b // b))
        if n.b % b:
          rest.append(NumNode(n.b % b))
          g = math.gcd(g, n.b % b)
      elif isinstance(n, MulNode) and isinstance(n.b, int) and n.b % b == 0:
        divided.append(n.a * (n.b // b))
      else:
        rest.append(n)
        g = math.gcd(g, n.b) if isinstance(n, MulNode) and isinstance(n.b, int) else 1
    if not divided or all(d == 0 for d in divided):
      if 1 < g < b:  # (x*2 + y*4)//8 = (x + y*2)//4
        return Node.sum([n // g for n in rest]) // (b // g)
      return DivNode(self, b)
    return Node.sum(divided) + Node.sum(rest) // b

  def _mod_int(self, b: int) -> Node:
    new: list[Node] = []
    for n in self.nodes:
      if isinstance(n, NumNode):
        new.append(NumNode(n.b % b))
      elif isinstance(n, MulNode) and isinstance(n.b, int):
        new.append(n.a * (n.b % b))
      else:
        new.append(n)
    reduced = Node.sum(new)
    return reduced % b if reduced != self else ModNode(self, b)


class AndNode(RedNode):
  def get_bounds(self) -> tuple[int, int]:
    return (1 if all(n.min == 1 for n in self.nodes) else 0), (0 if any(n.max == 0 for n in self.nodes) else 1)

  def substitute(self, var_vals: Mapping[Variable, Node]) -> Node:
    return Node.ands([n.substitute(var_vals) for n in self.nodes])


# ---------- helpers over sint ----------

def sym_render(a: sint, ops: dict[type, Callable[..., Any]] | None = None, ctx: Any = None) -> str:
  return str(a) if isinstance(a, int) else str(a.render(ops, ctx))


def create_lt_node(lhs: Node, b: sint) -> Node:
  """`lhs < b`, simplified (tinygrad's name for it)."""
  return lhs < b


def create_ge_node(lhs: Node, b: sint) -> Node:
  return lhs >= b


def sym_infer(a: sint, var_vals: dict[Variable, int]) -> int:
  """The value of `a` with each Variable replaced by its value."""
  if isinstance(a, int):
    return a
  ret = a.substitute({k: NumNode(v) for k, v in var_vals.items()})
  if not isinstance(ret, NumNode):
    raise ValueError(f"{a} still has free variables {sorted(v.expr for v in ret.vars())} after substituting {var_vals}")
  return ret.b


def bound_value(a: sint) -> int:
  """The value of `a` with every Variable at the value it is bound to."""
  if isinstance(a, int):
    return a
  vals: dict[Variable, int] = {}
  for v in a.vars():
    if v.val is None:
      raise RuntimeError(f"{v.expr} has no value: bind it with .bind(n)")
    vals[v] = v.val
  return sym_infer(a, vals)


def smax(a: sint, b: sint) -> sint:
  """max(a, b) where the bounds decide it (they must)."""
  if isinstance(a, int) and isinstance(b, int):
    return max(a, b)
  if a == b:
    return a
  lo_a, hi_a = (a, a) if isinstance(a, int) else (a.min, a.max)
  lo_b, hi_b = (b, b) if isinstance(b, int) else (b.min, b.max)
  if lo_a >= hi_b:
    return a
  if lo_b >= hi_a:
    return b
  raise ValueError(f"max({a}, {b}) depends on the variables' values")


def smin(a: sint, b: sint) -> sint:
  return -smax(-a, -b)


def is_sym(x: Any) -> bool:
  return isinstance(x, Node) and not isinstance(x, NumNode)


# ---------- rendering ----------

def _render_var(self: Variable, ops: Any, ctx: Any) -> str:
  if ctx == "DEBUG":
    return f"{self.expr}[{self.min}-{self.max}]"
  if ctx == "REPR":
    return f"{self.expr}[{self.min}-{self.max}{'=' + str(self.val) if self.val is not None else ''}]"
  return self.expr


def _render_b(b: sint, ops: Any, ctx: Any) -> str:
  return str(b.render(ops, ctx)) if isinstance(b, Node) else str(b)


render_python: dict[type, Callable[..., Any]] = {
  Variable: _render_var,
  NumNode: lambda self, ops, ctx: str(self.b),
  MulNode: lambda self, ops, ctx: f"({self.a.render(ops, ctx)}*{_render_b(self.b, ops, ctx)})",
  DivNode: lambda self, ops, ctx: f"({self.a.render(ops, ctx)}//{_render_b(self.b, ops, ctx)})",
  ModNode: lambda self, ops, ctx: f"({self.a.render(ops, ctx)}%{_render_b(self.b, ops, ctx)})",
  LtNode: lambda self, ops, ctx: f"({self.a.render(ops, ctx)}<{_render_b(self.b, ops, ctx)})",
  SumNode: lambda self, ops, ctx: f"({'+'.join(sorted(str(n.render(ops, ctx)) for n in self.nodes))})",
  AndNode: lambda self, ops, ctx: f"({' and '.join(sorted(str(n.render(ops, ctx)) for n in self.nodes))})",
}
