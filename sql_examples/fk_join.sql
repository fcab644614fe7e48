-- FK_JOIN: orders joined to their customer, kept up to date as both change.
--
--   sqlext run sql_examples/fk_join.sql

-- Customers over four commits, in Delta's change-data-feed shape.
CREATE OR REPLACE TEMP VIEW customers_changes AS
SELECT * FROM VALUES
  (1, 'Ada',   'London', 'insert',           1L),
  (2, 'Grace', 'NYC',    'insert',           1L),
  -- commit 3: Ada moves to Paris
  (1, 'Ada',   'London', 'update_preimage',  3L),
  (1, 'Ada',   'Paris',  'update_postimage', 3L),
  -- commit 5: Grace's account is deleted
  (2, 'Grace', 'NYC',    'delete',           5L)
AS customers_changes(id, name, city, _change_type, _commit_version);

-- Orders, as a Kafka-style upsert log (no _change_type; all-NULL values are a tombstone).
CREATE OR REPLACE TEMP VIEW orders_changes AS
SELECT * FROM VALUES
  (100, 1,    25.0, 2L),   -- commit 2: Ada orders
  (101, 2,    40.0, 2L),   -- commit 2: Grace orders
  (102, 3,    10.0, 2L),   -- commit 2: an order for customer 3, who does not exist (yet)
  (101, 1,    40.0, 4L),   -- commit 4: order 101 is reassigned to Ada
  (102, NULL, NULL, 6L)    -- commit 6: order 102 is cancelled (tombstone)
AS orders_changes(order_id, customer_id, amount, _commit_version);

-- The minimal change feed of "orders with their customer" (inner join): Ada's move updates
-- her order; the reassignment moves 101 from Grace to Ada; Grace's deletion no longer
-- touches any order; order 102 never joined, so its cancellation changes nothing.
SELECT *
FROM FK_JOIN(
  left        => TABLE(orders_changes),
  right       => TABLE(customers_changes),
  left_key    => 'order_id',
  foreign_key => 'customer_id',
  right_key   => 'id',
  join_type   => 'inner',
  emit        => 'changes')
ORDER BY _commit_version, order_id, _change_type DESC;

-- The records a Kafka Streams foreign-key left join forwards: order 102 is forwarded with
-- NULL customer columns, Ada's move re-forwards every order pointing at her (the prefix
-- scan), and the cancellation is a tombstone.
SELECT *
FROM FK_JOIN(
  left        => TABLE(orders_changes),
  right       => TABLE(customers_changes),
  left_key    => 'order_id',
  foreign_key => 'customer_id',
  right_key   => 'id',
  join_type   => 'left',
  emit        => 'records')
ORDER BY _commit_version, order_id;

-- The joined table after the last commit.
SELECT *
FROM FK_JOIN(
  left        => TABLE(orders_changes),
  right       => TABLE(customers_changes),
  left_key    => 'order_id',
  foreign_key => 'customer_id',
  right_key   => 'id',
  join_type   => 'left',
  emit        => 'final')
ORDER BY order_id;
