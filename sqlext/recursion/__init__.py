"""The batch recursion's executor (``RECURSIVE_EXPAND``, what ``WITH RECURSIVE`` is rewritten
to), on the driver: which path fits a recursion and the Spark jobs that run it
(:mod:`.paths`): the graph walk (:mod:`.walk`), path doubling (:mod:`.jump`) or level by
level (:mod:`.levels`). What runs inside Spark's workers over Arrow data, the walk itself,
is :mod:`sqlext.udfs.recursive_expand`."""
