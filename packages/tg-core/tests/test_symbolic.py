"""tg.shape.symbolic: the simplifications it promises, pinned, and a hypothesis property over random expressions.

The property builds every random expression twice, as a tg Node (whose operators simplify while building) and as a
plain Python function (floor // and Python %, the module's semantics), and checks that they agree, and that the
value lies in the Node's [min, max], for every assignment of the (small) variable ranges.
"""
import functools
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tg.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable, bound_value, sym_infer

a = Variable("a", 0, 7)
b = Variable("b", 0, 3)
c = Variable("c", 0, 30)
v = Variable("v", 1, 5)


def values(node, *vs):
  """Every value `node` takes over the full ranges of the variables `vs`."""
  return [sym_infer(node, dict(zip(vs, xs))) for xs in itertools.product(*[range(x.min, x.max + 1) for x in vs])]


# ---------- constants ----------


def test_constants_fold():
  assert NumNode(3) + NumNode(4) == NumNode(7)
  assert isinstance(NumNode(3) + 4, NumNode) and NumNode(3) + 4 == 7
  assert NumNode(3) - NumNode(5) == -2
  assert NumNode(3) * 4 == 12 and NumNode(3) * NumNode(4) == 12
  assert NumNode(7) // 2 == 3 and NumNode(-7) // 2 == -4  # floor division
  assert NumNode(7) % 3 == 1 and NumNode(-7) % 3 == 2  # Python modulo
  assert NumNode(7) // -2 == -4
  assert (NumNode(2) < 3) == NumNode(1)
  assert (NumNode(3) < 3) == NumNode(0)
  assert -NumNode(5) == -5


def test_num_node_equality_with_int():
  assert NumNode(3) == 3 and NumNode(3) != 4
  assert a != 0 and a != 7
  assert NumNode(1) != True  # noqa: E712  (a bool is not an int here)


def test_trivial_identities():
  assert a * 1 is a
  assert a * 0 == 0 and isinstance(a * 0, NumNode)
  assert a + 0 == a
  assert a // 1 == a
  assert a % 1 == 0
  assert a - a == 0
  assert a // a == 1 and a % a == 0


# ---------- sums ----------


def test_like_terms_collect():
  assert a * 2 + a * 3 == a * 5
  assert isinstance(a * 2 + a * 3, MulNode) and (a * 2 + a * 3).render() == "(a*5)"
  assert a + a - a == a
  assert a + a == a * 2
  assert a * 3 - a * 3 == 0
  assert (a * 2 + b + a * 3 + 1 - b).render() == "((a*5)+1)"
  assert (a + 1) + (a + 2) == a * 2 + 3


def test_sum_flattens_and_folds_constants():
  s = (a + 1) + (b + 2) + 3
  assert isinstance(s, SumNode) and s.render() == "(6+a+b)"
  assert len(s.nodes) == 3


def test_sum_times_int_distributes():
  assert (a + b) * 3 == a * 3 + b * 3
  assert ((a + 2) * 2).render() == "((a*2)+4)"


def test_mul_of_mul_folds():
  assert (a * 2) * 3 == a * 6
  neg = -a
  assert -neg == a
  assert (a * -1) * -1 == a


# ---------- division and modulo by an int ----------


def test_div_mod_take_out_multiples():
  assert (a * 4 + b) // 4 == a  # b in [0, 3]
  assert (a * 4 + b) % 4 == b
  assert (a * 4 + b + 4) // 4 == a + 1
  assert (a * 4 + b + 4) % 4 == b
  assert (a * 8 + b * 2) // 2 == a * 4 + b
  assert (a * 8 + c) // 4 == a * 2 + c // 4


def test_div_mod_common_factor():
  x = Variable("x", 0, 10)
  y = Variable("y", 0, 10)
  assert (x * 2 + y * 4) // 8 == (x + y * 2) // 4


def test_nested_div_mod():
  assert (c // 2) // 3 == c // 6
  assert ((c // 2) // 3).render() == "(c//6)"
  assert (c % 8) % 4 == c % 4
  assert (c % 12) // 4 == (c // 4) % 3


def test_mul_mod_reduces_coefficient():
  assert (a * 6) % 4 == (a * 2) % 4
  assert (a * 8) % 4 == 0
  assert (a * 6) // 3 == a * 2
  assert (a * 2) // 4 == a // 2


def test_div_mod_decided_by_bounds():
  assert b // 4 == 0 and isinstance(b // 4, NumNode)
  assert (b + 4) // 4 == 1
  assert b % 4 == b
  assert (b + 8) % 4 == b  # all in one bucket: a shift
  assert isinstance(c // 2, DivNode) and isinstance(c % 7, ModNode)


def test_div_by_negative_int():
  assert (c // -2) == (-c) // 2
  assert values(c // -2, c) == [x // -2 for x in range(31)]


def test_div_mod_errors():
  with pytest.raises(ZeroDivisionError):
    a // 0
  with pytest.raises(ValueError):
    a % 0
  with pytest.raises(ValueError):
    a % -3
  with pytest.raises(ValueError):
    a // b  # b may be 0
  with pytest.raises(ValueError):
    a % b


# ---------- division and modulo by a Variable ----------


def test_div_mod_by_variable_where_safe():
  assert (a * v) // v == a
  assert (v * a) // v == a
  assert (a * v) % v == 0
  assert (v * a) % v == 0
  assert isinstance(a // v, DivNode) and isinstance(a % v, ModNode)
  assert values(a // v, a, v) == [x // y for x in range(8) for y in range(1, 6)]
  assert values(a % v, a, v) == [x % y for x in range(8) for y in range(1, 6)]


# ---------- comparisons ----------


def test_comparisons_decided_by_bounds():
  assert (a < 10) == NumNode(1) and isinstance(a < 10, NumNode)
  assert (a < 8) == 1
  assert (a < 0) == NumNode(0)
  assert (a >= 0) == 1 and (a > 7) == 0 and (a <= 7) == 1


def test_comparison_moves_constants():
  assert ((a + 3) < 5) == (a < 2)
  assert ((a + 3) < 5).render() == "(a<2)"
  assert (a * 3 < 7) == (a < 3)  # x*c < b is x < ceil(b/c)
  assert (a < b) == (a - b < 0)
  assert isinstance(a < 3, LtNode)


def test_comparison_values():
  for node, fn in [(a < 3, lambda x: x < 3), (a <= 3, lambda x: x <= 3), (a > 3, lambda x: x > 3), (a >= 3, lambda x: x >= 3)]:
    assert values(node, a) == [int(fn(x)) for x in range(8)]


# ---------- conjunctions ----------


def test_ands():
  assert Node.ands([a < 10, c < 5]) == (c < 5)  # a < 10 always holds
  assert Node.ands([a < 3, c < 5, a < 0]) == 0  # a < 0 never does
  assert isinstance(Node.ands([a < 3, c < 5, a < 0]), NumNode)
  assert Node.ands([a < 10, NumNode(1)]) == 1
  assert Node.ands([]) == 1
  both = Node.ands([a < 3, c < 5])
  assert isinstance(both, AndNode) and both.render() == "((a<3) and (c<5))"
  assert Node.ands([both, a < 3]) == both  # nested conjunctions flatten, duplicates drop
  assert Node.ands([both, a < 0]) == 0
  assert values(both, a, c) == [int(x < 3 and y < 5) for x in range(8) for y in range(31)]


# ---------- bounds of each node type ----------


@pytest.mark.parametrize("node, vs", [
  (NumNode(-4), ()),
  (a, (a,)),
  (a * 3, (a,)),
  (a * -2, (a,)),
  (a * v, (a, v)),
  ((a - 3) * v, (a, v)),
  ((a - 3) * (v - 2), (a, v)),
  (c // 4, (c,)),
  ((c - 5) // 4, (c,)),
  (a // v, (a, v)),
  ((a - 5) // v, (a, v)),
  (c % 7, (c,)),
  ((c - 9) % 7, (c,)),
  (a % v, (a, v)),
  (a < 3, (a,)),
  (a + c, (a, c)),
  (a - c, (a, c)),
  (Node.ands([a < 3, c < 5]), (a, c)),
])
def test_bounds(node, vs):
  vals = values(node, *vs)
  assert node.min <= min(vals) and max(vals) <= node.max, f"{node!r}: values in [{min(vals)}, {max(vals)}], bounds [{node.min}, {node.max}]"


def test_bounds_exact_for_simple_nodes():
  assert (a.min, a.max) == (0, 7)
  assert ((a * 3).min, (a * 3).max) == (0, 21)
  assert ((a * -2).min, (a * -2).max) == (-14, 0)
  assert ((a * v).min, (a * v).max) == (0, 35)
  assert ((c // 4).min, (c // 4).max) == (0, 7)
  assert ((c % 7).min, (c % 7).max) == (0, 6)
  assert ((a % v).min, (a % v).max) == (0, 4)
  assert ((a < 3).min, (a < 3).max) == (0, 1)
  assert ((a + c).min, (a + c).max) == (0, 37)
  assert ((a - c).min, (a - c).max) == (-30, 7)
  both = Node.ands([a < 3, c < 5])
  assert (both.min, both.max) == (0, 1)


def test_bounds_div_by_variable_of_negative_numerator():
  x = (c - 40) // v  # values in [-40, -2]: -10 // 5 == -2
  vals = values(x, c, v)
  assert x.min <= min(vals) and max(vals) <= x.max, f"{x!r}: values in [{min(vals)}, {max(vals)}], bounds [{x.min}, {x.max}]"


def test_comparison_of_div_by_variable_of_negative_numerator():
  x = ((c - 40) // v) < -5
  assert values(x, c, v) == [int((y - 40) // w < -5) for y in range(31) for w in range(1, 6)], f"{x!r}"


# ---------- Variables ----------


def test_variable_min_eq_max_is_num_node():
  x = Variable("x", 3, 3)
  assert isinstance(x, NumNode) and x == 3


def test_variable_bad_bounds():
  with pytest.raises(ValueError):
    Variable("x", -1, 3)
  with pytest.raises(ValueError):
    Variable("x", 4, 3)


def test_bind_unbind_round_trip():
  n = Variable("n", 1, 6)
  bn = n.bind(4)
  assert n.val is None and bn.val == 4
  assert bn == n and hash(bn) == hash(n)  # bound compares equal to unbound
  u, val = bn.unbind()
  assert u == n and u.val is None and val == 4
  assert bound_value(bn * 2 + 1) == 9
  with pytest.raises(RuntimeError):
    bn.bind(5)  # already bound
  with pytest.raises(RuntimeError):
    n.unbind()  # not bound
  with pytest.raises(RuntimeError):
    bound_value(n * 2)


@pytest.mark.parametrize("val", [0, 7, -1, 100])
def test_bind_out_of_range(val):
  with pytest.raises(ValueError):
    Variable("n", 1, 6).bind(val)


def test_bind_edges():
  assert Variable("n", 1, 6).bind(1).val == 1 and Variable("n", 1, 6).bind(6).val == 6


def test_node_unbind():
  n = Variable("n", 1, 6)
  expr, var_vals = (n.bind(3) * 4 + a).unbind()
  assert var_vals == {n: 3}
  assert all(x.val is None for x in expr.vars())
  assert sym_infer(expr, {**var_vals, a: 2}) == 14


def test_sym_infer():
  assert sym_infer(a * 4 + c, {a: 2, c: 5}) == 13
  assert sym_infer(7, {}) == 7
  assert sym_infer((c // 4) % 3, {c: 29}) == (29 // 4) % 3
  assert sym_infer(Node.ands([a < 3, c < 5]), {a: 2, c: 4}) == 1
  assert sym_infer(a * c, {a: 3, c: 4}) == 12
  with pytest.raises(ValueError):
    sym_infer(a * c, {a: 3})  # c is free


def test_substitute_partial():
  assert (a * 4 + c).substitute({a: NumNode(2)}) == c + 8
  assert (a * 4 + c).substitute({a: b}) == b * 4 + c


# ---------- rendering ----------


def test_render():
  assert (a * 4 + b).render() == "((a*4)+b)"
  assert ((a * 4 + c) // 3).render() == "(((a*4)+c)//3)"
  assert (c % 5).render() == "(c%5)"
  assert (a < 3).render() == "(a<3)"
  assert (a * v).render() == "(a*v)"
  assert NumNode(-3).render() == "-3"
  assert repr(a) == "a[0-7]" and repr(Variable("n", 1, 6).bind(2)) == "n[1-6=2]"
  assert repr(a * 4 + b) == "((a[0-7]*4)+b[0-3])"


# ---------- property: random expressions agree with Python ----------

VARS = {"a": Variable("a", 0, 7), "b": Variable("b", 1, 5), "c": Variable("c", 0, 12)}


@functools.cache  # building the strategy is costly: once per set of names
def expr_trees(names):
  """Expression trees as nested tuples over the Variables `names` and small ints."""
  num = st.tuples(st.just("num"), st.integers(-4, 9))
  leaves = st.sampled_from(names * 2 + ("num",)).flatmap(lambda n: num if n == "num" else st.just(("var", n)))  # mostly variables

  def extend(sub):
    return st.one_of(
      st.tuples(st.just("add"), sub, sub),
      st.tuples(st.just("sub"), sub, sub),
      st.tuples(st.just("addi"), sub, st.integers(-6, 9)),  # node + int
      st.tuples(st.just("rsub"), sub, st.integers(-6, 9)),  # int - node
      st.tuples(st.just("muli"), sub, st.integers(-3, 4)),
      st.tuples(st.just("mul"), sub, sub),
      st.tuples(st.just("div"), sub, st.integers(1, 8)),
      st.tuples(st.just("mod"), sub, st.integers(1, 8)),
      st.tuples(st.just("divpat"), sub, sub, st.integers(1, 8)),  # (x*k + y) // k
      st.tuples(st.just("modpat"), sub, sub, st.integers(1, 8)),  # (x*k + y) % k
    )
  return st.recursive(leaves, extend, max_leaves=16)


@st.composite
def full_trees(draw, names):
  """An expression tree that uses every Variable in `names` (the missing ones are joined on at the root)."""
  x = draw(expr_trees(names))
  for n in sorted(set(names) - var_names(x)):
    x = (draw(st.sampled_from(["add", "sub", "mul"])), x, ("var", n))
  return x


@st.composite
def comparisons(draw, names):
  """`x < k`, `x >= k` or `x < y`. k is drawn around the bounds of x (as tg has them), so that the bounds alone
  don't decide most comparisons; it is a constant of the tree all the same, the same in both builds."""
  op = draw(st.sampled_from(["lt", "ge", "ltx"]))
  x = draw(full_trees(names))
  if op == "ltx":
    return op, x, draw(expr_trees(names))
  node = to_node(x)
  lo, hi = (max(-100, min(100, e)) for e in (node.min, node.max))
  return op, x, draw(st.integers(lo - 1, hi + 1))


@st.composite
def expressions(draw):
  names = draw(st.sampled_from([("a", "b"), ("a", "c"), ("b", "c"), ("a", "b", "c")]))
  kind = draw(st.sampled_from(["expr", "expr", "cmp", "ands"]))
  if kind == "expr":
    return draw(full_trees(names))
  if kind == "cmp":
    return draw(comparisons(names))
  return ("ands", *draw(st.lists(comparisons(names), min_size=1, max_size=3)))


def to_node(t):
  """The tree as a tg Node, built with the operators (so simplified as it builds)."""
  op, *args = t
  if op == "var":
    return VARS[args[0]]
  if op == "num":
    return NumNode(args[0])
  if op == "ands":
    return Node.ands([to_node(x) for x in args])
  x = to_node(args[0])
  k = args[1]
  if op == "add":
    return x + to_node(k)
  if op == "sub":
    return x - to_node(k)
  if op == "addi":
    return x + k
  if op == "rsub":
    return k - x
  if op == "muli":
    return x * k
  if op == "mul":
    return x * to_node(k)
  if op == "div":
    return x // k
  if op == "mod":
    return x % k
  if op == "divpat":
    return (x * args[2] + to_node(k)) // args[2]
  if op == "modpat":
    return (x * args[2] + to_node(k)) % args[2]
  if op == "lt":
    return x < k
  if op == "ge":
    return x >= k
  if op == "ltx":
    return x < to_node(k)
  raise AssertionError(op)


def to_fn(t):
  """The tree as a Python function of {name: value}, with Python's floor // and %."""
  op, *args = t
  if op == "var":
    return lambda env: env[args[0]]
  if op == "num":
    return lambda env: args[0]
  if op == "ands":
    fs = [to_fn(x) for x in args]
    return lambda env: int(all(f(env) for f in fs))
  f = to_fn(args[0])
  k = args[1]
  g = to_fn(k) if isinstance(k, tuple) else None
  return {
    "add": lambda env: f(env) + g(env),
    "sub": lambda env: f(env) - g(env),
    "addi": lambda env: f(env) + k,
    "rsub": lambda env: k - f(env),
    "muli": lambda env: f(env) * k,
    "mul": lambda env: f(env) * g(env),
    "div": lambda env: f(env) // k,
    "mod": lambda env: f(env) % k,
    "divpat": lambda env: (f(env) * args[2] + g(env)) // args[2],
    "modpat": lambda env: (f(env) * args[2] + g(env)) % args[2],
    "lt": lambda env: int(f(env) < k),
    "ge": lambda env: int(f(env) >= k),
    "ltx": lambda env: int(f(env) < g(env)),
  }[op]


def var_names(t):
  if t[0] == "var":
    return {t[1]}
  return set().union(*[var_names(x) for x in t[1:] if isinstance(x, tuple)])


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions())
def test_random_expressions_match_python(t):
  node, fn = to_node(t), to_fn(t)
  assert isinstance(node, Node)
  names = sorted(var_names(t))
  for xs in itertools.product(*[range(VARS[n].min, VARS[n].max + 1) for n in names]):
    env = dict(zip(names, xs))
    want = fn(env)
    got = sym_infer(node, {VARS[n]: x for n, x in env.items()})
    assert got == want, f"{node!r} at {env}: tg {got}, python {want}"
    assert node.min <= want <= node.max, f"{node!r} at {env}: value {want} outside bounds [{node.min}, {node.max}]"
