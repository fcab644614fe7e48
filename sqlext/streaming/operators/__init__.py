"""The incremental operators, one module per function (with the function's stem): each runs
one step over a micro-batch's rows and its keyed state, placed on the driver or the executors
by the engine (:mod:`sqlext.streaming.engine`). The aggregate runs a GROUP BY over a call's
change feed; the self-join and the recursion run a statement of their own over one stream."""
