"""A Spark physical plan printed as a topology, in the style of Kafka Streams'
``Topology#describe()`` that KIP-862 lists before and after its self-join rewrite.

Each shuffle cuts the plan into sub-topologies, as a repartition topic does in Kafka Streams:
the shuffle is the sink of the sub-topology below it and the source of the one above.
Operators that hold rows (sorts, windows, joins, aggregates, broadcasts, shuffles) list
their buffer under ``stores``, as Kafka's processors list their state stores; a self-join
that reads its relation once shows one scan and one store where the join shows two.

    Topologies:
       Sub-topology: 0
        Source: SCAN-0000000000 (relations: [events])
          --> FILTER-0000000001
        ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Physical operators that keep rows while they work, and so have a "store".
_STATEFUL = (
    "Sort", "Window", "SortMergeJoin", "BroadcastHashJoin", "ShuffledHashJoin", "BroadcastNestedLoopJoin",
    "HashAggregate", "ObjectHashAggregate", "SortAggregate", "Exchange", "BroadcastExchange",
)


@dataclass
class Node:
    name: str  # e.g. SORT-0000000003
    kind: str  # Spark's node name
    detail: str
    children: list["Node"] = field(default_factory=list)
    parent: "Node | None" = None

    @property
    def is_exchange(self) -> bool:
        return self.kind in ("Exchange", "BroadcastExchange")


def plan_of(frame):
    """The physical plan Spark would run for ``frame`` (before adaptive re-planning)."""
    plan = frame._jdf.queryExecution().executedPlan()
    if plan.nodeName() == "AdaptiveSparkPlan":
        plan = plan.executedPlan()
    return plan


def read_plan(plan) -> Node:
    counter = [0]

    def visit(java_node) -> Node:
        children = [visit(java_node.children().apply(i)) for i in range(java_node.children().size())]
        kind = str(java_node.nodeName())
        node = Node(f"{_label(kind)}-{counter[0]:010d}", kind, "", children)
        node.detail = _detail(java_node, kind, node.name)
        counter[0] += 1
        for child in children:
            child.parent = node
        return node

    return visit(plan)


def describe(root: Node) -> str:
    """The topology text of a plan tree."""
    # sub-topologies: cut every edge below an exchange; number them from the leaves up
    groups: list[list[Node]] = []

    def collect(node: Node, group: list[Node]) -> None:
        group.append(node)
        for child in node.children:
            if child.is_exchange:
                new: list[Node] = []
                collect(child, new)
                groups.append(new)
            else:
                collect(child, group)

    top: list[Node] = []
    collect(root, top)
    groups.append(top)
    lines = ["Topologies:"]
    for number, group in enumerate(groups):
        lines.append(f"   Sub-topology: {number}")
        members = {id(n) for n in group}
        for node in sorted(group, key=lambda n: n.name.rsplit("-", 1)[1]):
            inputs = [c for c in node.children]
            reads_shuffle = [c for c in inputs if id(c) not in members]
            role = "Source" if not inputs or (reads_shuffle and len(reads_shuffle) == len(inputs)) else "Processor"
            if node.parent is None or id(node.parent) not in members:
                role = "Sink" if node.parent is not None else role
            lines.append(f"    {role}: {node.name} ({node.detail})")
            if node.parent is not None:
                lines.append(f"      --> {node.parent.name}")
            else:
                lines.append("      --> none")
            if inputs:
                lines.append(f"      <-- {', '.join(c.name for c in inputs)}")
    return "\n".join(lines)


def topology(frame) -> str:
    return describe(read_plan(plan_of(frame)))


def _label(kind: str) -> str:
    return kind.upper().replace(" ", "")


def _detail(java_node, kind: str, name: str) -> str:
    if not java_node.children().size():
        return f"relations: [{_relation_name(java_node)}]"
    if kind in _STATEFUL:
        return f"stores: [{name}-store]"
    return "stores: []"


def _relation_name(java_node) -> str:
    """What a leaf reads: the last folder of a file scan's location, else the kind of scan."""
    text = str(java_node.simpleString(400))
    if "Location:" in text and "[" in text.split("Location:", 1)[1]:
        path = text.split("Location:", 1)[1].split("[", 1)[1].split("]", 1)[0].split(",")[0]
        return path.rstrip("/").rsplit("/", 1)[-1]
    return str(java_node.nodeName())
