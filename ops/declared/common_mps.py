"""PyTorch's own MPS test expectations, read from common_mps.py as data.

`torch/testing/_internal/common_mps.py` decorates OpInfo tests for MPS:
dicts of expected failures and skips keyed by OpInfo name + variant
("divno_rounding_mode"), with a dtype list or None (every dtype), and a loop
over the ops that applies them, some only on older macOS, plus blanket rules
(float64 fails everywhere; complex fails unless the op is listed).

The file is never imported or executed (it needs an MPS device and the test
suite). Its syntax tree is read instead, and the loop's conditions are
evaluated by a small interpreter that knows only what such conditions use:
list membership, the macOS version, literals and dtype names. The shape of the
lists changed across torch versions (lists added and removed, macOS gates in
the loop, in `if` blocks calling `.update`, or inside values as
`[...] if MACOS_VERSION < 14.0 else []`); reading conditions rather than list
names keeps the reader working across them.
"""
import ast
import itertools
from dataclasses import dataclass, field

from mpsprobe.errors import MpsprobeError

MODIFIERS = {
    "forward": "mps_ops_modifier",
    "grad": "mps_ops_grad_modifier",
    "error_inputs": "mps_ops_error_inputs_modifier",
}

# The two decorators the lists apply, as `predict` reports them. "skip" here is
# PyTorch's unittest.skip (the test does not run), not mpsprobe's status.
XFAIL_DECORATOR, SKIP_DECORATOR = "xfail", "skip"

# torch's dtype aliases, so `torch.double` reads as float64 without importing torch.
DTYPE_ALIASES = {
    "double": "float64", "cdouble": "complex128", "half": "float16", "float": "float32",
    "cfloat": "complex64", "chalf": "complex32", "long": "int64", "int": "int32",
    "short": "int16",
}

# Names the loop's conditions use, as a Mac running the MPS tests would see them.
MACOS_NAMES = ("MACOS_VERSION", "product_version")
# The modifier's own arguments, as the MPS consistency tests call it.
LOOP_NAMES = {"xfail_exclusion": [], "sparse": False, "device_type": "mps"}


class CommonMpsError(MpsprobeError):
    """The file is not a readable common_mps.py (or test_mps.py) of any known shape."""


class Unknown(Exception):
    """A condition that cannot be decided from the file alone."""


@dataclass
class Rule:
    """One DecorateInfo applied inside the loop over ops."""
    decorator: str              # "xfail" or "skip"
    conditions: list            # ast.expr: the enclosing `if` tests, all must hold
    dtypes: ast.expr            # the DecorateInfo's dtypes= (None: every dtype)
    bindings: dict              # {loop variable: [list names]} of inner `for x in [A, B]`
    line: int


@dataclass
class Modifier:
    name: str
    lists: dict = field(default_factory=dict)       # {NAME: ast.expr literal}
    updates: list = field(default_factory=list)     # [(condition or None, NAME, ast.expr)]
    rules: list = field(default_factory=list)


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def dtype_name(node):
    """'float32' for `torch.float32` / `torch.float`, else None."""
    dotted = _dotted(node) or ""
    if not dotted.startswith("torch.") or dotted.count(".") != 1:
        return None
    name = dotted.split(".", 1)[1]
    return DTYPE_ALIASES.get(name, name)


class Evaluator:
    """Evaluates the expressions common_mps.py uses, for one macOS version."""

    def __init__(self, macos, names=None):
        self.macos = macos
        self.names = dict(names or {})

    def __call__(self, node):
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise Unknown(ast.unparse(node))
        return method(node)

    def _Constant(self, node):
        return node.value

    def _Name(self, node):
        if node.id in MACOS_NAMES:
            return self.macos
        if node.id in self.names:
            return self.names[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise Unknown(node.id)

    def _Attribute(self, node):
        dtype = dtype_name(node)
        if dtype:
            return dtype
        raise Unknown(ast.unparse(node))

    def _List(self, node):
        return [self(e) for e in node.elts]

    _Tuple = _List

    def _Set(self, node):
        return {self(e): None for e in node.elts}

    def _Dict(self, node):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:                  # {**OTHER, ...}
                out.update(self(v))
            else:
                out[self(k)] = v           # values stay unevaluated: see value()
        return out

    def _Call(self, node):
        func = _dotted(node.func) or ""
        args = [self(a) for a in node.args]
        if func.endswith("is_macos13_or_newer"):
            minor = args[0] if args else 0
            return self.macos >= 13 + minor / 10
        if func.endswith("is_macos_or_newer") and len(args) == 2:
            return self.macos >= args[0] + args[1] / 10
        if func in ("set", "frozenset", "dict", "list") and len(args) <= 1:
            return {k: None for k in args[0]} if args and func in ("set", "frozenset") else (
                args[0] if args else {})
        raise Unknown(ast.unparse(node))

    def _IfExp(self, node):
        return self(node.body) if self(node.test) else self(node.orelse)

    def _UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            return not self(node.operand)
        if isinstance(node.op, ast.USub):
            return -self(node.operand)
        raise Unknown(ast.unparse(node))

    def _BoolOp(self, node):
        if isinstance(node.op, ast.And):
            return all(self(v) for v in node.values)
        return any(self(v) for v in node.values)

    def _Subscript(self, node):
        container = self(node.value)
        value = container[self(node.slice)]
        return self.value(value)

    def _Compare(self, node):
        left = self(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = self(right_node)
            ok = {ast.In: lambda: left in right, ast.NotIn: lambda: left not in right,
                  ast.Lt: lambda: left < right, ast.LtE: lambda: left <= right,
                  ast.Gt: lambda: left > right, ast.GtE: lambda: left >= right,
                  ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right,
                  }.get(type(op))
            if ok is None:
                raise Unknown(ast.unparse(node))
            if not ok():
                return False
            left = right
        return True

    def value(self, node):
        """A list entry's value: None (every dtype) or a list of dtype names."""
        if node is None or not isinstance(node, ast.AST):
            return node
        value = self(node)
        return None if value is None else list(value)


def _decorate_info(call):
    """(decorator, dtypes node) of a DecorateInfo(...) call, or None if it is neither."""
    if not call.args:
        return None
    target = call.args[0]
    target_name = _dotted(target.func if isinstance(target, ast.Call) else target) or ""
    if target_name.endswith("expectedFailure"):
        decorator = XFAIL_DECORATOR
    elif target_name.endswith("skip") or target_name.endswith("skipIf"):
        decorator = SKIP_DECORATOR
    else:
        return None
    dtypes = next((k.value for k in call.keywords if k.arg == "dtypes"), None)
    return decorator, dtypes


def _walk_loop(statements, conditions, bindings, rules):
    for stmt in statements:
        if isinstance(stmt, ast.If):
            _walk_loop(stmt.body, conditions + [stmt.test], bindings, rules)
            _walk_loop(stmt.orelse, conditions + [ast.UnaryOp(ast.Not(), stmt.test)],
                       bindings, rules)
        elif isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) \
                and isinstance(stmt.iter, (ast.List, ast.Tuple)):
            names = [e.id for e in stmt.iter.elts if isinstance(e, ast.Name)]
            _walk_loop(stmt.body, conditions, dict(bindings, **{stmt.target.id: names}), rules)
        else:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and (_dotted(node.func) or "").endswith("DecorateInfo"):
                    found = _decorate_info(node)
                    if found:
                        rules.append(Rule(found[0], list(conditions), found[1], dict(bindings),
                                          stmt.lineno))


def _is_ops_loop(stmt):
    return isinstance(stmt, ast.For) and isinstance(stmt.iter, ast.Name)


def _read_modifier(func):
    modifier = Modifier(func.name)

    def read_update(stmt, condition):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            if isinstance(call.func, ast.Attribute) and call.func.attr == "update" \
                    and isinstance(call.func.value, ast.Name) and call.args:
                modifier.updates.append((condition, call.func.value.id, call.args[0]))
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Subscript) \
                and isinstance(stmt.targets[0].value, ast.Name):
            entry = ast.Dict(keys=[stmt.targets[0].slice], values=[stmt.value])
            modifier.updates.append((condition, stmt.targets[0].value.id, entry))

    for stmt in func.body:
        target, value = None, None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign):
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name) and isinstance(value, (ast.Dict, ast.Set, ast.Call)) \
                and target.id.isupper():
            modifier.lists[target.id] = value
        elif isinstance(stmt, ast.If):
            for inner in stmt.body:
                read_update(inner, stmt.test)
            for inner in stmt.orelse:
                read_update(inner, ast.UnaryOp(ast.Not(), stmt.test))
        elif _is_ops_loop(stmt):
            _walk_loop(stmt.body, [], {}, modifier.rules)
        else:
            read_update(stmt, None)
    return modifier


def _find_functions(tree):
    """The first definition of each modifier: the one under `if mps.is_available()`."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for kind, name in MODIFIERS.items():
                if node.name == name and kind not in found and any(map(_is_ops_loop, node.body)):
                    found[kind] = node
    return found


class Expectations:
    """The expectations of one common_mps.py, evaluated for one macOS version."""

    def __init__(self, text, macos=26.0, filename="common_mps.py"):
        try:
            tree = ast.parse(text, filename=filename)
        except SyntaxError as e:
            raise CommonMpsError(f"{filename} is not Python this interpreter can read: {e}") from None
        functions = _find_functions(tree)
        if "forward" not in functions:
            raise CommonMpsError(
                f"{filename} defines no mps_ops_modifier with a loop over ops: "
                "not a common_mps.py of a known shape")
        self.macos = macos
        self.modifiers = {kind: _read_modifier(f) for kind, f in functions.items()}
        self.unknown = []             # conditions that could not be decided
        self.lists = {kind: self._effective_lists(m) for kind, m in self.modifiers.items()}

    def _effective_lists(self, modifier):
        """{NAME: {key: (dtypes or None, gate text or None)}}, updates applied when they hold."""
        ev = Evaluator(self.macos, LOOP_NAMES)
        lists = {}
        for name, node in modifier.lists.items():
            try:
                raw = ev(node)
            except Unknown as e:
                self.unknown.append(f"{name}: {e}")
                continue
            ev.names[name] = raw
            lists[name] = {k: (self._value(ev, v), _gate_of(v)) for k, v in raw.items()}
        for condition, name, node in modifier.updates:
            gate = ast.unparse(condition) if condition is not None else None
            try:
                holds = condition is None or bool(ev(condition))
                extra = ev(node)
            except Unknown as e:
                self.unknown.append(f"{name}.update if {gate}: {e}")
                continue
            if not isinstance(extra, dict):
                continue
            if holds and name in lists:
                lists[name].update({k: (self._value(ev, v), gate) for k, v in extra.items()})
            else:
                # Recorded but not in effect on this macOS: kept under its own name.
                gated = lists.setdefault(f"{name} [{gate}]", {})
                gated.update({k: (self._value(ev, v), gate) for k, v in extra.items()})
        return lists

    def _value(self, ev, node):
        try:
            return ev.value(node)
        except (Unknown, TypeError) as e:
            self.unknown.append(f"value {ast.unparse(node)}: {e}")
            return None

    def list_gates(self, kind="forward"):
        """{NAME: text of the extra loop condition under which the list applies}."""
        gates = {}
        for rule in self.modifiers[kind].rules:
            extra = [conj for c in rule.conditions for conj in _conjuncts(c)
                     if not _mentions_key(conj)]
            for name in _member_lists(rule):
                if extra:
                    gates[name] = " and ".join(dict.fromkeys(ast.unparse(e) for e in extra))
        return gates

    def entries(self, kind="forward"):
        """Every listed (list name, key, dtypes or None, gate), as written, macOS-gated or not."""
        gates = self.list_gates(kind)
        for name, entries in self.lists.get(kind, {}).items():
            base = name.split(" [", 1)[0]
            for key, (dtypes, gate) in entries.items():
                yield name, key, dtypes, " and ".join(g for g in (gates.get(base), gate) if g) or None

    def predict(self, key, dtypes):
        """{dtype: [(decorator, source), ...]} for the forward tests of op `key`."""
        lists = {name: {k: v[0] for k, v in entries.items()}
                 for name, entries in self.lists["forward"].items()}
        out = {d: [] for d in dtypes}
        for rule in self.modifiers["forward"].rules:
            names = list(rule.bindings)
            for combo in itertools.product(*(rule.bindings[n] for n in names)):
                env = dict(lists, key=key, **LOOP_NAMES)
                env.update({n: lists.get(v, {}) for n, v in zip(names, combo)})
                ev = Evaluator(self.macos, env)
                try:
                    if not all(ev(c) for c in rule.conditions):
                        continue
                    applies = ev.value(rule.dtypes)
                except Unknown as e:
                    self.unknown.append(f"line {rule.line}: {e}")
                    continue
                source = _source(rule, dict(zip(names, combo)), key, lists)
                for d in dtypes:
                    if applies is None or d in applies:
                        out[d].append((rule.decorator, source))
        return out


def _conjuncts(node):
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return [c for v in node.values for c in _conjuncts(v)]
    return [node]


def _mentions_key(node):
    return any(isinstance(n, ast.Name) and n.id in ("key", "xfail_exclusion")
               for n in ast.walk(node))


def _member_lists(rule):
    """Names of lists the rule tests `key in`, loop variables expanded."""
    names = []
    for c in rule.conditions:
        for n in ast.walk(c):
            if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and n.left.id == "key":
                for comp in n.comparators:
                    if isinstance(comp, ast.Name) and comp.id != "xfail_exclusion":
                        names.extend(rule.bindings.get(comp.id, [comp.id]))
    return names


def _source(rule, bound, key, lists):
    """Which list or blanket rule made `rule` apply to `key`."""
    positive, negative = [], []
    for c in rule.conditions:
        for n in ast.walk(c):
            if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and n.left.id == "key":
                for op, comp in zip(n.ops, n.comparators):
                    if not isinstance(comp, ast.Name) or comp.id == "xfail_exclusion":
                        continue
                    name = bound.get(comp.id, comp.id)
                    if isinstance(op, ast.In) and key in lists.get(name, {}):
                        positive.append(name)
                    elif isinstance(op, ast.NotIn):
                        negative.append(name)
    if positive:
        return positive[0]
    if negative:
        return "not in " + " or ".join(dict.fromkeys(negative))
    return "every op"


def _gate_of(node):
    """The macOS test inside a value like `[torch.int64] if MACOS_VERSION < 14.0 else []`."""
    if isinstance(node, ast.AST):
        for n in ast.walk(node):
            if isinstance(n, ast.IfExp):
                return f"value depends on {ast.unparse(n.test)}"
    return None
