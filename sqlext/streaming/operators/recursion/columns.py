"""The names an incremental recursion gives its function in messages and the columns it adds
to its state: each edge's count and each row's whether it is found."""

FUNCTION = "sqlext stream"
# an edge's count in the state (inserts less deletes), and before the batch
COUNT, BEFORE = "__sx_n", "__sx_before"
# whether a row of the recursion is found (a row no longer reached is kept as not found)
FOUND = "__sx_found"
