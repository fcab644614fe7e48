-- Debezium change events from Postgres, joined as tables: each order with its customer's
-- current name, kept up to date as either table changes.
--
--   sqlext run sql_examples/debezium.sql
--
-- format => 'debezium' reads the envelope as Spark reads it from a topic's JSON or Parquet
-- files (or a Kafka value parsed with from_json): before, after, op, ts_ms and source. Changes
-- are ordered by source.lsn, Postgres's log position, which names the ordering column of the
-- rows that come out: source_lsn.

-- The customers table: a snapshot (op 'r'), a rename ('u') and a new customer ('c').
CREATE OR REPLACE TEMP VIEW customers_cdc AS
SELECT * FROM VALUES
  (NULL,                               named_struct('id', 1, 'name', 'Ada'),   'r', 1700000000100L,
   named_struct('lsn', 100L, 'txId', 7L, 'db', 'shop', 'table', 'customers')),
  (named_struct('id', 1, 'name', 'Ada'), named_struct('id', 1, 'name', 'Ada L.'), 'u', 1700000000300L,
   named_struct('lsn', 300L, 'txId', 9L, 'db', 'shop', 'table', 'customers')),
  (NULL,                               named_struct('id', 2, 'name', 'Bo'),    'c', 1700000000400L,
   named_struct('lsn', 400L, 'txId', 10L, 'db', 'shop', 'table', 'customers'))
AS customers_cdc(before, after, op, ts_ms, source);

-- The orders table: order 10 is placed, moves to customer 2, and is deleted; the delete is
-- followed by Kafka's tombstone (a NULL envelope), which carries nothing and is skipped.
CREATE OR REPLACE TEMP VIEW orders_cdc AS
SELECT * FROM VALUES
  (NULL,                                   named_struct('id', 10, 'customer_id', 1), 'c', 1700000000200L,
   named_struct('lsn', 200L, 'txId', 8L, 'db', 'shop', 'table', 'orders')),
  (named_struct('id', 10, 'customer_id', 1), named_struct('id', 10, 'customer_id', 2), 'u', 1700000000500L,
   named_struct('lsn', 500L, 'txId', 11L, 'db', 'shop', 'table', 'orders')),
  (named_struct('id', 10, 'customer_id', 2), NULL,                                   'd', 1700000000600L,
   named_struct('lsn', 600L, 'txId', 12L, 'db', 'shop', 'table', 'orders')),
  (NULL, NULL, NULL, NULL, NULL)
AS orders_cdc(before, after, op, ts_ms, source);

-- The change feed of the joined table.
SELECT *
FROM FK_JOIN(
  left        => TABLE(orders_cdc),
  right       => TABLE(customers_cdc),
  left_key    => 'id',
  foreign_key => 'customer_id',
  right_key   => 'id',
  format      => 'debezium')
ORDER BY source_lsn, id, _change_type DESC;
