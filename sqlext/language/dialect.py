"""Spark SQL as sqlext reads it: sqlglot's Spark dialect plus the syntax Spark has and sqlglot lacks.

Two constructs are added, each as a real expression node so rules can match them:

* table arguments of table-valued functions::

      f(input => TABLE(t) PARTITION BY k ORDER BY ts, x => 'y')
      f(TABLE(SELECT ...) WITH SINGLE PARTITION)
      f(TABLE(VALUES (1, 'a') AS t(id, name)))

  parsed into :class:`TableArgument` (Spark's grammar: several partition or sort expressions
  must be parenthesised, ``PARTITION BY (a, b)``), and
* the recursion limit of a recursive CTE::

      WITH RECURSIVE r(c) MAX RECURSION LEVEL 50 AS (...)

  kept on the CTE as ``max_recursion_level``.

Everything else is sqlglot's Spark dialect unchanged.

>>> import sqlglot
>>> sqlglot.parse_one("SELECT * FROM F(input => TABLE(t) PARTITION BY k ORDER BY v)", read=SparkExt).sql(SparkExt)
'SELECT * FROM F(input => TABLE(t) PARTITION BY k ORDER BY v)'
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType

from sqlext.errors import SqlextError


class TableArgument(exp.Expression):
    """``TABLE(relation) [WITH SINGLE PARTITION | PARTITION BY ...] [ORDER BY ...]``.

    ``this`` is a :class:`sqlglot.exp.Table` or a query; ``partition_by`` a list of
    expressions; ``order`` a list of :class:`sqlglot.exp.Ordered`.
    """

    arg_types = {"this": True, "partition_by": False, "order": False, "single_partition": False}

    @property
    def relation(self) -> exp.Expression:
        return self.this


class SparkExt(Spark):
    """Spark dialect that also reads table arguments and ``MAX RECURSION LEVEL``."""

    class Tokenizer(Spark.Tokenizer):
        # Spark reads '' inside a string literal as one quote ('it''s' is "it's"), as standard
        # SQL does; sqlglot's Spark dialect ended the string there and read a second literal
        STRING_ESCAPES = [*Spark.Tokenizer.STRING_ESCAPES, "'"]

    class Parser(Spark.Parser):
        def _parse_function_call(self, functions=None, anonymous=False, optional_parens=True, any_token=False):
            if (
                self._curr
                and self._curr.token_type == TokenType.TABLE
                and self._next
                and self._next.token_type == TokenType.L_PAREN
            ):
                return self._parse_table_argument()
            return super()._parse_function_call(functions, anonymous, optional_parens, any_token)

        def _parse_table_argument(self) -> TableArgument:
            token = self._curr
            self._advance(2)  # TABLE (
            if self._curr.token_type in self.SUBQUERY_TOKENS or self._curr.token_type == TokenType.WITH:
                relation = self._parse_statement()
            elif self._curr.token_type == TokenType.VALUES:
                # Spark's TABLE(VALUES (1, 2) AS t(a, b)): the inline table is a query there, as
                # in a CTE's body. Read it as the query it means, SELECT * FROM VALUES ..., so
                # every rule sees the one form of a query argument
                relation = self._parse_statement()
                if isinstance(relation, exp.Values):
                    relation = self._values_to_select(relation)
            else:
                relation = self._parse_table_parts()
            self._match_r_paren()

            single = False
            partition_by: list[exp.Expression] = []
            order: list[exp.Expression] = []
            if self._match_text_seq("WITH", "SINGLE", "PARTITION"):
                single = True
            elif self._match(TokenType.PARTITION_BY) or self._match_text_seq("DISTRIBUTE", "BY"):
                partition_by = self._parse_one_or_wrapped(self._parse_disjunction)
            if self._match(TokenType.ORDER_BY) or self._match_text_seq("SORT", "BY"):
                order = self._parse_one_or_wrapped(self._parse_ordered)

            node = self.expression(
                TableArgument(
                    this=relation,
                    partition_by=partition_by or None,
                    order=order or None,
                    single_partition=single or None,
                )
            )
            return node.update_positions(token)

        def _parse_one_or_wrapped(self, parse_one) -> list[exp.Expression]:
            # Spark requires parentheses around two or more items, so a comma after a
            # single item belongs to the enclosing argument list.
            if self._match(TokenType.L_PAREN):
                items = self._parse_csv(parse_one)
                self._match_r_paren()
                return items
            item = parse_one()
            return [item] if item else []

        def _parse_cte(self):
            index = self._index
            alias = self._parse_table_alias(self.ID_VAR_TOKENS)
            if not alias or not alias.this:
                self.raise_error("Expected CTE to have alias")
            key_expressions = (
                self._parse_wrapped_id_vars() if self._match_text_seq("USING", "KEY") else None
            )
            level = None
            if self._match_text_seq("MAX", "RECURSION", "LEVEL"):
                level = self._parse_number()
                if level is None:
                    self.raise_error("Expected a number after MAX RECURSION LEVEL")
            if not self._match(TokenType.ALIAS):
                self._retreat(index)
                return None
            cte = self.expression(
                exp.CTE(
                    this=self._parse_wrapped(self._parse_statement),
                    alias=alias,
                    key_expressions=key_expressions,
                ),
                comments=self._prev_comments,
            )
            if level is not None:
                cte.set("max_recursion_level", level)
            if isinstance(cte.this, exp.Values):
                cte.set("this", self._values_to_select(cte.this))
            return cte

    class Generator(Spark.Generator):
        TRANSFORMS = {
            **Spark.Generator.TRANSFORMS,
            TableArgument: lambda self, e: self.tableargument_sql(e),
        }
        # Spark scopes a WITH inside a subquery or a CTE body to that query (an inner name
        # shadows an outer one). sqlglot's Hive family hoists nested CTEs to the top level,
        # which lets a shadowing CTE capture the outer query's references: keep them in place.
        EXPRESSIONS_WITHOUT_NESTED_CTES: set = set()

        def tableargument_sql(self, expression: TableArgument) -> str:
            relation = expression.this
            inner = self.sql(relation)
            sql = f"TABLE({inner})"
            if expression.args.get("single_partition"):
                sql += " WITH SINGLE PARTITION"
            partition = expression.args.get("partition_by") or []
            if partition:
                sql += f" PARTITION BY {self._one_or_wrapped(partition)}"
            order = expression.args.get("order") or []
            if order:
                sql += f" ORDER BY {self._one_or_wrapped(order)}"
            return sql

        def _one_or_wrapped(self, items: list[exp.Expression]) -> str:
            text = ", ".join(self.sql(item) for item in items)
            return text if len(items) == 1 else f"({text})"

        def lateral_sql(self, expression: exp.Lateral) -> str:
            # sqlglot writes a LATERAL VIEW's table name as it is, unquoted: a name holding a
            # space, a quote or a backtick would come out as other SQL. Quote it as an identifier.
            alias = expression.args.get("alias")
            if expression.args.get("view") and isinstance(alias, exp.TableAlias) \
                    and isinstance(alias.this, exp.Identifier):
                expression = expression.copy()
                name = self.sql(expression.args["alias"].this)
                expression.args["alias"].set("this", exp.Identifier(this=name, quoted=False))
            return super().lateral_sql(expression)

        def cte_sql(self, expression: exp.CTE) -> str:
            sql = super().cte_sql(expression)
            level = expression.args.get("max_recursion_level")
            if level is None:
                return sql
            alias = self.sql(expression, "alias")
            return f"{alias} MAX RECURSION LEVEL {self.sql(level)}{sql[len(alias):]}"


def scan(source: str) -> tuple[list[int], int | None]:
    r"""Read ``source`` as Spark's lexer does, as far as quotes and comments go: the offsets of
    the semicolons outside strings, quoted identifiers and comments, and the offset of a quote
    left open at the end (None if every one is closed).

    >>> scan("SELECT 'a;''b' AS `c;`; -- ;\nSELECT 'd")
    ([22], 36)
    """
    found: list[int] = []
    i = 0
    n = len(source)
    quote: str | None = None
    opened = 0
    while i < n:
        ch = source[i]
        if quote:
            if ch == "\\" and quote in "'\"":
                i += 2
                continue
            if ch == quote and source.startswith(quote, i + 1):  # a quote written twice
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote, opened = ch, i
        elif source.startswith("--", i):
            end = source.find("\n", i)
            i = n if end == -1 else end
            continue
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end == -1 else end + 2
            continue
        elif ch == ";":
            found.append(i)
        i += 1
    return found, (opened if quote else None)


def parse(sql: str) -> list[exp.Expression]:
    """Parse one or more statements in sqlext's Spark dialect."""
    return [e for e in SparkExt().parse(sql) if e is not None]


def parse_one(sql: str) -> exp.Expression:
    statements = parse(sql)
    if len(statements) != 1:
        raise ValueError(f"expected one statement, got {len(statements)}")
    return statements[0]


def to_sql(expression: exp.Expression, pretty: bool = False) -> str:
    return expression.sql(dialect=SparkExt, pretty=pretty)


def is_stream(node) -> bool:
    """Whether ``node`` is ``STREAM(name)`` in a FROM clause or a TABLE(...) argument: a
    source read as a stream (the spelling of Spark Declarative Pipelines)."""
    return isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous) \
        and node.this.name.upper() == "STREAM"


# the named arguments STREAM(...) takes after the name it reads (see sqlext.streaming.sources)
STREAM_OPTIONS = ("format", "order_by")


def stream_argument(call: exp.Anonymous) -> exp.Expression:
    """The one table or view name ``STREAM(...)`` takes (a name, a dotted name or a string),
    before its named arguments (:func:`stream_options`)."""
    names = [e for e in call.expressions if not isinstance(e, (exp.Kwarg, exp.PropertyEQ))]
    if len(names) != 1 or not isinstance(names[0], (exp.Column, exp.Table, exp.Literal)) \
            or call.expressions[0] is not names[0]:
        raise SqlextError("UNSUPPORTED_STREAM", function="sqlext stream", what=to_sql(call),
                          reason="STREAM takes one table or view name, then optional named arguments",
                          fix="Write STREAM(my_changes) or STREAM(my_changes, format => 'debezium').")
    stream_options(call)  # checked here too, so that every reader of the name sees a valid call
    return names[0]


def stream_options(call: exp.Anonymous) -> dict[str, str]:
    """The named arguments of ``STREAM(name, format => 'debezium', order_by => 'source.lsn')``,
    by lower-case name: each one of :data:`STREAM_OPTIONS`, given once, a string literal.

    >>> stream_options(parse_one("SELECT * FROM STREAM(e, FORMAT => 'iceberg')").find(exp.Anonymous))
    {'format': 'iceberg'}
    """
    options: dict[str, str] = {}
    for item in call.expressions:
        if not isinstance(item, (exp.Kwarg, exp.PropertyEQ)):
            continue
        name = item.this.name.lower()
        if name not in STREAM_OPTIONS:
            raise SqlextError("UNKNOWN_ARGUMENT", function="STREAM", argument=item.this.name,
                              allowed=", ".join(STREAM_OPTIONS))
        if name in options:
            raise SqlextError("DUPLICATE_ARGUMENT", function="STREAM", argument=name)
        value = item.expression
        if not (isinstance(value, exp.Literal) and value.is_string):
            raise SqlextError("INVALID_ARGUMENT_TYPE", function="STREAM", argument=name, expected="a string literal",
                              value=to_sql(value), fix=f"Write {name} => '...'.")
        options[name] = value.this
    return options


def batch_form(sql: str) -> str:
    """The same statement over the whole of each ``STREAM(name)`` source read as a table: the
    batch query whose result the incremental runs add up to. ``STREAM``'s named arguments go
    to the function that reads it where every table argument of that call is a ``STREAM``
    with the same ones (the function takes ``format`` and ``order_by`` itself, and does not
    already give them); elsewhere the table is read as it is.

    >>> batch_form("SELECT * FROM F(input => TABLE(STREAM(`a b`, format => 'iceberg')), key => 'id')")
    "SELECT * FROM F(input => TABLE(`a b`), key => 'id', format => 'iceberg')"
    """
    tree = parse_one(sql)
    for table in list(tree.find_all(exp.Table)):
        _stream_options_to_call(table)
    for table in list(tree.find_all(exp.Table)):
        if not is_stream(table):
            continue
        argument = stream_argument(table.this)
        if isinstance(argument, exp.Column):
            plain = exp.Table(this=argument.this.copy(),
                              db=argument.args["table"].copy() if argument.args.get("table") else None)
        elif isinstance(argument, exp.Table):
            plain = argument.copy()
        else:
            plain = exp.to_table(argument.this)
        if table.args.get("alias"):
            plain.set("alias", table.args["alias"].copy())
        table.replace(plain)
    return to_sql(tree)


def _stream_options_to_call(table: exp.Table) -> None:
    """``F(input => TABLE(STREAM(x, format => 'debezium')))`` -> ``F(input =>
    TABLE(STREAM(x)), format => 'debezium')``, where every table argument of the call is a
    ``STREAM`` with the same named arguments, ``format`` among them."""
    node = table.this
    if not isinstance(node, (exp.Anonymous, exp.Func)) or is_stream(table):
        return
    values = [e.expression if isinstance(e, (exp.Kwarg, exp.PropertyEQ)) else e for e in node.expressions]
    inputs = [v.this for v in values if isinstance(v, TableArgument)]
    if not inputs or not all(is_stream(t) for t in inputs):
        return
    options = [stream_options(t.this) for t in inputs]
    if "format" not in options[0] or any(o != options[0] for o in options):
        return
    named = {e.this.name.lower() for e in node.expressions if isinstance(e, (exp.Kwarg, exp.PropertyEQ))}
    for name, value in options[0].items():
        if name not in named:
            node.append("expressions", exp.Kwarg(this=exp.var(name), expression=exp.Literal.string(value)))
    for stream in inputs:
        stream.this.set("expressions", [stream_argument(stream.this)])


# Spark's numeric type names as ``DataType.simpleString()`` and sqlglot write them (with the
# aliases sqlglot may print), and the width in bits of each integral one.
INTEGRAL_BITS = {"tinyint": 8, "byte": 8, "smallint": 16, "short": 16, "int": 32, "integer": 32,
                 "bigint": 64, "long": 64}
INTEGRAL = frozenset(INTEGRAL_BITS)
FRACTIONAL = frozenset({"float", "double", "real"})


def is_numeric(type_name: str) -> bool:
    """An integral, fractional or decimal type (``decimal(10,2)`` included)."""
    return type_name in INTEGRAL or type_name in FRACTIONAL or type_name.startswith("decimal")


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """The terms of a condition joined by ``AND``, each without its outer parentheses (a
    ``WHERE`` wrapper is looked through); none for no condition.

    >>> [c.sql() for c in conjuncts(parse_one("SELECT 1 WHERE (a = 1 AND (b)) AND (c OR d)").args["where"])]
    ['a = 1', 'b', 'c OR d']
    """
    if node is None:
        return []
    if isinstance(node, exp.Where):
        node = node.this
    node = node.unnest()
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    return [node]
